"""Change points over a version history, and the history-aware gate built on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats import DECODE, TTFT, change_points, judge_history
from pytest_tokperf.stats.changepoints import Point, settled_baseline
from pytest_tokperf.stats.changepoints import _without_stalls
from pytest_tokperf.stats.drift import drifts


def series(levels: list[float], cv: float, reps: int = 5, seed: int = 0,
           driver_from: int | None = None) -> list[Point]:
    rng = np.random.default_rng(seed)
    points = []
    for i, level in enumerate(levels):
        build = f"b{11000 + 10 * i}"
        driver = "570.1" if driver_from is not None and i >= driver_from else "560.3"
        samples = tuple(level * (1 + cv * rng.standard_normal(reps)))
        points.append(Point(build, samples, {"engine_build": build, "driver": driver,
                                             "hardware": "H100", "model_hash": "3f2a"}))
    return points


def stall(points: list[Point], every: int, fraction: float = 0.75, count: int = 1) -> list[Point]:
    """Slow the first ``count`` repetitions of every ``every``-th version to ``fraction``."""
    return [Point(p.version, tuple(x * fraction if j < count else x
                                   for j, x in enumerate(p.samples)), p.labels)
            if i % every == 0 else p for i, p in enumerate(points)]


STEP = [100.0] * 5 + [90.0] * 5


def test_finds_a_10_percent_step_in_10_builds_and_names_what_changed() -> None:
    (found,) = change_points(series(STEP, 0.02, driver_from=5), DECODE)
    assert (found.index, found.version_before, found.version_after) == (5, "b11040", "b11050")
    assert found.verdict == "regression" and found.p_value < 0.005
    assert found.level_before == pytest.approx(100, rel=0.02)
    assert found.level_after == pytest.approx(90, rel=0.02)
    assert found.relative_change == pytest.approx(-0.10, abs=0.015)
    assert found.ci_low < found.relative_change < found.ci_high < 0
    assert found.confidence == pytest.approx(1 - 0.005 / 7)  # 7 places tried in 10 builds
    assert found.changed == {"engine_build": ("b11040", "b11050"), "driver": ("560.3", "570.1")}
    assert found.reason.startswith("decode regression of −")
    assert "(p=" in found.reason and "after 7 places tried)" in found.reason
    assert found.reason.endswith("changed: engine_build b11040 -> b11050, driver 560.3 -> 570.1")


@pytest.mark.parametrize("seed", range(6))
def test_an_8_percent_step_in_8_builds_of_3_repetitions_is_found(seed: int) -> None:
    # a step of 1.6 m: flagged when the step itself measures at least m = 5%
    points = series([100.0] * 4 + [92.0] * 4, 0.01, reps=3, seed=seed)
    assert [(c.index, c.verdict) for c in change_points(points, DECODE)] == [(4, "regression")]


def test_the_direction_comes_from_the_metric() -> None:
    (found,) = change_points(series(STEP, 0.02), TTFT)
    assert found.verdict == "improvement"


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_noisy_history_has_no_change_points(seed: int) -> None:
    flat = series([100.0] * 30, 0.05, seed=seed)
    assert change_points(flat, DECODE) == [] and drifts(flat, DECODE) == []


RAMP = [100 * 0.99**i for i in range(10)]  # -1% a version: -8.6% from the first to the last


@pytest.mark.parametrize("seed", range(8))
def test_a_ramp_whose_total_reaches_the_minimum_is_named(seed: int) -> None:
    """No step of a -1%/version ramp reaches 5% by itself; what ``changes`` lists (steps,
    then drifts) names it once, as a regression."""
    points = series(RAMP, 0.02, seed=seed)
    named = change_points(points, DECODE) + drifts(points, DECODE)
    assert [c.verdict for c in named] == ["regression"]


def test_a_drift_names_its_versions_total_and_interval() -> None:
    points = series(RAMP, 0.02, seed=1)
    assert change_points(points, DECODE) == []  # each step alone is too small
    (drift,) = drifts(points, DECODE)
    assert (drift.kind, drift.index, drift.verdict) == ("drift", 0, "regression")
    assert (drift.version_before, drift.version_after) == ("b11000", "b11090")
    assert -0.11 < drift.ci_low < drift.relative_change <= -0.05 and drift.ci_high < 0
    assert drift.level_after == pytest.approx(drift.level_before * (1 + drift.relative_change))
    assert drift.changed == {"engine_build": ("b11000", "b11090")}
    assert "Bonferroni over 2 comparisons) and the change reaches the 5% minimum" in drift.reason
    assert drift.reason.endswith("drifted from b11000..b11020 to b11070..b11090 (3 runs each) "
                                 "in steps each too small to flag")


@pytest.mark.parametrize("seed", range(8))
def test_a_ramp_whose_total_stays_under_the_minimum_is_not_named(seed: int) -> None:
    small = series([100 * 0.995**i for i in range(10)], 0.02, seed=seed)  # -4.4% in all
    assert drifts(small, DECODE) == []


def test_a_drift_is_judged_from_the_level_after_the_last_step() -> None:
    points = series([100.0] * 6 + [85 * 0.99**i for i in range(10)], 0.01, seed=0)
    assert [c.index for c in change_points(points, DECODE)] == [6]
    (drift,) = drifts(points, DECODE)
    assert (drift.index, drift.version_before, drift.version_after) == (6, "b11060", "b11150")
    assert drift.relative_change == pytest.approx(0.99**7 - 1, abs=0.015)
    assert drifts(series(STEP, 0.02), DECODE) == []  # a step is a step, not a drift


def test_stalls_do_not_make_change_points() -> None:
    stalled = stall(series([100.0] * 30, 0.02, seed=11), every=3)
    assert change_points(stalled, DECODE) == [] and drifts(stalled, DECODE) == []


def test_a_build_with_most_repetitions_stalled_makes_no_step_and_keeps_its_level() -> None:
    """A stall is judged inside its own session: a run with 3 of 5 repetitions slow is a
    run at the slow level with a wide spread, never set aside as a whole; 2 of 5 slow are
    stalls of that run, set aside, and the step beside them is still found."""
    flat = stall(series([100.0] * 10, 0.01, reps=5, seed=12), every=7, count=3)
    assert change_points(flat, DECODE) == []
    most = stall(series(STEP, 0.01, reps=5, seed=13), every=7, count=3)
    assert all(c.index == 5 for c in change_points(most, DECODE))
    some = stall(series(STEP, 0.01, reps=5, seed=13), every=7, count=2)
    (found,) = change_points(some, DECODE)
    assert found.index == 5 and {s.version for s in found.set_aside} == {0, 7}
    assert all(s.position < 2 for s in found.set_aside)


# Real sessions: llama.cpp b9093, benchmarks/test_main.py::test_ttft_prompt_512 decode
# tok/s (db/runs/releases: runs ebaa46d4, c8f10b31, 40b6a4e2); the first ran in the VM's
# low bandwidth phase.
B9093 = [(29.207, 28.828, 32.276, 28.442, 30.045), (36.914, 37.273, 37.170, 36.425, 35.181),
         (36.306, 35.694, 35.705, 37.691, 36.584)]


def test_a_run_slow_throughout_is_a_level_not_a_stall() -> None:
    """Measured from the median of the runs around it, 4 of the low-phase run's 5
    repetitions were 'stalls'; inside its own session none is."""
    low = [Point("b9093", s) for s in B9093] + [Point("b9409", s) for s in B9093[1:]]
    kept, aside = _without_stalls(low, DECODE)
    assert aside == () and kept.sizes == (5,) * 5


def test_a_step_below_the_minimum_effect_is_not_reported() -> None:
    assert change_points(series([100.0] * 12 + [98.0] * 12, 0.005), DECODE) == []


def test_two_steps_are_both_found() -> None:
    found = change_points(series([100.0] * 10 + [88.0] * 10 + [100.0] * 10, 0.01), DECODE)
    assert [(c.index, c.verdict) for c in found] == [(10, "regression"), (20, "improvement")]


def test_a_wandering_machine_is_judged_on_version_levels() -> None:
    rng = np.random.default_rng(14)
    levels = [100 * math.exp(0.03 * rng.standard_normal()) for _ in range(12)]
    wandering = series(levels, 0.003, seed=15)
    assert change_points(wandering, DECODE) == [] and drifts(wandering, DECODE) == []
    (found,) = change_points(series([x * (1 if i < 6 else 0.7) for i, x in enumerate(levels)],
                                    0.003, seed=15), DECODE)
    assert found.index == 6 and found.scale == "versions"
    assert "judged on version levels" in found.reason


def test_single_repetition_versions_are_judged_on_their_levels() -> None:
    (found,) = change_points(series(STEP * 2, 0.005, reps=1, seed=16)[:10], DECODE)
    assert (found.index, found.scale) == (5, "versions")


def test_same_history_gives_the_same_answer() -> None:
    points = series(STEP, 0.03, seed=4)
    assert change_points(points, DECODE) == change_points(list(points), DECODE)


def test_short_histories_have_no_change_points() -> None:
    assert change_points([], DECODE) == []
    assert change_points(series([100.0, 100.0, 50.0], 0.01), DECODE) == []


def test_bad_history_is_rejected_naming_the_version() -> None:
    points = series([100.0] * 6, 0.01)
    broken = [*points[:3], Point("b9", (100.0, math.nan)), *points[4:]]
    with pytest.raises(ConfigError, match=r"decode 'b9' samples\[1\] is nan"):
        change_points(broken, DECODE)
    with pytest.raises(ConfigError, match=r"version 'b9' \(history\[3\]\) has no samples"):
        change_points([*points[:3], Point("b9", ()), *points[4:]], DECODE)
    with pytest.raises(ConfigError, match=r"decode 'b9' samples\[0\] is -1.0"):
        settled_baseline([*points[:3], Point("b9", (-1.0,)), *points[4:]], DECODE)
    with pytest.raises(ConfigError, match="window is 0"):
        settled_baseline(points, DECODE, window=0)
    with pytest.raises(ConfigError, match="alpha is 1.5"):
        change_points(points, DECODE, alpha=1.5)


def test_identical_repetitions_make_no_step_from_nothing() -> None:
    flat = [Point(f"b{i}", (100.0, 100.0, 100.0)) for i in range(8)]
    assert change_points(flat, DECODE) == []


def test_the_gate_compares_against_the_level_since_the_last_step() -> None:
    points = series([100.0] * 12 + [90.0] * 8, 0.02, seed=5)
    assert [p.version for p in settled_baseline(points, DECODE)] == [
        p.version for p in points[12:]]
    assert len(settled_baseline(points, DECODE, window=3)) == 3
    rng = np.random.default_rng(6)
    at_new_level = list(90 * (1 + 0.02 * rng.standard_normal(5)))
    judged = judge_history(points, at_new_level, DECODE)
    assert judged.step.verdict == "unchanged" and [p.version for p in judged.baseline] == [
        p.version for p in points[12:]]
    # ... and against the accepted level, which the step left 10% behind: until it is
    # accepted (the history then starts there), the gate says so
    assert judged.judged == "drift" and judged.comparison.verdict == "regression"
    assert "judged against the accepted level (b11000..b11020, 3 runs)" in judged.comparison.reason
    assert "through level changes at b11110 -> b11120" in judged.comparison.reason
    assert judge_history(points[12:], at_new_level, DECODE).comparison.verdict == "unchanged"
    assert judge_history(points, list(84 * (1 + 0.02 * rng.standard_normal(5))),
                         DECODE).comparison.verdict == "regression"
    assert judge_history([], [90.0, 91.0, 92.0], DECODE).comparison.verdict == "inconclusive"
    one = judge_history(points[:1], [90.0, 91.0, 92.0], DECODE).comparison
    assert one.n_baseline == 5 and one.shift is not None and one.shift.versions == 1
