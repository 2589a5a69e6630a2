"""NVIDIA GPUs through NVML (``pynvml``, imported lazily); the device is CUDA's first."""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Any

from pytest_tokperf.hardware.catalog import lookup
from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.results import Bandwidth, HardwareInfo


def nvml_bandwidth_bytes_per_s(max_memory_clock_mhz: float, bus_width_bits: int) -> float:
    """Theoretical peak: clock (MHz) x 1e6 x 2 transfers per clock x bus width in bytes."""
    return max_memory_clock_mhz * 1e6 * 2 * bus_width_bits / 8


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _pick_index(
    nvml: Any, count: int, visible: str | None, cuda_index: int = 0
) -> tuple[int | None, str]:
    """NVML index of the device CUDA calls ``cuda_index``, and a note on how it was chosen."""
    if visible is None:
        if cuda_index >= count:
            return None, f"CUDA device {cuda_index} is missing: NVML sees {count}"
        what = "first NVML device" if cuda_index == 0 else f"NVML device {cuda_index}"
        return cuda_index, what
    entries = [e.strip() for e in visible.split(",")]
    if cuda_index >= len(entries):
        return None, f"CUDA_VISIBLE_DEVICES={visible!r} has no device {cuda_index}"
    first = entries[cuda_index]
    if first == "" or first.startswith("-") or any(
        e == "" or e.startswith("-") for e in entries[:cuda_index]
    ):
        return None, f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    if first.isdigit():
        index = int(first)
        if index >= count:
            return None, f"CUDA_VISIBLE_DEVICES={visible!r} names a missing GPU"
        return index, f"CUDA_VISIBLE_DEVICES index {index}, read in PCI bus order"
    if first.startswith("MIG-"):
        return 0, f"MIG instance {first}: reporting NVML device 0, a MIG slice has less bandwidth"
    for index in range(count):
        uuid = _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(index)))
        if uuid.startswith(first):
            return index, f"CUDA_VISIBLE_DEVICES UUID {first}"
    return 0, f"CUDA_VISIBLE_DEVICES {first!r} not matched by UUID; first NVML device"


def detect_nvidia(
    nvml: ModuleType | None = None, visible: str | None = None, cuda_index: int = 0
) -> HardwareInfo | None:
    """The GPU CUDA calls ``cuda_index``, or None (no ``pynvml``, driver or GPU)."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return None
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error:
        return None
    try:
        return _describe(nvml, nvml_error, visible, cuda_index)
    except nvml_error:
        return None
    finally:
        with contextlib.suppress(nvml_error):
            nvml.nvmlShutdown()


def _describe(
    nvml: Any, nvml_error: type[BaseException], visible: str | None, cuda_index: int
) -> HardwareInfo | None:
    count = int(nvml.nvmlDeviceGetCount())
    if count == 0:
        return None
    index, how = _pick_index(nvml, count, visible, cuda_index)
    if index is None:
        return None
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(handle))
    memory_bytes = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)

    def optional(call: str, *args: Any) -> Any:
        try:
            return getattr(nvml, call)(*args)
        except (nvml_error, AttributeError):
            return None

    driver = optional("nvmlSystemGetDriverVersion")
    clock_mhz = optional("nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, "NVML_CLOCK_MEM", 2))
    bus_bits = optional("nvmlDeviceGetMemoryBusWidth", handle)
    entry = lookup(name, kind="gpu")

    spec: Bandwidth | None = None
    if clock_mhz and bus_bits:
        spec = Bandwidth(
            nvml_bandwidth_bytes_per_s(float(clock_mhz), int(bus_bits)),
            "nvml",
            f"max memory clock {clock_mhz} MHz x 2 x {bus_bits}-bit / 8",
        )
    elif entry is not None:
        spec = entry.bandwidth()

    notes = [f"NVML device {index} of {count} ({how})"]
    if entry is not None:
        notes.append(f"catalog {entry.name}: {format_bandwidth(entry.bandwidth_bytes_per_s)}")
        if spec is not None and spec.source == "nvml":
            ratio = spec.bytes_per_s / entry.bandwidth_bytes_per_s
            if not 0.8 <= ratio <= 1.25:
                notes.append(f"NVML figure is {ratio:.2f}x the catalog's")
    if count > 1:
        others = (_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i)))
                  for i in range(count) if i != index)
        notes.append("also present: " + ", ".join(others))
    return HardwareInfo(name=name, kind="gpu", driver=_text(driver) if driver is not None else None,
                        memory_bytes=memory_bytes, spec_bandwidth=spec,
                        peak_flops=entry.fp16_flops if entry is not None else None,
                        detail="; ".join(notes))


def parse_nvidia_smi(text: str | None) -> list[tuple[int, str, int | None]]:
    """``nvidia-smi --query-gpu=index,name,memory.total`` CSV -> [(index, name, bytes)]."""
    gpus: list[tuple[int, str, int | None]] = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        memory = int(parts[2]) * 2**20 if len(parts) > 2 and parts[2].isdigit() else None
        gpus.append((int(parts[0]), parts[1], memory))
    return gpus


NVIDIA_SMI_QUERY = (
    "nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits",
)


def nvidia_by_name(name: str, note: str, memory_bytes: int | None = None, *,
                   figure: bool = True) -> HardwareInfo:
    """A GPU known only by name, without NVML: the catalog's figure (named in the detail
    after ``note`` when ``figure``)."""
    entry = lookup(name, kind="gpu")
    notes = [note]
    if entry is None:
        notes.append(f"{name!r} is not in the hardware catalog")
    elif figure:
        notes.append(f"catalog {entry.name}: {format_bandwidth(entry.bandwidth_bytes_per_s)}")
    return HardwareInfo(name=name, kind="gpu",
                        memory_bytes=memory_bytes or (entry.memory_bytes if entry else None),
                        spec_bandwidth=entry.bandwidth() if entry else None,
                        peak_flops=entry.fp16_flops if entry else None, detail="; ".join(notes))
