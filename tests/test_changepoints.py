"""Change points over a version history, and the history-aware gate built on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tokperf.stats.changepoints import (
    Point, change_points, compare_to_history, settled_baseline,
)
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.compare import DECODE, TTFT


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


STEP = [100.0] * 12 + [90.0] * 8


def test_finds_a_10_percent_step_and_names_what_changed() -> None:
    (found,) = change_points(series(STEP, 0.02, driver_from=12), DECODE)
    assert (found.index, found.version_before, found.version_after) == (12, "b11110", "b11120")
    assert found.verdict == "regression" and found.p_value < 0.005
    assert found.level_before == pytest.approx(100, rel=0.02)
    assert found.level_after == pytest.approx(90, rel=0.02)
    assert found.relative_change == pytest.approx(-0.10, abs=0.015)
    assert found.ci_low < found.relative_change < found.ci_high
    assert found.changed == {"engine_build": ("b11110", "b11120"), "driver": ("560.3", "570.1")}
    assert found.reason.startswith("decode regression of −")
    assert "changed: engine_build b11110 -> b11120, driver 560.3 -> 570.1" in found.reason


def test_the_direction_comes_from_the_metric() -> None:
    (found,) = change_points(series(STEP, 0.02), TTFT)
    assert found.verdict == "improvement"


@pytest.mark.parametrize("seed", range(5))
def test_a_flat_noisy_history_has_no_change_points(seed: int) -> None:
    assert change_points(series([100.0] * 30, 0.05, seed=seed), DECODE) == []


def test_stalls_do_not_make_change_points() -> None:
    points = series([100.0] * 30, 0.02, seed=11)
    stalled = [Point(p.version, (p.samples[0] * 0.75, *p.samples[1:]), p.labels)
               if i % 3 == 0 else p for i, p in enumerate(points)]
    assert change_points(stalled, DECODE) == []


def test_a_step_below_the_minimum_effect_is_not_reported() -> None:
    assert change_points(series([100.0] * 12 + [98.0] * 12, 0.005), DECODE) == []


def test_two_steps_are_both_found() -> None:
    found = change_points(series([100.0] * 10 + [88.0] * 10 + [100.0] * 10, 0.01), DECODE)
    assert [(c.index, c.verdict) for c in found] == [(10, "regression"), (20, "improvement")]


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
    with pytest.raises(ConfigError, match="window is 0"):
        settled_baseline(points, DECODE, window=0)
    with pytest.raises(ConfigError, match="alpha is 1.5"):
        change_points(points, DECODE, alpha=1.5)


def test_the_gate_compares_against_the_level_since_the_last_step() -> None:
    points = series(STEP, 0.02, seed=5)
    assert [p.version for p in settled_baseline(points, DECODE)] == [
        p.version for p in points[12:]]
    assert len(settled_baseline(points, DECODE, window=3)) == 3
    rng = np.random.default_rng(6)
    assert compare_to_history(points, list(90 * (1 + 0.02 * rng.standard_normal(5))),
                              DECODE).verdict == "unchanged"
    assert compare_to_history(points, list(84 * (1 + 0.02 * rng.standard_normal(5))),
                              DECODE).verdict == "regression"
    assert compare_to_history([], [90.0, 91.0, 92.0], DECODE).verdict == "inconclusive"
