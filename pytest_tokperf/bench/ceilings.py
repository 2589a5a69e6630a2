"""Where a session's ceilings come from: the model file and this machine, per workload.

Bytes per token come from the GGUF's tensors at the workload's mean KV depth during
decode (prompt + half the generated tokens). Bandwidth comes from, in order: an
explicit ``--tokperf-bandwidth``; a GPU's spec (NVML or the catalog); or, for an
engine on the CPU, a read-bandwidth probe run right before each measurement,
because this kind of machine drifts +/-15-20% within minutes and a ceiling must be
measured next to the decode it judges.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tokperf.ceiling import compute_ceiling
from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, Workload

if TYPE_CHECKING:
    from pytest_tokperf.model.gguf_file import GGUFModel

DEFAULT_KV_TYPE = "f16"


def mean_decode_depth(workload: Workload) -> int:
    """KV positions read per decoded token, averaged over the generated tokens."""
    return workload.depth_tokens + workload.prompt_tokens + (workload.generate_tokens - 1) // 2


def kv_type_from_args(args: tuple[str, ...]) -> str:
    """The K cache type a llama-server command line asks for (f16 when unset)."""
    for flag in ("-ctk", "--cache-type-k"):
        for i, arg in enumerate(args):
            if arg == flag and i + 1 < len(args):
                return args[i + 1].lower()
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1].lower()
    return DEFAULT_KV_TYPE


@dataclass
class CeilingSource:
    """Computes the ceiling for each measured workload; keeps the latest hardware."""

    explicit_bandwidth: float | None = None
    threads: int | None = None
    kv_type: str = DEFAULT_KV_TYPE
    probe_duration_s: float = 2.0
    _hardware: HardwareInfo | None = field(default=None, init=False)
    _models: dict[str, GGUFModel | None] = field(default_factory=dict, init=False)
    problems: list[str] = field(default_factory=list, init=False)

    @property
    def hardware(self) -> HardwareInfo | None:
        return self._hardware

    def detect(self) -> HardwareInfo:
        """Detect the machine once (no probe); later probes refresh the measured figure."""
        if self._hardware is None:
            from pytest_tokperf.hardware.detect import detect_hardware

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._hardware = detect_hardware(
                    explicit_bandwidth=self.explicit_bandwidth, probe=False, threads=self.threads
                )
            if self._hardware.kind != "cpu":  # on the CPU the probe supplies the figure
                for warning in caught:
                    warnings.warn_explicit(warning.message, warning.category,
                                           warning.filename, warning.lineno)
        return self._hardware

    def probe(self) -> HardwareInfo:
        """Measure read bandwidth now (before a measurement) when memory is the CPU's."""
        hardware = self.detect()
        if hardware.kind != "cpu" or self.explicit_bandwidth is not None:
            return hardware
        from pytest_tokperf.hardware.probe import probe_read_bandwidth

        measured = probe_read_bandwidth(threads=self.threads, duration_s=self.probe_duration_s)
        self._hardware = replace(hardware, measured_bandwidth=measured.bandwidth)
        return self._hardware

    def probe_after(self) -> HardwareInfo:
        """Probe again after the measurement and keep the higher of the two figures.

        This VM's bandwidth moves within seconds; a ceiling that the decode between two
        probes exceeds is a wrong ceiling, so the best sustained figure around the
        measurement is the one it is judged against.
        """
        before = self._hardware.measured_bandwidth if self._hardware is not None else None
        after = self.probe().measured_bandwidth
        if before is None or after is None or self._hardware is None:
            return self.detect()
        best = max(before, after, key=lambda b: b.bytes_per_s)
        detail = (f"{best.detail}; higher of the probes before ({before.bytes_per_s / 1e9:.1f} "
                  f"GB/s) and after ({after.bytes_per_s / 1e9:.1f} GB/s) the measurement")
        self._hardware = replace(self._hardware, measured_bandwidth=replace(best, detail=detail))
        return self._hardware

    def _model(self, path: Path) -> GGUFModel | None:
        from pytest_tokperf.model.gguf_file import load_gguf

        key = str(path)
        if key not in self._models:
            try:
                self._models[key] = load_gguf(path)
            except ModelFileError as exc:
                self.problems.append(f"no ceiling: {exc}")
                self._models[key] = None
        return self._models[key]

    def ceiling_for(self, result: BenchResult, model_path: Path | None) -> Ceiling | None:
        """The decode ceiling for ``result``'s workload, or None with a reason kept."""
        from pytest_tokperf.model.footprint import footprint

        path = model_path or (Path(result.engine.model_path) if result.engine.model_path else None)
        if path is None:
            self.problems.append(
                f"no ceiling: {result.engine.name} did not say where its model file is; for "
                f"an attached llama-server pass --tokperf-model PATH (the GGUF it serves)"
            )
            return None
        if not path.is_file():
            self.problems.append(
                f"no ceiling: the model file {str(path)!r} is not readable on this machine"
            )
            return None
        model = self._model(path)
        hardware = self.probe_after()
        bandwidth = hardware.bandwidth
        if model is None or bandwidth is None:
            return None
        fp = footprint(model, depth_tokens=mean_decode_depth(result.workload), kv_type=self.kv_type)
        streams = result.workload.concurrency
        if streams > 1:
            # One decode step reads the weights once for all streams and every stream's own
            # KV cache, and yields one token per stream: per stream the bound is
            # bandwidth / (weights + streams x KV). Far below it, compute is the wall.
            fp = replace(fp, kv_bytes_per_position=fp.kv_bytes_per_position * streams)
        return compute_ceiling(fp, bandwidth, hardware.peak_flops)
