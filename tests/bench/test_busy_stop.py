"""A measurement that reads busy is known and stopped within about a minute, mid-request
too, not after its repetitions; what it measured before is kept (issue 55)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import httpx
import pytest

import pytest_tokperf.bench.fixture as fixture_module
from pytest_tokperf.bench.fixture import TokBench
from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.errors import MeasuredBusy, RequestStopped
from pytest_tokperf.hardware.load import BusyWatch, LoadSampler
from pytest_tokperf.results import (
    BenchResult,
    Generation,
    GenerationRequest,
    MachineLoad,
    Workload,
)
from tests.bench.test_measure import _RateEngine
from tests.support.fake_faults import FakeFaultyLlama

BUSY = MachineLoad(wall_s=75.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                   steal=0.0, run_queue=3.0)
QUIET = dataclasses.replace(BUSY, busy_cpus=0.45, run_queue=0.2)


class _Readings(LoadSampler):
    """A sampler whose readings come from a list (the last one repeats)."""

    def __init__(self, *readings: MachineLoad) -> None:
        super().__init__()
        self.readings = list(readings)
        self.read = 0

    def start(self) -> LoadSampler:
        return self

    def reading(self) -> MachineLoad:
        self.read += 1
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watch(clock: _Clock, *readings: MachineLoad) -> tuple[BusyWatch, _Readings]:
    sampler = _Readings(*readings)
    return BusyWatch(after_s=60.0, every_s=5.0, sampler=sampler, clock=clock), sampler


def test_a_watch_reads_nothing_before_its_minute_then_stops_for_good() -> None:
    clock = _Clock()
    watch, sampler = _watch(clock, QUIET, BUSY, QUIET)
    clock.now += 59.9
    assert not watch.stopping() and sampler.read == 0  # a clock read per token, no /proc
    clock.now += 0.1
    assert not watch.stopping() and sampler.read == 1 and watch.busy is None  # quiet: on
    clock.now += 4.0
    assert not watch.stopping() and sampler.read == 1  # the next reading is 5 s later
    clock.now += 1.0
    assert watch.stopping() and watch.busy == BUSY and sampler.read == 2
    clock.now += 100.0
    assert watch.stopping() and sampler.read == 2  # busy once is busy for good


class _Slow(_RateEngine):
    """Each generation takes ``step_s`` on ``clock`` and asks its request's ``stop`` at
    the end, as the stream reader does between reads."""

    def __init__(self, clock: _Clock, step_s: float) -> None:
        super().__init__([10.0])
        self.clock = clock
        self.step_s = step_s
        self.stopped = 0

    def generate(self, request: GenerationRequest) -> Generation:
        self.clock.now += self.step_s
        if request.stop is not None and request.stop():
            self.stopped += 1
            raise RequestStopped("http://fake: stopped by its caller")
        return super().generate(request)


def test_a_busy_measurement_stops_mid_request_and_keeps_its_rounds() -> None:
    clock = _Clock()
    engine = _Slow(clock, 25.0)  # warm-up ends at 25 s, rep 1 at 50 s, rep 2 is cut at 75 s
    watch, _ = _watch(clock, BUSY)
    with pytest.raises(MeasuredBusy) as stopped:
        run_workload(engine, Workload(8, 16, repetitions=10),  # type: ignore[arg-type]
                     MeasureOptions(watch=watch, sample_load=False))
    assert engine.calls == 2 and engine.stopped == 1  # not 11 requests
    message = str(stopped.value)
    assert message == ("machine busy: other processes used 1.6 of 2 CPUs since the "
                       "measurement began (run queue 3.0, steal 0%): measuring stopped after "
                       "75 s, neither a pass nor a fail (--tokperf-busy judge measures on)")
    partial = stopped.value.partial
    assert isinstance(partial, BenchResult) and len(partial.samples) == 1
    assert partial.workload.repetitions == 1 and partial.notes[-1] == message


@pytest.mark.parametrize("reading", [QUIET, None], ids=["quiet", "judge: no watch"])
def test_a_quiet_or_judged_measurement_runs_all_its_repetitions(
        reading: MachineLoad | None) -> None:
    clock = _Clock()
    engine = _Slow(clock, 25.0)
    watch = _watch(clock, reading)[0] if reading is not None else None
    result = run_workload(engine, Workload(8, 16, repetitions=10),  # type: ignore[arg-type]
                          MeasureOptions(watch=watch, sample_load=False))
    assert engine.calls == 11 and len(result.samples) == 10 and engine.stopped == 0


def test_stopped_during_warm_up_there_is_nothing_to_keep() -> None:
    clock = _Clock()
    engine = _Slow(clock, 90.0)  # one request spans the minute
    watch, _ = _watch(clock, BUSY)
    with pytest.raises(MeasuredBusy) as stopped:
        run_workload(engine, Workload(8, 16, repetitions=3),  # type: ignore[arg-type]
                     MeasureOptions(watch=watch, sample_load=False))
    assert stopped.value.partial is None and engine.calls == 0 and engine.stopped == 1


@pytest.fixture
def stalled() -> Iterator[FakeFaultyLlama]:
    with FakeFaultyLlama("stall_first") as server:  # answers, then no token for 60 s
        yield server


@pytest.mark.parametrize("reader", ["stdlib", "httpx"])
def test_a_long_silent_request_is_stopped_within_a_second_or_so(
        stalled: FakeFaultyLlama, reader: str) -> None:
    transport = httpx.HTTPTransport() if reader == "httpx" else None
    engine = LlamaServer(stalled.url, transport=transport)
    started = time.monotonic()
    request = GenerationRequest(prompt_tokens=4, generate_tokens=16, timeout_s=60.0,
                                stop=lambda: time.monotonic() > started + 0.3)
    try:
        with pytest.raises(RequestStopped, match="stopped by its caller after 0 streamed "
                           "events of 16 tokens asked"):
            engine.generate(request)
    finally:
        engine.close()
    assert time.monotonic() - started < 5.0  # not the 60 s the request may take


def _bench(monkeypatch: pytest.MonkeyPatch, reading: MachineLoad, **kwargs: object
           ) -> tuple[TokBench, _Slow, list[tuple[BenchResult, str]]]:
    clock = _Clock()
    monkeypatch.setattr(fixture_module, "BusyWatch",
                        lambda pids: _watch(clock, reading)[0])
    engine = _Slow(clock, 25.0)
    stored: list[tuple[BenchResult, str]] = []

    def record(result: BenchResult, ceiling: object, verdict: str) -> None:
        stored.append((result, verdict))

    bench = TokBench(engine=lambda: engine, record=record,  # type: ignore[arg-type, return-value]
                     options=MeasureOptions(sample_load=False), **kwargs)  # type: ignore[arg-type]
    return bench, engine, stored


def test_a_call_that_reads_busy_ends_busy_with_what_it_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    bench, engine, stored = _bench(monkeypatch, BUSY)
    with pytest.raises(MeasuredBusy, match="measuring stopped after 75 s"):
        bench(prompt_tokens=8, generate_tokens=16)
    assert engine.calls == 2 and [(len(r.samples), v) for r, v in stored] == [(1, "busy")]


def test_judge_measures_a_busy_call_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    bench, engine, stored = _bench(monkeypatch, BUSY, judge_busy=True, repetitions=5)
    assert len(bench(prompt_tokens=8, generate_tokens=16).result.samples) == 5
    assert engine.stopped == 0 and [v for _, v in stored] == ["unchecked"]


def test_a_speculative_ab_stopped_busy_keeps_its_base_side() -> None:
    from pytest_tokperf.bench.speculative import run_speculative_ab

    clock = _Clock()
    base, drafting = _Slow(clock, 15.0), _Slow(clock, 15.0)  # warm-ups to 30 s, base at 45
    watch, _ = _watch(clock, BUSY)
    with pytest.raises(MeasuredBusy, match="^speculative A/B, speculative side: machine busy"
                       ) as stopped:
        run_speculative_ab(base, drafting, Workload(8, 16, repetitions=5),  # type: ignore[arg-type]
                           MeasureOptions(watch=watch, sample_load=False))
    partial = stopped.value.partial
    assert isinstance(partial, BenchResult) and len(partial.samples) == 1
    assert drafting.stopped == 1 and base.calls == 2
