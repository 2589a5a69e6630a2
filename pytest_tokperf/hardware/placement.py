"""Where an engine runs: a device (``cpu``, ``cuda:0``, ``metal``, ...) and the model's split."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pytest_tokperf.errors import ConfigError

DEVICE_KINDS = ("cpu", "cuda", "rocm", "metal", "vulkan", "sycl", "gpu")
"""``gpu``: a GPU whose API is not known (Ollama says only how much is in VRAM)."""

_NAME_PREFIXES = (
    ("cuda", "cuda"), ("rocm", "rocm"), ("hip", "rocm"), ("vulkan", "vulkan"),
    ("metal", "metal"), ("mtl", "metal"), ("sycl", "sycl"), ("opencl", "opencl"),
    ("cann", "cann"), ("musa", "musa"), ("rpc", "rpc"), ("cpu", "cpu"), ("blas", "cpu"),
)


def backend_of_device_name(name: str) -> str:
    """A ggml device or buffer name -> backend (``CUDA0`` -> ``cuda``)."""
    lowered = name.strip().lower()
    if lowered.endswith(("_host", "_mapped")) or lowered.startswith("cpu"):
        return "cpu"  # CUDA_Host, CPU_Mapped, Metal_Mapped: buffers in system memory
    for prefix, backend in _NAME_PREFIXES:
        if lowered.startswith(prefix):
            return backend
    return "unknown"


@dataclass(frozen=True, slots=True)
class Device:
    """One device: its kind, its index among that kind, and its own name when known."""

    kind: str
    index: int | None = None
    name: str | None = None
    """What the device calls itself (``NVIDIA H200``), from the engine's log or a tool."""

    @property
    def is_gpu(self) -> bool:
        return self.kind != "cpu"

    @property
    def label(self) -> str:
        """``cuda:0``, ``metal``, ``cpu``: the form ``--tokperf-device`` takes."""
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def describe(self) -> str:
        return f"{self.label} ({self.name})" if self.name else self.label

    @classmethod
    def parse(cls, text: str, where: str = "--tokperf-device") -> Device:
        """``cpu``, ``metal``, ``cuda``, ``cuda:1``, ``vulkan:0``, ``rocm:0``, ``gpu``."""
        match = re.fullmatch(r"\s*([a-z]+)(?::(\d+))?\s*", text.lower())
        if match is None or match.group(1) not in DEVICE_KINDS:
            raise ConfigError(
                f"{where} {text!r} is not a device; use cpu, metal, cuda:N, rocm:N, "
                f"vulkan:N or sycl:N (N is the device index, 0 for the first)"
            )
        kind = match.group(1)
        index = int(match.group(2)) if match.group(2) is not None else None
        if kind in ("cpu", "metal") and index is not None:
            raise ConfigError(f"{where} {text!r}: {kind} takes no index; use {kind!r}")
        if kind in ("cuda", "rocm", "vulkan", "sycl") and index is None:
            index = 0
        return cls(kind, index)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the model's bytes are read from during decode."""

    device: Device | None
    """None: the engine did not say; the machine's first device is assumed."""
    gpu_fraction: float | None = None
    """Share of the bytes per token on the GPU (None: not known, all on ``device``)."""
    gpu_count: int = 1
    """GPUs the layers are split over (a pipeline: one GPU works at a time)."""
    source: str = ""
    """How this was learned, for messages."""

    def __post_init__(self) -> None:
        if self.gpu_fraction is not None and not 0.0 <= self.gpu_fraction <= 1.0:
            raise ConfigError(f"GPU share {self.gpu_fraction!r} must be between 0 and 1")
