"""Where a session's ceilings come from: the model file and the device the engine uses.

Bytes per token at the mean decode depth over the engine's device's bandwidth (docs/design.md,
"The ceiling"); system RAM is probed around each measurement, at most ``PROBE_BUDGET_S`` a
session and not while the machine is busy once the host has a reached figure.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tokperf.ceiling import compute_ceiling
from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.hardware.placement import Device, Placement
from pytest_tokperf.hardware.probe import DEFAULT_DURATION_S
from pytest_tokperf.results import (
    BUSY_NOTE,
    Bandwidth,
    BenchResult,
    Ceiling,
    Footprint,
    HardwareInfo,
    MachineLoad,
    ModelInfo,
    Workload,
)

if TYPE_CHECKING:
    from pytest_tokperf.hardware.bandwidth import DeviceBandwidth
    from pytest_tokperf.hardware.probe import ReadProbe
    from pytest_tokperf.hardware.reached import ReachedBandwidth
    from pytest_tokperf.model.gguf_file import GGUFModel
    from pytest_tokperf.model.hf_file import HFModel

DEFAULT_KV_TYPE = "f16"
PROBE_BUDGET_S = 5.0
"""Seconds a session spends probing (set-up included) once the host has a reached figure."""
SETUP_BUDGET_S = 2.0
"""Seconds the probe buffer's first touch may take once the host has a reached figure."""
BUSY_WINDOW_S = 0.1
"""How long the machine is watched before a probe to tell whether it is busy now."""


@dataclass
class ModelFiles:
    """Every model file a run touches, parsed once (the ceiling needs the tensors, the
    recorder the identity): path -> parsed model, or the error that refused it."""

    _parsed: dict[str, GGUFModel | HFModel | ModelFileError] = field(default_factory=dict)

    def load(self, path: Path) -> GGUFModel | HFModel:
        """The parsed model at ``path`` (a GGUF file, or a Hugging Face folder or a file in
        one); ``ModelFileError`` (remembered) when it is not one."""
        from pytest_tokperf.model.gguf_file import load_gguf
        from pytest_tokperf.model.hf_file import is_hf_folder, load_hf

        key = str(path)
        if key not in self._parsed:
            try:
                self._parsed[key] = load_hf(path) if is_hf_folder(path) else load_gguf(path)
            except ModelFileError as exc:
                self._parsed[key] = exc
        found = self._parsed[key]
        if isinstance(found, ModelFileError):
            raise found
        return found

    def info(self, path: Path) -> ModelInfo:
        """The identity stored beside a measurement: from the parse, or the bare file."""
        if not path.exists():
            return ModelInfo(file_name=path.name, path=str(path))
        try:
            return self.load(path).info
        except ModelFileError:
            size = path.stat().st_size if path.is_file() else None
            return ModelInfo(file_name=path.name, path=str(path), file_bytes=size)


def mean_decode_depth(workload: Workload) -> int:
    """KV positions read per decoded token, averaged over the generated tokens."""
    return workload.depth_tokens + workload.prompt_tokens + (workload.generate_tokens - 1) // 2


@dataclass
class CeilingSource:
    """Computes the ceiling for each measured workload on the engine's own device."""

    explicit_bandwidth: float | None = None
    threads: int | None = None
    kv_type: str = DEFAULT_KV_TYPE
    kv_type_v: str = DEFAULT_KV_TYPE
    """The K and V cache types (llama-server ``-ctk``, ``-ctv``)."""
    probe_duration_s: float = DEFAULT_DURATION_S
    """Each probe's reading budget (the buffer is set up once, outside it)."""
    calibration: Path | None = None
    """Where the probes are kept per host between sessions (None: this session only)."""
    models: ModelFiles = field(default_factory=ModelFiles)
    device: Device | None = None
    """``--tokperf-device``: where the engine runs, overriding what it says."""
    _hardware: HardwareInfo | None = field(default=None, init=False)
    _cpu: HardwareInfo | None = field(default=None, init=False)
    _devices: dict[str, HardwareInfo | None] = field(default_factory=dict, init=False)
    _placement: Placement | None = field(default=None, init=False)
    _last: DeviceBandwidth | None = field(default=None, init=False)
    _probe: ReadProbe | None = field(default=None, init=False)
    _reached: ReachedBandwidth | None = field(default=None, init=False)
    _around: list[float] = field(default_factory=list, init=False)
    """The probes since the latest ceiling: those around the next measurement."""
    problems: list[str] = field(default_factory=list, init=False)
    probe_budget_s: float = PROBE_BUDGET_S
    setup_budget_s: float = SETUP_BUDGET_S
    busy_now: Callable[[], MachineLoad] | None = None
    """The machine right now (default: ``BUSY_WINDOW_S`` of ``hardware.load``)."""
    probe_s: float = field(default=0.0, init=False)
    """Seconds this session spent probing, set-ups included."""
    skipped: list[str] = field(default_factory=list, init=False)
    _last_load: MachineLoad | None = field(default=None, init=False)
    """The machine during the measurement a ``probe_after`` follows."""

    @property
    def hardware(self) -> HardwareInfo | None:
        """The device the latest ceiling was computed for, else the machine's first device."""
        if self._last is not None and self._last.hardware is not None:
            if self._last.hardware.kind == "cpu":
                return self._cpu_info()
            return self._last.hardware
        return self._hardware

    def detect(self) -> HardwareInfo:
        """Detect the machine once (no probe); later probes refresh the measured figure."""
        if self._hardware is None:
            from pytest_tokperf.hardware.detect import detect_hardware

            prefer = "cpu" if self.device is not None and not self.device.is_gpu else None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._hardware = detect_hardware(
                    explicit_bandwidth=self.explicit_bandwidth, probe=False, threads=self.threads,
                    prefer=prefer,
                )
            if self._hardware.kind != "cpu":  # on the CPU the probe supplies the figure
                for warning in caught:
                    warnings.warn_explicit(warning.message, warning.category,
                                           warning.filename, warning.lineno)
        return self._hardware

    def _cpu_info(self) -> HardwareInfo:
        """The CPU with its latest probe: the machine itself, or its CPU on a GPU box."""
        machine = self.detect()
        if machine.kind == "cpu":
            return machine
        if self._cpu is None:
            from pytest_tokperf.hardware.bandwidth import device_hardware

            found = device_hardware(Device("cpu"))
            self._cpu = found if found is not None and found.kind == "cpu" else HardwareInfo(
                name="CPU", kind="cpu", detail="no CPU detector for this platform")
        return self._cpu

    def _store_cpu(self, info: HardwareInfo) -> None:
        if self.detect().kind == "cpu":
            self._hardware = info
        else:
            self._cpu = info

    def _reads_ram(self) -> bool:
        """Does the engine read (part of) the model from system RAM? Then probe it."""
        if self.explicit_bandwidth is not None:
            return False
        placement = self._placement or (Placement(self.device) if self.device else None)
        if placement is None or placement.device is None:
            return self.detect().kind == "cpu"
        if not placement.device.is_gpu:
            return True
        return placement.gpu_fraction is not None and placement.gpu_fraction < 1.0

    def probe(self) -> HardwareInfo:
        """Measure read bandwidth now (before a measurement) when the engine reads RAM."""
        if not self._reads_ram():
            return self.detect()
        from pytest_tokperf.hardware.probe import ReadProbe
        from pytest_tokperf.hardware.reached import ReachedBandwidth, calibration_key

        if self._probe is None:
            self._probe = ReadProbe(threads=self.threads)
        if self._reached is None:
            key = calibration_key(self._cpu_info().name, self._probe.threads)
            self._reached = ReachedBandwidth.load(key, self.calibration)
        bounded = self._reached.best is not None and not self._reached.only_busy
        why = self._why_skip()
        busy = why is not None and not why.startswith("the session's probing budget")
        if busy and not bounded:
            why = None  # no quiet figure to fall back on: probe, and keep it marked busy
        if why is None:
            from pytest_tokperf.hardware.probe import ProbeTimeout

            started = time.perf_counter()
            try:
                measured = self._probe.measure(
                    self.probe_duration_s,
                    setup_budget_s=self.setup_budget_s if bounded else None).bandwidth
            except ProbeTimeout as exc:
                why = f"{exc}: the machine is busy"
                self._probe.close()
            finally:
                self.probe_s += time.perf_counter() - started
        if why is not None:
            if not self.skipped:
                self.problems.append(
                    f"bandwidth probe skipped ({why}): the ceiling is the highest figure this "
                    f"host has reached; a probe now would read the neighbours' contention")
            self.skipped.append(why)
            return self._cpu_info()
        self._reached.add(measured.bytes_per_s, busy=busy)
        if self._reached.problem is not None:
            self.problems.append(self._reached.problem)
            self._reached.problem = None
        self._around.append(measured.bytes_per_s)
        cpu = replace(self._cpu_info(), measured_bandwidth=measured)
        self._store_cpu(cpu)
        return cpu

    def _why_skip(self) -> str | None:
        """Why the next probe should not run (its budget spent, the machine busy), or None."""
        if self.probe_s >= self.probe_budget_s:
            return f"the session's probing budget of {self.probe_budget_s:.0f} s is spent"
        load, during = self._last_load, "during the measurement"
        self._last_load = None
        if load is None:
            load = self.busy_now() if self.busy_now is not None else _busy_now()
            during = f"over {load.wall_s:.1f} s before the measurement"
        if load.loaded:
            return f"{BUSY_NOTE} {load.describe(during)}"
        return None

    def probe_after(self, load: MachineLoad | None = None) -> HardwareInfo:
        """Probe again after the measurement (``load``: the machine during it); the CPU
        keeps the higher of the probes around it, stored as measured."""
        if not self._reads_ram():
            return self.detect()
        self._last_load = load
        self.probe()
        cpu = self._cpu_info()
        if not self._around:  # every probe around it skipped: the reached figure judges
            return cpu
        best = max(self._around)
        detail = " and ".join(f"{bw / 1e9:.1f}" for bw in self._around)
        measured = Bandwidth(best, "measured", f"read probe: higher of the probes around the "
                             f"measurement ({detail} GB/s)")
        cpu = replace(cpu, measured_bandwidth=measured)
        self._store_cpu(cpu)
        return cpu

    def reached_bandwidth(self) -> Bandwidth | None:
        """The highest read bandwidth the host has reached (session and kept probes)."""
        return self._reached.bandwidth(self._around) if self._reached is not None else None

    def close(self) -> None:
        """Free the probe buffer (a later probe sets it up again)."""
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def _gpu_info(self, device: Device | None) -> HardwareInfo | None:
        """The GPU the placement names (cached per device), or the machine's own GPU."""
        machine = self.detect()
        if device is None or not device.is_gpu:
            return machine if machine.kind != "cpu" else None
        if device.kind == "metal" and machine.kind == "apple":
            return machine
        if device.label not in self._devices:
            from pytest_tokperf.hardware.bandwidth import device_hardware

            self._devices[device.label] = device_hardware(device)
        return self._devices[device.label]

    def bandwidth_for(self, result: BenchResult) -> DeviceBandwidth:
        """Where ``result``'s engine runs and the bandwidth that gives (probes included)."""
        from pytest_tokperf.engines.speed_settings import placement_of
        from pytest_tokperf.hardware.bandwidth import bandwidth_for

        self._placement = placement_of(result.engine, self.device)
        machine = self.detect()
        cpu = machine if machine.kind == "cpu" else self._cpu
        if self._reads_ram():
            cpu = self.probe_after(result.load)
            reached = self.reached_bandwidth()
            if reached is not None:  # judged against what the host has reached
                cpu = replace(cpu, measured_bandwidth=reached)
            self._around = []
        chosen = bandwidth_for(self._placement, gpu=self._gpu_info(self._placement.device),
                               cpu=cpu, explicit=self.explicit_bandwidth)
        self._last = chosen
        return chosen

    def ceiling_for(self, result: BenchResult, model_path: Path | None) -> Ceiling | None:
        """The decode ceiling for ``result``'s workload, or None with a reason kept."""
        path = model_path or (Path(result.engine.model_path) if result.engine.model_path else None)
        if path is None:
            self.problems.append(
                f"no ceiling: {result.engine.name} did not say where its model is; pass "
                f"--tokperf-model PATH (the GGUF file, or the Hugging Face folder, it serves)"
            )
            return None
        if not path.exists():
            self.problems.append(
                f"no ceiling: the model {str(path)!r} is not readable on this machine"
            )
            return None
        model: GGUFModel | HFModel | None = None
        try:
            model = self.models.load(path)
        except ModelFileError as exc:
            self.problems.append(f"no ceiling: {exc}")
        chosen = self.bandwidth_for(result)
        bandwidth = chosen.bandwidth
        if bandwidth is None:
            self.problems.append(f"no ceiling: {chosen.explanation}")
        if model is None or bandwidth is None:
            return None
        fp = self._footprint(model, result)
        streams = result.workload.concurrency
        if streams > 1:  # one step reads the weights once and every stream's own KV cache
            fp = replace(fp, kv_bytes_per_position=fp.kv_bytes_per_position * streams)
        hardware = chosen.hardware
        return compute_ceiling(fp, bandwidth, hardware.peak_flops if hardware else None)

    def _footprint(self, model: GGUFModel | HFModel, result: BenchResult) -> Footprint:
        """Bytes per token at the workload's mean decode depth, at the types the engine ran:
        its K/V cache types; for a Hugging Face folder its ``dtype`` setting, else the file's."""
        depth = mean_decode_depth(result.workload)
        from pytest_tokperf.model.hf_file import HFModel, hf_footprint, served_dtype

        if isinstance(model, HFModel):
            dtype = served_dtype(dict(result.engine.settings).get("dtype"))
            if dtype is None and result.engine.name == "vllm":
                self.problems.append(
                    f"vLLM does not report the dtype it computes in: bytes per token are "
                    f"counted at the file's ({model.config_dtype or '/'.join(model.dtypes)}); "
                    f"a server started with --dtype float32 reads twice as many per weight"
                )
            return hf_footprint(model, depth, weight_dtype=dtype)
        from pytest_tokperf.engines.speed_settings import ServerSettings
        from pytest_tokperf.model.footprint import footprint

        server = ServerSettings.from_engine(result.engine)
        return footprint(model, depth_tokens=depth,
                         kv_type_k=server.cache_type_k or self.kv_type,
                         kv_type_v=server.cache_type_v or self.kv_type_v)


def _busy_now() -> MachineLoad:
    """The machine over ``BUSY_WINDOW_S``, the engine idle: what is busy is the neighbours'."""
    from pytest_tokperf.hardware.load import engine_idle, machine_load_now

    return engine_idle(machine_load_now(BUSY_WINDOW_S))
