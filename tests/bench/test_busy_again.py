"""A call measured busy (stopped early, or read so at its end) waits (bounded) for a quiet
window and measures once more; the busy try is stored beside the second as ``busy``, never
lost, never judged."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from tests.support.storage_factory import make_ceiling, make_result

from pytest_tokperf.bench.fixture import TokBench
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.errors import MeasuredBusy
from pytest_tokperf.hardware.load import wait_for_quiet
from pytest_tokperf.results import BenchResult, MachineLoad

BUSY = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                   steal=0.0, run_queue=3.0)
QUIET = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=0.45, engine_cpus=0.4, own_cpus=0.0,
                    steal=0.0, run_queue=0.2)


class _Bench:
    """A TokBench whose measurements come from a list (busy, then quiet, ...)."""

    def __init__(self, loads: list[MachineLoad], quiet_after: float | None,
                 wait_s: float = 30.0) -> None:
        self.loads = loads
        self.stored: list[tuple[BenchResult, str]] = []
        self.waits: list[float] = []

        def record(result: BenchResult, ceiling: Any, verdict: str) -> Any:
            self.stored.append((result, verdict))
            return lambda v: self.stored.append((result, f"revised {v}"))

        def wait(budget: float, pids: tuple[int, ...]) -> float | None:
            self.waits.append(budget)
            return quiet_after

        self.bench = TokBench(engine=lambda: None,  # type: ignore[arg-type,return-value]
                              record=record, min_efficiency=0.01,
                              ceiling_for=lambda r: make_ceiling(), busy_wait_s=wait_s,
                              wait_quiet=wait)

    def measure(self, options: MeasureOptions | None = None) -> BenchResult:
        load = self.loads.pop(0)
        if isinstance(load, MeasuredBusy):
            raise load
        return replace(make_result(), load=load)

    def again_if_busy(self) -> BenchResult:
        return self.bench._again_if_busy(self.measure, MeasureOptions(), MeasureOptions())


def test_a_busy_measurement_is_taken_again_once_quiet() -> None:
    b = _Bench([BUSY, QUIET], quiet_after=7.0)
    second = b.again_if_busy()
    assert second.load == QUIET and b.waits == [30.0]
    assert [v for _, v in b.stored] == ["busy"]  # the busy try kept, as busy
    assert "kept, not judged" in b.stored[0][0].notes[-1]
    assert "after 7 s of waiting for a quiet window" in second.notes[-1]


def test_no_quiet_window_in_time_judges_nothing_more() -> None:
    b = _Bench([BUSY], quiet_after=None)
    same = b.again_if_busy()
    assert same.load == BUSY and b.stored == []
    assert "no quiet window within 30 s" in same.notes[-1]
    with pytest.raises(MeasuredBusy):  # its floor: neither pass nor fail
        b.bench._judge_and_record(same)
    assert [(r, v) for r, v in b.stored] == [(same, "busy"), (same, "revised busy")]


def test_a_quiet_measurement_or_a_judged_one_is_not_repeated() -> None:
    b = _Bench([QUIET], quiet_after=1.0)
    assert b.again_if_busy().load == QUIET and b.waits == []
    b = _Bench([BUSY], quiet_after=1.0)
    b.bench = replace(b.bench, judge_busy=True)
    assert b.again_if_busy().load == BUSY and b.waits == []
    b = _Bench([BUSY], quiet_after=1.0, wait_s=0.0)
    busy = b.again_if_busy()
    assert busy.load == BUSY and b.waits == []
    with pytest.raises(MeasuredBusy):
        b.bench._judge_and_record(busy)


def test_a_busy_call_without_a_floor_waits_too_then_is_neither_pass_nor_fail() -> None:
    b = _Bench([BUSY, QUIET], quiet_after=2.0)
    b.bench = replace(b.bench, min_efficiency=None)
    assert b.again_if_busy().load == QUIET and b.waits == [30.0]
    b = _Bench([BUSY], quiet_after=None)
    b.bench = replace(b.bench, min_efficiency=None)
    busy = b.again_if_busy()
    with pytest.raises(MeasuredBusy, match=r"^machine busy: other processes used 1\.6 of 2 "
                       r"CPUs.*neither a pass nor a fail: its figures are stored as busy"):
        b.bench._judge_and_record(busy)
    assert [v for _, v in b.stored] == ["busy", "revised busy"]
    b.bench = replace(b.bench, judge_busy=True)  # 'judge': its figures stand, unchecked
    assert b.bench._judge_and_record(busy).result is busy and b.stored[-1][1] == "unchecked"


def test_a_measurement_stopped_busy_keeps_its_partial_and_is_taken_again() -> None:
    partial = replace(make_result(), load=BUSY)
    stopped = MeasuredBusy("machine busy: ...: measuring stopped there", partial=partial)
    b = _Bench([stopped, QUIET], quiet_after=3.0)  # type: ignore[list-item]
    assert b.again_if_busy().load == QUIET and b.waits == [30.0]
    assert b.stored == [(partial, "busy")]  # stored as it stopped; the second judged later
    b = _Bench([stopped], quiet_after=None)  # type: ignore[list-item]
    with pytest.raises(MeasuredBusy, match="measuring stopped there"):
        b.again_if_busy()
    assert b.stored == [(partial, "busy")]


def test_waiting_for_quiet_is_bounded_and_ends_when_quiet() -> None:
    readings = iter([BUSY, BUSY, QUIET])
    assert wait_for_quiet(60.0, (), window_s=0.0, sample=lambda s, p: next(readings)) is not None
    calls = []

    def busy(seconds: float, pids: tuple[int, ...]) -> MachineLoad:
        calls.append(seconds)
        return BUSY

    import time
    started = time.monotonic()
    assert wait_for_quiet(0.05, (), window_s=0.01, sample=busy) is None
    assert time.monotonic() - started < 5 and len(calls) >= 1
    unknown = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=None)
    assert wait_for_quiet(60.0, (), sample=lambda s, p: unknown) is not None


def test_with_no_engine_running_every_busy_cpu_is_a_neighbours() -> None:
    # compare-builds and the watch wait between sessions, no engine up and no PID to
    # give: two busy loops read "engine share unknown" and counted as quiet at once (seen
    # for real: "quiet after 2 s" with both loops still running)
    loops = MachineLoad(wall_s=2.0, cpus=2, busy_cpus=1.99, engine_cpus=None, own_cpus=0.004,
                        steal=0.0, run_queue=2.0, run_queue_max=2, samples=21)
    assert loops.others_cpus is None and not loops.loaded  # the reading as the sampler gives it
    assert wait_for_quiet(0.05, (), window_s=0.01, sample=lambda s, p: loops) is None
