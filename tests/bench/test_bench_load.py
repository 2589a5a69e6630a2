"""The machine's load where it explains a figure: a failed floor, the gate, the A/B line."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from pytest_tokperf.bench.ab import ABResult
from pytest_tokperf.bench.fixture import TokBench
from pytest_tokperf.bench.gate import Gate
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.errors import MeasuredBusy
from pytest_tokperf.hardware.load import LoadSampler
from pytest_tokperf.results import BenchResult, Ceiling, MachineLoad, Verdict
from pytest_tokperf.settings import Baseline
from tests.bench.test_measure import _RateEngine
from tests.support.storage_factory import fill_history, make_ceiling, result_at

BUSY = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                   steal=0.0, run_queue=5.0, run_queue_max=7, samples=10)
QUIET = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=1.05, engine_cpus=1.0, own_cpus=0.02,
                    steal=0.0, run_queue=0.2, run_queue_max=1, samples=10)


class _Injected(LoadSampler):
    """A sampler that reads ``reading`` whatever the machine does."""

    reading = BUSY

    def start(self) -> LoadSampler:
        return self

    def stop(self) -> MachineLoad:
        return self.reading


def _bench(reading: MachineLoad, pids: tuple[int, ...] = (4242,)) -> tuple[TokBench, list[
        tuple[BenchResult, Verdict]], list[tuple[int, ...]]]:
    seen: list[tuple[int, ...]] = []

    def sampler(engine_pids: tuple[int, ...]) -> LoadSampler:
        seen.append(engine_pids)
        made = _Injected(engine_pids)
        made.reading = reading
        return made

    recorded: list[tuple[BenchResult, Verdict]] = []

    def record(result: BenchResult, ceiling: Ceiling | None, verdict: Verdict) -> None:
        recorded.append((result, verdict))

    ceiling = dataclasses.replace(make_ceiling(), decode_tokens_per_s=100.0)
    engine = _RateEngine([10.0])
    bench = TokBench(engine=lambda: engine, record=record,  # type: ignore[arg-type, return-value]
                     options=MeasureOptions(load_sampler=sampler), repetitions=3,
                     min_efficiency=0.5, ceiling_for=lambda r: ceiling,
                     engine_pids=lambda: pids)
    return bench, recorded, seen


def test_a_floor_checked_on_a_busy_machine_is_neither_pass_nor_fail() -> None:
    bench, recorded, seen = _bench(BUSY)
    with pytest.raises(MeasuredBusy) as busy:
        bench(prompt_tokens=8, generate_tokens=16)
    message = str(busy.value)
    assert message.startswith(
        "machine busy: other processes used 1.6 of 2 CPUs during the repetitions (run "
        "queue 5.0, steal 0%): this figure may be the neighbours', not the engine's; neither "
        "a pass nor a fail: decode ")
    assert "required >= 50%" in message and "--tokperf-busy fail" in message
    result, verdict = recorded[0]
    assert verdict == "busy" and result.load == BUSY
    assert all(s.load == BUSY for s in result.samples)
    assert any(n.startswith("machine busy: other processes used 1.6") for n in result.notes)
    assert seen == [(4242,)] * 3  # one sampler per measured repetition, told the engine's PID


def test_judge_decides_a_busy_floor_on_its_figures() -> None:
    bench, recorded, _ = _bench(BUSY)
    bench = dataclasses.replace(bench, judge_busy=True)
    with pytest.raises(AssertionError, match="required >= 50%") as failed:
        bench(prompt_tokens=8, generate_tokens=16)
    assert not isinstance(failed.value, MeasuredBusy) and recorded[0][1] == "fail"


def test_a_floor_failed_on_a_quiet_machine_says_nothing_of_load() -> None:
    bench, recorded, _ = _bench(QUIET)
    with pytest.raises(AssertionError) as failed:
        bench(prompt_tokens=8, generate_tokens=16)
    assert "machine busy" not in str(failed.value)
    assert not any("machine busy" in n for n in recorded[0][0].notes)


def _gate(tmp_path: Path, baseline_load: MachineLoad | None, current: MachineLoad | None,
          level: float = 60.0) -> tuple[str, str]:
    """The session's final decode verdict and reason (after the family correction)."""
    store, key = fill_history(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(5)],
                              load=baseline_load)
    samples = result_at("bnew", level, random.Random(3)).samples
    findings = Gate(Baseline("history")).judge(store, test_id="t::decode", series_key=key,
                                               samples=samples, current_build="bnew",
                                               run_id="current", load=current)
    store.close()
    findings, _ = Gate(Baseline("history")).finish(findings)
    decode = next(f for f in findings if f.comparison.metric == "decode")
    return decode.comparison.verdict, decode.comparison.reason


def test_a_regression_in_a_busy_session_against_a_quiet_history_is_withheld(
        tmp_path: Path) -> None:
    verdict, reason = _gate(tmp_path, QUIET, BUSY)
    assert verdict == "inconclusive"
    assert reason.startswith("inconclusive: machine busy: other processes used 1.6 of 2 CPUs")
    assert "the baseline's runs were quiet" in reason and "-40" in reason.replace("−", "-")


def test_a_regression_with_the_machine_as_busy_in_every_baseline_run_stands(
        tmp_path: Path) -> None:
    verdict, reason = _gate(tmp_path, BUSY, BUSY)
    assert verdict == "regression"
    assert "the machine was busy" in reason and "in every baseline run too" in reason


def test_a_regression_in_a_quiet_session_is_flagged_as_before(tmp_path: Path) -> None:
    for current in (QUIET, None):
        verdict, reason = _gate(tmp_path / str(current is None), None, current)
        assert verdict == "regression" and "busy" not in reason


def test_the_ab_line_gives_each_side_its_machine_load() -> None:
    base = dataclasses.replace(result_at("b1", 10.0, random.Random(1)), load=QUIET)
    cand = dataclasses.replace(result_at("b2", 10.0, random.Random(2)), load=BUSY)
    text = ABResult(control=base, candidate=cand, verdicts=(), pairs=4).describe()
    assert ("machine: control others 0.0 of 2 CPUs, run queue 0.2, steal 0%; candidate "
            "others 1.6 of 2 CPUs, run queue 5.0, steal 0%, busy") in text
    # a script that did not name the servers: the figure includes them, and says so
    whole = dataclasses.replace(BUSY, engine_cpus=None)
    assert whole.brief() == (f"all processes {BUSY.busy_cpus:.1f} of 2 CPUs, the engine's "
                             "share unknown, run queue 5.0, steal 0%")
    unknown = dataclasses.replace(cand, load=MachineLoad.unknown("no /proc/stat"))
    assert "candidate unknown" in ABResult(control=base, candidate=unknown, verdicts=(),
                                           pairs=4).describe()


def test_an_attached_server_on_loopback_is_found_by_its_port() -> None:
    import socket

    from pytest_tokperf.bench.session import loopback_pids

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        here = Path("/proc/net/tcp").exists()
        import os

        assert loopback_pids(f"http://localhost:{port}/v1") == ((os.getpid(),) if here else ())
        assert loopback_pids(f"http://10.1.2.3:{port}") == ()  # another machine: not ours
    finally:
        listener.close()


BUSY_CONFTEST = """
import dataclasses
import pytest
from pytest_tokperf.bench.fixture import TokBenchResult
from pytest_tokperf.results import MachineLoad
from tests.support.storage_factory import make_ceiling, result_at
import random

BUSY = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                   steal=0.0, run_queue=5.0, run_queue_max=7, samples=10)

@pytest.fixture
def measured():
    result = dataclasses.replace(result_at("b1", 10.0, random.Random(1)), load=BUSY)
    ceiling = dataclasses.replace(make_ceiling(), decode_tokens_per_s=100.0)
    return TokBenchResult(result=result, ceiling=ceiling)
"""


@pytest.mark.parametrize("floor", [0.05, 0.5], ids=["would pass", "would fail"])
def test_pytest_reports_a_busy_check_as_skipped_with_the_load(
        pytester: pytest.Pytester, floor: float) -> None:
    pytester.makeconftest(BUSY_CONFTEST)
    pytester.makepyfile(f"def test_floor(measured):\n    measured.assert_efficiency({floor})\n")
    pytester.syspathinsert(str(Path(__file__).resolve().parents[2]))
    result = pytester.runpytest("-rs", "--tokperf-busy", "skip")  # the default (see below)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*machine busy: other processes used 1.6 of 2 CPUs*"
                                 "neither a pass nor a fail*"])
    failed = pytester.runpytest("--tokperf-busy", "fail")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*MeasuredBusy: machine busy*"])


def test_a_busy_check_is_skipped_unless_the_user_says_otherwise() -> None:
    from pytest_tokperf.errors import ConfigError
    from pytest_tokperf.settings import resolve

    def settings(env: dict[str, str]) -> str:
        return resolve(cli=lambda _: None, ini=lambda _: None, env=env,
                       rootdir=Path.cwd()).busy.outcome
    assert settings({}) == "skip"
    assert settings({"PYTEST_TOKPERF_BUSY": "judge"}) == "judge"
    with pytest.raises(ConfigError, match="--tokperf-busy 'maybe' from environment variable PYTEST_TOKPERF_BUSY is not 'skip'"):
        settings({"PYTEST_TOKPERF_BUSY": "maybe"})


@pytest.mark.parametrize("reading, raised, verdict", [(BUSY, MeasuredBusy, "busy"),
                                                       (QUIET, AssertionError, "fail")])
def test_no_decode_at_all_is_a_fail_only_on_a_quiet_machine(
    reading: MachineLoad, raised: type[Exception], verdict: str
) -> None:
    # A starved client reads each stream in one burst, and an engine without timings of
    # its own (vLLM on the CPU) gives no decode either: busy, that is no fail.
    from tests.bench.test_measure import _BurstEngine

    bench, recorded, _ = _bench(reading)
    burst = _BurstEngine([10.0], engine_timings=False)
    bench = dataclasses.replace(bench, engine=lambda: burst)  # type: ignore[arg-type, return-value]
    with pytest.raises(raised, match="no decode speed was measured") as failed:
        bench(prompt_tokens=8, generate_tokens=16)
    assert isinstance(failed.value, MeasuredBusy) == (reading is BUSY)
    assert recorded[0][1] == verdict
