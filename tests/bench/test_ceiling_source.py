"""Per-workload ceilings: KV depth, KV type from server args, probes around a measurement."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import pytest_tokperf.hardware.probe as probe_mod
from pytest_tokperf.bench.ceilings import CeilingSource, ModelFiles, mean_decode_depth
from pytest_tokperf.bench.run import ceiling_source
from pytest_tokperf.ceiling import check_efficiency
from pytest_tokperf.hardware.reached import ReachedBandwidth, calibration_key
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.results import Bandwidth, BenchResult, HardwareInfo, MachineLoad, Workload
from pytest_tokperf.settings import resolve
from tests.support.storage_factory import make_engine, make_result


def test_mean_decode_depth() -> None:
    assert mean_decode_depth(Workload(prompt_tokens=64, generate_tokens=129)) == 128
    assert mean_decode_depth(Workload(prompt_tokens=10, generate_tokens=2, depth_tokens=100)) == 110


@pytest.mark.parametrize(("args", "kv"), [
    ((), ("f16", "f16")), (("-ctk", "q8_0"), ("q8_0", "f16")),
    (("--cache-type-k=Q4_0",), ("q4_0", "f16")),
    (("-t", "2", "--cache-type-k", "q8_0", "-ctv", "q8_0"), ("q8_0", "q8_0")),
])
def test_the_kv_cache_types_come_from_the_server_args(
    args: tuple[str, ...], kv: tuple[str, str], tmp_path: Path
) -> None:
    settings = resolve(cli=lambda _: None, ini=lambda _: None, env={}, rootdir=tmp_path,
                       server_args=args)
    source = ceiling_source(settings, ModelFiles())
    assert (source.kv_type, source.kv_type_v) == kv


class _FakeProbe:
    """Stands in for ``ReadProbe``: each ``measure`` returns the next figure."""

    instances = 0
    latest: _FakeProbe | None = None

    def __init__(self, figures: list[float], threads: int | None = None) -> None:
        self.figures = figures
        self.threads = threads or 1
        self.budgets: list[float | None] = []
        _FakeProbe.instances += 1
        _FakeProbe.latest = self

    def measure(self, duration_s: float = 0.5,
                setup_budget_s: float | None = None) -> probe_mod.ProbeResult:
        self.budgets.append(setup_budget_s)
        value = self.figures.pop(0)
        if value == SLOW_SETUP:
            raise probe_mod.ProbeTimeout("the probe buffer's set-up passed its 2.0 s budget")
        return probe_mod.ProbeResult(Bandwidth(value, "measured", "fake probe"), (value,),
                                     self.threads, 1, 1, 0.0)

    def close(self) -> None:
        pass


def _probe_sequence(monkeypatch: pytest.MonkeyPatch, figures: list[float]) -> None:
    _FakeProbe.instances = 0
    monkeypatch.setattr(probe_mod, "ReadProbe",
                        lambda threads=None: _FakeProbe(figures, threads))


SLOW_SETUP = -1.0
"""A figure that makes the fake probe's set-up pass its budget."""
QUIET = MachineLoad(wall_s=0.1, cpus=2, busy_cpus=0.1, engine_cpus=0.0, own_cpus=0.05,
                    steal=0.0)
BUSY = dataclasses.replace(QUIET, busy_cpus=1.9)


def _cpu_source(**kwargs: Any) -> CeilingSource:
    kwargs.setdefault("busy_now", lambda: QUIET)
    source = CeilingSource(threads=2, **kwargs)
    source._hardware = HardwareInfo(name="cpu", kind="cpu")  # skip detection
    return source


def _cpu_result(test_model: Path) -> BenchResult:
    engine = make_engine(model_path=str(test_model), backend="cpu", settings=())
    return dataclasses.replace(make_result(engine=engine),
                               workload=Workload(prompt_tokens=64, generate_tokens=65))


def test_ceiling_uses_the_higher_probe_around_the_measurement(
    monkeypatch: pytest.MonkeyPatch, test_model: Path
) -> None:
    _probe_sequence(monkeypatch, [30e9, 40e9])
    source = _cpu_source()
    source.probe()
    ceiling = source.ceiling_for(_cpu_result(test_model), None)
    assert ceiling is not None
    expected = footprint(load_gguf(test_model), depth_tokens=96)
    assert ceiling.footprint.total_bytes == expected.total_bytes
    assert ceiling.decode_tokens_per_s == pytest.approx(40e9 / expected.total_bytes)
    assert "probed around this measurement: 30.0 GB/s and 40.0 GB/s" in ceiling.bandwidth.detail


def test_decode_is_judged_against_the_highest_bandwidth_the_host_reached(
    monkeypatch: pytest.MonkeyPatch, test_model: Path
) -> None:
    # the second measurement's probes both catch a low phase: its ceiling stays at the
    # 60 GB/s the host has shown, and the stored hardware keeps what was probed around it
    _probe_sequence(monkeypatch, [60e9, 40e9, 30e9, 35e9])
    source = _cpu_source()
    for _ in range(2):
        source.probe()
        ceiling = source.ceiling_for(_cpu_result(test_model), None)
        assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 60e9
    assert _FakeProbe.instances == 1  # one probe (one buffer) for the session
    detail = ceiling.bandwidth.detail
    assert detail.startswith("highest read bandwidth this host has reached, 60.0 GB/s: best "
                             "of 4 probes this session (")
    assert detail.endswith("2 threads); probed around this measurement: 30.0 GB/s and 35.0 GB/s")
    hardware = source.hardware
    assert hardware is not None and hardware.measured_bandwidth is not None
    assert hardware.measured_bandwidth.bytes_per_s == 35e9
    message = check_efficiency(0.1, ceiling, 0.5).message
    assert "highest read bandwidth this host has reached" in message  # says which


def test_reached_bandwidth_is_kept_per_host_between_sessions(
    monkeypatch: pytest.MonkeyPatch, test_model: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "bandwidth.json"
    _probe_sequence(monkeypatch, [50e9, 45e9, 30e9, 32e9])
    first = _cpu_source(calibration=kept)
    first.probe()
    first.ceiling_for(_cpu_result(test_model), None)
    second = _cpu_source(calibration=kept)
    second.probe()
    ceiling = second.ceiling_for(_cpu_result(test_model), None)
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 50e9
    assert f"best of 2 probes this session and 2 kept from earlier sessions in {kept}" in (
        ceiling.bandwidth.detail)
    # another thread count has figures of its own
    assert ReachedBandwidth.load(calibration_key("cpu", 2), kept).best == 50e9
    assert ReachedBandwidth.load(calibration_key("cpu", 1), kept).best is None


def test_kept_probes_age_out_and_a_broken_file_is_a_note(tmp_path: Path) -> None:
    kept = tmp_path / "bandwidth.json"
    key = calibration_key("cpu", 2)
    kept.write_text(json.dumps({"format": 1, "hosts": {key: [
        [90e9, "2020-01-01T00:00:00+00:00"], [40e9, "2999-01-01T00:00:00+00:00"]]}}))
    assert ReachedBandwidth.load(key, kept).best == 40e9  # the 2020 figure aged out
    kept.write_text("{not json")
    broken = ReachedBandwidth.load(key, kept)
    assert broken.best is None and broken.problem is not None
    broken.add(33e9)  # rewrites the file
    assert ReachedBandwidth.load(key, kept).best == 33e9


def test_explicit_bandwidth_never_probes(monkeypatch: pytest.MonkeyPatch, test_model: Path) -> None:
    _probe_sequence(monkeypatch, [])  # any probe would pop from an empty list
    source = CeilingSource(explicit_bandwidth=1e12)
    result = make_result(engine=make_engine(model_path=str(test_model)))
    ceiling = source.ceiling_for(result, None)
    assert ceiling is not None and ceiling.bandwidth.source == "explicit"


def test_missing_model_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    source = CeilingSource(explicit_bandwidth=1e12)
    assert source.ceiling_for(make_result(engine=make_engine(model_path=None)), None) is None
    missing = make_result(engine=make_engine(model_path=str(tmp_path / "gone.gguf")))
    assert source.ceiling_for(missing, None) is None
    assert any("did not say where its model is" in p for p in source.problems)
    assert any("gone.gguf' is not readable" in p for p in source.problems)


RTX_4090_INFO = HardwareInfo(name="NVIDIA GeForce RTX 4090", kind="gpu",
                             spec_bandwidth=Bandwidth(1008e9, "nvml", "fake NVML"))


def _gpu_box(source: CeilingSource, gpu: HardwareInfo = RTX_4090_INFO) -> None:
    """A machine whose first device is an NVIDIA GPU (detection skipped), with a CPU."""
    source._hardware = gpu
    source._cpu = HardwareInfo(name="EPYC", kind="cpu")
    source._devices["cuda:0"] = gpu


def test_cpu_engine_on_a_gpu_box_is_judged_by_the_cpu_probe(
    monkeypatch: pytest.MonkeyPatch, test_model: Path
) -> None:
    _probe_sequence(monkeypatch, [50e9, 55e9, 53e9])
    source = CeilingSource(threads=2, busy_now=lambda: QUIET)
    _gpu_box(source)
    engine = make_engine(model_path=str(test_model), backend="cpu", settings=())
    source.probe()  # the engine's device is not known before its first result: no probe
    ceiling = source.ceiling_for(make_result(engine=engine), None)
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 50e9  # probed after
    source.probe()  # known now: the CPU is probed before the next measurement too
    ceiling = source.ceiling_for(make_result(engine=engine), None)
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 55e9
    assert source._placement is not None and source._placement.device is not None
    assert source._placement.device.label == "cpu"
    assert source.hardware is not None and source.hardware.name == "EPYC"


def test_cuda_engine_is_judged_by_its_gpu_and_never_probes(
    monkeypatch: pytest.MonkeyPatch, test_model: Path
) -> None:
    _probe_sequence(monkeypatch, [])
    source = CeilingSource(threads=2, busy_now=lambda: QUIET)
    _gpu_box(source)
    engine = make_engine(model_path=str(test_model), backend="cuda",
                         settings=(("server_args", "-ngl 99"),))
    source.probe()
    ceiling = source.ceiling_for(make_result(engine=engine), None)
    assert ceiling is not None and ceiling.bandwidth.source == "nvml"
    assert source.hardware is RTX_4090_INFO


def test_partial_offload_ceiling_shows_the_split(
    monkeypatch: pytest.MonkeyPatch, test_model: Path
) -> None:
    _probe_sequence(monkeypatch, [50e9, 50e9])
    source = CeilingSource(threads=2, busy_now=lambda: QUIET)
    _gpu_box(source)
    engine = make_engine(model_path=str(test_model), backend="cuda", settings=(
        ("offloaded_layers", "5"), ("layer_count", "10"),
        ("devices", "CUDA0|NVIDIA GeForce RTX 4090||")))
    ceiling = source.ceiling_for(make_result(engine=engine), None)
    assert ceiling is not None and ceiling.bandwidth.source == "split"
    assert ceiling.bandwidth.bytes_per_s == pytest.approx(1 / (0.5 / 1008e9 + 0.5 / 50e9))
    message = check_efficiency(1.0, ceiling, 0.5).message
    assert "; split: 50% of the bytes on cuda:0 (NVIDIA GeForce RTX 4090)" in message
    assert "50% in system RAM (EPYC, 50.0 GB/s measured)" in message
    assert "llama-server log: offloaded 5/10 layers" in message


def test_device_override_wins(monkeypatch: pytest.MonkeyPatch, test_model: Path) -> None:
    from pytest_tokperf.hardware.placement import Device

    _probe_sequence(monkeypatch, [40e9, 45e9])
    source = CeilingSource(threads=2, device=Device.parse("cpu"), busy_now=lambda: QUIET)
    _gpu_box(source)
    engine = make_engine(model_path=str(test_model), name="vllm", backend="cuda", settings=())
    source.probe()  # the override says the CPU: probe before the measurement
    ceiling = source.ceiling_for(make_result(engine=engine), None)
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 45e9
    assert source._placement is not None and source._placement.source == "--tokperf-device"


def test_kv_types_come_from_the_engine(test_model: Path) -> None:
    source = CeilingSource(explicit_bandwidth=1e12)
    for settings, label in (
        ((("server_args", "-ctk q8_0 -ctv f16"),), "q8_0/f16"),
        ((("cache_type_k", "q4_0"), ("cache_type_v", "q4_0")), "q4_0"),
        ((), "f16"),
    ):
        engine = make_engine(model_path=str(test_model), backend="cpu", settings=settings)
        ceiling = source.ceiling_for(make_result(engine=engine), None)
        assert ceiling is not None and ceiling.footprint.kv_type == label


def test_a_busy_machine_is_not_probed_once_the_host_has_a_reached_figure(
    monkeypatch: pytest.MonkeyPatch, test_model: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "bandwidth.json"
    _probe_sequence(monkeypatch, [50e9, 45e9])
    first = _cpu_source(calibration=kept)
    first.probe()
    first.ceiling_for(_cpu_result(test_model), None)
    assert _FakeProbe.latest is not None and _FakeProbe.latest.budgets == [None, 2.0]
    # a later session on a busy machine: no probe before or after; the kept figure judges
    busy = _cpu_source(calibration=kept, busy_now=lambda: BUSY)
    busy.probe()
    loaded = dataclasses.replace(_cpu_result(test_model), load=BUSY)
    ceiling = busy.ceiling_for(loaded, None)
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 50e9
    assert len(busy.skipped) == 2 and busy.skipped[0].startswith("machine busy: other processes used 1.8")
    assert any(p.startswith("bandwidth probe skipped (machine busy") for p in busy.problems)


def test_a_host_with_no_reached_figure_is_probed_however_busy(
    monkeypatch: pytest.MonkeyPatch, test_model: Path, tmp_path: Path
) -> None:
    from pytest_tokperf.bench.fixture import TokBenchResult
    from pytest_tokperf.errors import MeasuredBusy
    from pytest_tokperf.hardware.reached import LOADED_ONLY

    kept = tmp_path / "bandwidth.json"
    _probe_sequence(monkeypatch, [30e9, 40e9, 17e9, 25e9])
    source = _cpu_source(busy_now=lambda: BUSY, calibration=kept)
    source.probe()  # nothing reached yet: probed, set-up unbounded, kept marked busy
    ceiling = source.ceiling_for(dataclasses.replace(_cpu_result(test_model), load=BUSY), None)
    # no quiet figure to fall back on: the after-probe runs too, and the ceiling says so
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 40e9
    assert ceiling.bandwidth.detail.startswith(LOADED_ONLY) and source.skipped == []
    # a floor against it is neither a pass nor a fail, though the machine was quiet while
    # the repetitions ran
    quiet_result = dataclasses.replace(_cpu_result(test_model), load=QUIET)
    with pytest.raises(MeasuredBusy, match="the ceiling's bandwidth was reached only on a busy"):
        TokBenchResult(result=quiet_result, ceiling=ceiling).assert_efficiency(0.01)
    # the next session, busy again: still probed (only busy figures kept), still said
    again = _cpu_source(busy_now=lambda: BUSY, calibration=kept)
    again.probe()
    assert again.reached_bandwidth().detail.startswith(LOADED_ONLY)  # type: ignore[union-attr]
    # a quiet session's probe replaces the busy figures, higher or not
    quiet = _cpu_source(calibration=kept)
    quiet.probe()
    reached = quiet.reached_bandwidth()
    assert reached is not None and reached.bytes_per_s == 25e9
    assert LOADED_ONLY not in reached.detail


def test_probing_stops_at_its_session_budget_and_a_slow_setup_gives_up(
    monkeypatch: pytest.MonkeyPatch, test_model: Path
) -> None:
    _probe_sequence(monkeypatch, [40e9, SLOW_SETUP, 45e9])
    source = _cpu_source()
    source.probe()
    source.probe()  # its set-up passed the budget: skipped, the machine said busy
    assert source.skipped[-1].endswith("budget: the machine is busy")
    source.probe_s = source.probe_budget_s  # as if 5 s were spent
    source.probe()
    assert source.skipped[-1] == "the session's probing budget of 5 s is spent"
    ceiling = source.ceiling_for(_cpu_result(test_model), None)
    assert ceiling is not None and ceiling.bandwidth.bytes_per_s == 40e9
