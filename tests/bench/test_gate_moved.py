"""The gate (and compare) withholds a flag that the machine's memory moved with (stats.moved)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pytest_tokperf.bench.gate import Gate
from pytest_tokperf.settings import Baseline
from pytest_tokperf.stats import DECODE, compare
from pytest_tokperf.stats.moved import moved, moved_verdict
from pytest_tokperf.storage.history import bandwidth_exponents
from pytest_tokperf.storage.store import ResultStore
from pytest_tokperf.versions.compare import compare_stored
from tests.support.storage_factory import (
    fill_history,
    make_ceiling,
    make_model,
    make_run,
    probed_hardware,
    result_at,
)


def _gate(tmp_path: Path, history_gb: float | None, now_gb: float | None,
          level: float) -> tuple[str, str]:
    """Five runs at 100 tok/s probed at ``history_gb``; a run at ``level`` probed at
    ``now_gb``, recorded, then judged as the plugin does."""
    store, key = fill_history(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(5)],
                              probed=history_gb)
    if history_gb is None:  # the factory's hardware carries a probe: a history without
        store.db.execute("UPDATE results SET measured_bandwidth_bytes_per_s = NULL")
    run = make_run(run_id="current", started_at="2026-02-01T00:00:00+00:00")
    store.begin_run(run)
    result = result_at("bnew", level, random.Random(3))
    rid = store.record(run.run_id, "t::decode", result, model=make_model(),
                       hardware=probed_hardware(now_gb) if now_gb else None,
                       ceiling=make_ceiling(), efficiency=0.7, verdict="unchecked")
    gate = Gate(Baseline("history"))
    findings = gate.judge(store, test_id="t::decode", series_key=key, samples=result.samples,
                          current_build="bnew", run_id="current", result_id=rid.result_id)
    store.close()
    findings, _ = gate.finish(findings)
    decode = next(f for f in findings if f.comparison.metric == "decode")
    return decode.comparison.verdict, decode.comparison.reason


def test_a_drop_on_memory_that_moved_down_is_withheld_with_both_figures(tmp_path: Path) -> None:
    verdict, reason = _gate(tmp_path, 60.0, 37.0, 80.0)
    assert verdict == "inconclusive"
    assert reason.startswith("inconclusive: the machine's memory moved: it read 37.0 GB/s")
    assert "60.0 GB/s around the baseline's" in reason and "-20" in reason.replace("−", "-")


def test_a_drop_with_the_memory_where_it_was_is_a_regression(tmp_path: Path) -> None:
    for now in (60.0, 55.0, None):  # within the probes' spread, or not probed
        verdict, reason = _gate(tmp_path / str(now), 60.0, now, 80.0)
        assert verdict == "regression" and "memory moved" not in reason


def test_a_drop_on_faster_memory_stands(tmp_path: Path) -> None:
    # slower on faster memory: the machine cannot explain it
    assert _gate(tmp_path, 37.0, 60.0, 80.0)[0] == "regression"


def test_a_gain_on_memory_that_moved_up_is_withheld(tmp_path: Path) -> None:
    verdict, reason = _gate(tmp_path, 37.0, 60.0, 125.0)
    assert verdict == "inconclusive" and "memory moved" in reason


def test_a_history_never_probed_judges_as_before(tmp_path: Path) -> None:
    assert _gate(tmp_path, None, 37.0, 80.0)[0] == "regression"


@pytest.mark.parametrize(("now", "then", "way"), [
    (37e9, [60e9, 58e9], -1), (70e9, [55e9, 60e9], 1), (52e9, [55e9, 60e9], 0),
    (68e9, [55e9, 60e9], 0), (None, [60e9], 0), (37e9, [None, 0.0], 0), (37e9, [], 0),
])
def test_moved_needs_the_probe_outside_every_baseline_one(now, then, way) -> None:
    assert moved(now, then) == way


def test_an_unflagged_comparison_is_left_alone() -> None:
    same = compare([[100.0, 101.0, 99.0, 100.5, 99.5]] * 3, [100.0, 100.4, 99.8], DECODE)
    assert moved_verdict(same, [37e9], [60e9]) is same


def _judged(tmp_path: Path, history: list[tuple[float, float]], now_gb: float,
            level: float) -> tuple[str, str]:
    """``_gate`` over a history of (decode level, probe GB/s) runs."""
    store, key = fill_history(tmp_path / "r.db", [(f"b{i}", v) for i, (v, _) in
                                                   enumerate(history)],
                              probed=[gb for _, gb in history])
    run = make_run(run_id="current", started_at="2026-02-01T00:00:00+00:00")
    store.begin_run(run)
    result = result_at("bnew", level, random.Random(3))
    rid = store.record(run.run_id, "t::decode", result, model=make_model(),
                       hardware=probed_hardware(now_gb), ceiling=make_ceiling(),
                       efficiency=0.7, verdict="unchecked")
    gate = Gate(Baseline("history"))
    findings = gate.judge(store, test_id="t::decode", series_key=key, samples=result.samples,
                          current_build="bnew", run_id="current", result_id=rid.result_id)
    store.close()
    decode = next(f for f in gate.finish(findings)[0] if f.comparison.metric == "decode")
    return decode.comparison.verdict, decode.comparison.reason.replace("−", "-")


def test_the_probes_are_those_of_the_runs_judged_against(tmp_path: Path) -> None:
    # older runs at 85 tok/s on slow memory, then a settled level of 100 on fast memory:
    # a run at 85 on slow memory is judged against the settled runs, and so is its probe
    verdict, reason = _judged(tmp_path, [(85.0, 37.0)] * 5 + [(100.0, 60.0)] * 5, 37.0, 85.0)
    assert verdict == "inconclusive", reason
    assert "around this run and 60.0 GB/s around the baseline's" in reason


def test_a_drop_the_memory_cannot_explain_stands_with_the_arithmetic(tmp_path: Path) -> None:
    verdict, reason = _judged(tmp_path, [(100.0, 60.0)] * 5, 37.0, 56.0)
    assert verdict == "regression", reason
    assert "which explains up to -38.3% (bandwidth^1: the bound; this host's relation is " \
        "not yet measured: needs runs in both memory states); the -44" in reason
    assert "still a regression" in reason


def _host_history(store: ResultStore) -> None:
    """Another series of one build, 6 runs on each memory state, decode ~ probe^0.45."""
    rng = random.Random(5)
    for i, gb in enumerate([37.0, 60.0] * 6):
        store.begin_run(make_run(run_id=f"host-{i}", started_at=f"2026-01-{10 + i}T00:00:00+00:00"))
        store.record(f"host-{i}", "t::other", result_at("b0", 100 * (gb / 60) ** 0.45, rng),
                     model=make_model(), hardware=probed_hardware(gb), ceiling=make_ceiling(),
                     efficiency=0.7, verdict="unchecked")


def test_the_gate_judges_with_the_host_bound_its_stored_runs_tell(tmp_path: Path) -> None:
    # the host's bound (~0.5, _host_history) explains -22% of a move the bound explains
    # -41.7% of, so a -30% engine regression measured on slow memory (-44.4%) stands
    store, key = fill_history(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(5)],
                              probed=60.0)
    _host_history(store)
    store.begin_run(make_run(run_id="current", started_at="2026-02-01T00:00:00+00:00"))
    result = result_at("bnew", 55.6, random.Random(3))
    rid = store.record("current", "t::decode", result, model=make_model(),
                       hardware=probed_hardware(35.0), ceiling=make_ceiling(), efficiency=0.7,
                       verdict="unchecked")
    exponents = bandwidth_exponents(store, "bench-host")
    assert exponents.fitted["decode"].runs == 12 and exponents.fitted["ttft"].runs > 0
    gate = Gate(Baseline("history"))
    host, bound, elsewhere = (next(f.comparison for f in gate.judge(
        store, test_id="t::decode", series_key=key, samples=result.samples,
        current_build="bnew", run_id="current", result_id=rid.result_id, exponents=fit)
        if f.comparison.metric == "decode")
        for fit in (exponents, None, bandwidth_exponents(store, "elsewhere")))
    store.close()
    assert host.verdict == "regression", host.reason
    assert f"({exponents.fitted['decode']}); the" in host.reason
    assert "this host's upper bound from 12 runs" in host.reason
    assert bound.verdict == "inconclusive"
    assert "(bandwidth^1: the bound; this host's" in bound.reason
    assert elsewhere.verdict == "inconclusive"
    assert "(bandwidth^1: the bound; the runs compared are not all on one host)" \
        in elsewhere.reason


def test_compare_judges_with_the_host_bound(tmp_path: Path) -> None:
    # b1's runs on fast memory, b2's 30% slower on slow: compare says which exponent
    store, _ = fill_history(tmp_path / "r.db", [("b1", 100.0)] * 4 + [("b2", 55.6)] * 4,
                            probed=[60.0] * 4 + [35.0] * 4)
    _host_history(store)
    store.close()
    verdict = compare_stored(str(tmp_path / "r.db"), baseline="b1", current="b2").series[0].verdict
    assert verdict.verdict == "regression", verdict.reason
    assert "(bandwidth^0.46: this host's upper bound from 12 runs)" in verdict.reason


def test_changes_and_the_report_judge_steps_with_the_host_bound(tmp_path: Path) -> None:
    # the same step as a history: withheld under the bound, named once the host's runs
    # in both memory states tell its relation
    from pytest_tokperf.report.history import level_changes
    from pytest_tokperf.report.report_data import load_history

    store, key = fill_history(tmp_path / "r.db", [("b1", 100.0)] * 4 + [("b2", 55.6)] * 4,
                              probed=[60.0] * 4 + [35.0] * 4)
    assert level_changes(store, key, DECODE)[1] == []
    assert load_history(store, key, metric=DECODE).changes == ()
    _host_history(store)
    steps = level_changes(store, key, DECODE)[1]
    assert [(s.version_before, s.version_after) for s in steps] == [("b1", "b2")]
    assert [c.version_after for c in load_history(store, key, metric=DECODE).changes] == ["b2"]
    store.close()
