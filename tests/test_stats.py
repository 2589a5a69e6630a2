"""Verdicts, direction, multiple testing and bad input of the pairwise statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.compare import (
    DECODE, TTFT, Metric, benjamini_hochberg, compare, compare_many, measure_shift,
)


def noisy(level: float, cv: float, n: int, seed: int) -> list[float]:
    return list(level * (1 + cv * np.random.default_rng(seed).standard_normal(n)))


def history(level: float, cv: float, versions: int, reps: int, seed: int) -> list[list[float]]:
    return [noisy(level, cv, reps, seed * 1000 + v) for v in range(versions)]


BASE = [100.0, 101.0, 99.0, 100.5, 99.5]


def test_a_drop_in_tokens_per_s_is_a_regression_with_its_figures() -> None:
    result = compare(BASE, [93.5, 92.0, 93.0, 92.5, 94.0], DECODE)
    assert result.verdict == "regression" and result.regressed
    assert result.relative_change == pytest.approx(-0.07, abs=0.005)
    assert result.ci_low < result.relative_change < result.ci_high < -0.025
    assert result.p_value < 0.005 and (result.n_baseline, result.n_current) == (5, 5)
    assert result.reason.startswith("decode −7.0% [")
    assert "< 0.005 and the change reaches the 5% minimum effect" in result.reason


def test_a_rise_in_tokens_per_s_is_an_improvement() -> None:
    assert compare(BASE, [107.0, 108.0, 106.5, 107.5, 108.5], DECODE).verdict == "improvement"


def test_direction_is_part_of_the_metric_ttft_up_is_a_regression() -> None:
    slower = [0.107, 0.108, 0.1065, 0.1075, 0.1085]
    base = [b / 1000 for b in BASE]
    assert compare(base, slower, TTFT).verdict == "regression"
    assert compare(slower, base, TTFT).verdict == "improvement"
    assert compare(slower, base, DECODE).verdict == "regression"


def test_inside_the_margin_is_unchanged() -> None:
    result = compare(BASE, [100.2, 99.4, 100.9, 99.8, 100.6], DECODE)
    assert result.verdict == "unchanged"
    assert "the interval lies within ±5%" in result.reason


def test_a_real_but_small_change_is_unchanged() -> None:
    result = compare([100.0, 100.2, 99.8] * 3, [98.0, 98.2, 97.8] * 3, DECODE)
    assert result.verdict == "unchanged" and result.p_value < 1e-6
    assert "real but most likely smaller than the 5% minimum effect" in result.reason


def test_the_minimum_effect_is_per_metric() -> None:
    strict = Metric("decode", higher_is_better=True, min_effect=0.01)
    assert compare([100.0, 100.2, 99.8] * 3, [98.0, 98.2, 97.8] * 3, strict).verdict == "regression"


def test_too_noisy_to_decide_is_inconclusive() -> None:
    result = compare([100.0, 110.0, 90.0], [95.0, 120.0, 85.0], DECODE)
    assert result.verdict == "inconclusive"
    assert "too noisy to decide at 3 vs 3 samples" in result.reason


@pytest.mark.parametrize("current", [[], [97.0], [97.0, 98.0]])
def test_too_few_samples_is_inconclusive_not_a_guess(current: list[float]) -> None:
    result = compare(BASE, current, DECODE)
    assert result.verdict == "inconclusive" and math.isnan(result.relative_change)
    assert result.reason == (f"decode: baseline has 5 and current {len(current)} samples; "
                             "need at least 3 on each side")


def test_identical_samples_give_an_exact_answer_without_warnings() -> None:
    same = compare([100.0] * 3, [100.0] * 3, DECODE)
    assert (same.verdict, same.p_value, same.relative_change) == ("unchanged", 1.0, 0.0)
    slower = compare([100.0] * 3, [90.0] * 3, DECODE)
    assert slower.verdict == "regression" and slower.relative_change == pytest.approx(-0.1)
    assert "identical samples on each side: the difference is exact" in slower.reason
    one_flat = compare([100.0] * 5, [90.0, 91.0, 89.0, 90.5, 89.5], DECODE)
    assert one_flat.verdict == "regression"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(math.nan, "nan"), (math.inf, "inf"), (-5.0, "-5.0"), (0.0, "0.0"), ("7", "'7'"),
     (True, "True")],
)
def test_bad_samples_are_rejected_naming_value_and_position(value: object, shown: str) -> None:
    with pytest.raises(ConfigError, match=rf"decode current\[2\] is {shown}: samples must be "
                                          "finite numbers > 0"):
        compare(BASE, [100.0, 99.0, value, 101.0], DECODE)  # type: ignore[list-item]


def test_bad_baseline_version_is_named() -> None:
    with pytest.raises(ConfigError, match=r"decode baseline version 1\[0\] is nan"):
        compare([[100.0, 101.0], [math.nan]], [100.0, 99.0, 98.0], DECODE)
    with pytest.raises(ConfigError, match="baseline version 1 has no samples"):
        compare([[100.0, 101.0], []], [100.0, 99.0, 98.0], DECODE)
    with pytest.raises(ConfigError, match="baseline mixes numbers and lists"):
        compare([100.0, [101.0]], [100.0, 99.0, 98.0], DECODE)  # type: ignore[list-item]


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="min_effect for 'x' is 1.5"):
        Metric("x", higher_is_better=True, min_effect=1.5)
    with pytest.raises(ConfigError, match="alpha is 0"):
        compare(BASE, BASE, DECODE, alpha=0)
    with pytest.raises(ConfigError, match="min_samples is 1"):
        compare(BASE, BASE, DECODE, min_samples=1)
    with pytest.raises(ConfigError, match="at least 2 samples on each side"):
        measure_shift(BASE, [100.0], DECODE)


def test_same_inputs_give_the_same_result() -> None:
    base, cur = history(100, 0.02, 12, 5, seed=1), noisy(96, 0.02, 5, seed=2)
    first = compare(base, cur, DECODE)
    assert compare([list(v) for v in base], list(cur), DECODE) == first
    assert compare(BASE, cur, DECODE) == compare(tuple(BASE), tuple(cur), DECODE)


def test_a_history_baseline_uses_ranks_and_catches_a_5_percent_step() -> None:
    base = history(100, 0.02, 20, 5, seed=3)
    result = compare(base, noisy(95, 0.02, 5, seed=4), DECODE)
    assert result.verdict == "regression" and result.n_baseline == 100
    assert measure_shift(base, noisy(95, 0.02, 5, seed=4), DECODE).method == "rank"
    assert compare(base, noisy(100, 0.02, 5, seed=5), DECODE).verdict == "unchanged"


def test_one_stall_in_the_current_run_is_not_a_regression() -> None:
    base = history(100, 0.01, 20, 5, seed=6)
    current = noisy(100, 0.01, 5, seed=7)
    current[2] *= 0.75
    assert compare(base, current, DECODE).verdict == "unchanged"
    assert compare(base[-1], current, DECODE).verdict != "regression"


def test_run_to_run_drift_in_the_history_widens_the_interval() -> None:
    rng = np.random.default_rng(8)
    base = [noisy(100 * math.exp(0.04 * rng.standard_normal()), 0.005, 5, seed=100 + v)
            for v in range(20)]
    shift = measure_shift(base, noisy(95, 0.005, 5, seed=9), DECODE)
    assert shift.method == "rank+versions"
    pooled = [x for v in base for x in v]
    assert (shift.log_high - shift.log_low) > 3 * (
        measure_shift(pooled, noisy(95, 0.005, 5, seed=9), DECODE).log_high
        - measure_shift(pooled, noisy(95, 0.005, 5, seed=9), DECODE).log_low)
    assert compare(base, noisy(95, 0.005, 5, seed=9), DECODE).verdict != "regression"


def test_benjamini_hochberg_matches_the_hand_example() -> None:
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205]
    # thresholds k * 0.05 / 8: 0.00625, 0.0125, 0.01875, ... only the first two pass
    assert benjamini_hochberg(p, q=0.05) == [True, True] + [False] * 6
    # step-up: rank 2 passes (0.04 <= 2 * 0.05 / 2), so rank 1 does too
    assert benjamini_hochberg([0.04, 0.04], q=0.05) == [True, True]
    assert benjamini_hochberg([0.04, 0.01, 0.9], q=0.05) == [False, True, False]
    assert benjamini_hochberg([], q=0.05) == []


def test_benjamini_hochberg_rejects_bad_p_values() -> None:
    with pytest.raises(ConfigError, match=r"p_values\[1\] is nan"):
        benjamini_hochberg([0.1, math.nan])
    with pytest.raises(ConfigError, match="q is 2"):
        benjamini_hochberg([0.1], q=2)


def test_compare_many_corrects_for_the_number_of_series() -> None:
    borderline = ([100.0, 101.0, 99.0, 100.5, 99.5], [96.5, 93.0, 97.5, 94.0, 95.0])
    alone = compare(*borderline, DECODE)
    assert alone.verdict == "regression" and 0.0005 < alone.p_value < 0.005
    baseline = {"odd": borderline[0]} | {f"s{i}": noisy(100, 0.01, 5, i) for i in range(9)}
    current = {"odd": borderline[1]} | {f"s{i}": noisy(100, 0.01, 5, 50 + i) for i in range(9)}
    results = compare_many(baseline, current, DECODE)
    assert list(results) == list(current)
    assert results["odd"].verdict != "regression"
    assert "not significant after correcting for 10 series" in results["odd"].reason
    clear = compare_many({"a": BASE, "b": BASE}, {"a": [90.0, 91.0, 89.0], "b": BASE}, DECODE)
    assert clear["a"].verdict == "regression" and clear["b"].verdict == "unchanged"


def test_compare_many_mismatched_keys_and_metrics_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"only in baseline \['x'\], only in current \['y'\]"):
        compare_many({"a": BASE, "x": BASE}, {"a": BASE, "y": BASE}, DECODE)
    with pytest.raises(ConfigError, match="no metric given for series 'b'"):
        compare_many({"a": BASE, "b": BASE}, {"a": BASE, "b": BASE}, {"a": DECODE})
    mixed = compare_many({"d": BASE, "t": BASE}, {"d": [90.0] * 3, "t": [90.0] * 3},
                         {"d": DECODE, "t": TTFT})
    assert (mixed["d"].verdict, mixed["t"].verdict) == ("regression", "improvement")


def test_a_significant_p_with_an_interval_through_zero_flags_nothing() -> None:
    from pytest_tokperf.stats.shifts import Shift
    from pytest_tokperf.stats.compare import judge

    # The rank test's p and the interval disagree: -8% estimate, p tiny, but the
    # interval still allows +1%. Not a regression anyone should be paged for.
    torn = Shift(log_shift=math.log(0.92), log_low=math.log(0.85), log_high=math.log(1.01),
                 confidence=0.995, p_value=1e-4, n_baseline=20, n_current=5, method="rank")
    assert judge(torn, DECODE).verdict == "unchanged"
    clear = Shift(log_shift=math.log(0.92), log_low=math.log(0.85), log_high=math.log(0.97),
                  confidence=0.995, p_value=1e-4, n_baseline=20, n_current=5, method="rank")
    assert judge(clear, DECODE).verdict == "regression"
