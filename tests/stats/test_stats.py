"""Verdicts, direction, stalls, drift, multiple testing and bad input of one comparison."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats import DECODE, TTFT, Metric, compare, compare_many
from pytest_tokperf.stats.comparing import measure_shift
from pytest_tokperf.stats.family import benjamini_hochberg
from pytest_tokperf.stats.shifts import Shift
from pytest_tokperf.stats.verdict import judge


def noisy(level: float, cv: float, n: int, seed: int) -> list[float]:
    return list(level * (1 + cv * np.random.default_rng(seed).standard_normal(n)))


def history(level: float, cv: float, versions: int, reps: int, seed: int) -> list[list[float]]:
    return [noisy(level, cv, reps, seed * 1000 + v) for v in range(versions)]


BASE = [100.0, 101.0, 99.0, 100.5, 99.5]
STALLED_BASE = [366.38, 364.45, 365.55, 373.51, 377.46, 373.66, 274.81, 363.46, 375.92, 370.84]


def test_a_drop_in_tokens_per_s_is_a_regression_with_its_figures() -> None:
    result = compare(BASE, [93.5, 92.0, 93.0, 92.5, 94.0], DECODE)
    assert result.verdict == "regression" and result.regressed and result.flagged
    assert result.relative_change == pytest.approx(-0.07, abs=0.005)
    assert result.ci_low < result.relative_change < result.ci_high < 0
    assert result.p_value < 0.005 and (result.n_baseline, result.n_current) == (5, 5)
    assert result.reason.startswith("decode −7.0% [")
    assert ("the interval excludes no change (p=" in result.reason
            and "< 0.005) and the change reaches the 5% minimum" in result.reason)


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
    assert -0.05 < result.ci_low and result.ci_high < 0.05
    assert "the interval lies within ±5%" in result.reason


def test_a_real_but_small_change_is_unchanged_below_the_minimum() -> None:
    result = compare([100.0, 100.2, 99.8] * 3, [98.0, 98.2, 97.8] * 3, DECODE)
    assert result.verdict == "unchanged" and result.p_value < 1e-6
    assert -0.05 < result.ci_low < result.ci_high < 0
    assert "a real change (p=" in result.reason and "below the 5% minimum" in result.reason


def test_the_minimum_effect_is_per_metric() -> None:
    strict = Metric("decode", higher_is_better=True, min_effect=0.01)
    assert compare([100.0, 100.2, 99.8] * 3, [98.0, 98.2, 97.8] * 3, strict).verdict == "regression"


def test_too_noisy_to_decide_is_inconclusive_and_says_what_would_settle_it() -> None:
    result = compare([100.0, 110.0, 90.0], [95.0, 120.0, 85.0], DECODE)
    assert result.verdict == "inconclusive"
    assert result.ci_low <= -0.05 and result.ci_high >= 0.05
    assert "cannot tell a 5% change from none at 3 vs 3 samples" in result.reason
    assert "this comparison resolves about" in result.reason
    assert "repetitions per session would settle it" in result.reason


def test_a_9_percent_drop_at_3_repetitions_is_not_called_unchanged() -> None:
    # The false all-clear: once "unchanged, −9.1% [−18.8%, +1.8%]".
    result = compare([13.595, 13.204, 13.375], [12.152, 12.193, 12.181], DECODE)
    assert result.verdict == "regression"
    assert result.ci_low < -0.05 < result.ci_high < 0


def test_one_stall_in_the_baseline_does_not_hide_a_real_drop() -> None:
    current = [330.2, 318.4, 336.9, 325.0, 322.7, 331.8, 319.9, 334.1, 327.3, 321.5]
    result = compare(STALLED_BASE, current, DECODE)
    assert result.verdict == "regression"
    assert result.relative_change == pytest.approx(-0.115, abs=0.01)
    assert result.shift is not None
    assert [s.value for s in result.shift.set_aside] == [pytest.approx(274.81)]
    assert "set aside as stalled repetitions: 274.81 (baseline, −25.4% off its session's median)" in result.reason


def test_one_stall_does_not_make_an_unchanged_run_inconclusive() -> None:
    same = [369.1, 372.4, 366.0, 371.9, 368.3, 374.2, 365.8, 370.7, 367.5, 373.0]
    assert compare(STALLED_BASE, same, DECODE).verdict == "unchanged"


def test_one_stall_in_the_current_run_is_set_aside_not_a_regression() -> None:
    base = history(100, 0.01, 5, 5, seed=6)
    current = noisy(100, 0.01, 5, seed=7)
    current[2] *= 0.75
    result = compare(base, current, DECODE)
    assert result.verdict == "unchanged"
    assert "(current, −24.9% off its session's median)" in result.reason
    assert compare(base[-1], current, DECODE).verdict == "unchanged"


def test_a_stall_in_ttft_is_a_longer_time() -> None:
    base = [[x / 1000 for x in v] for v in history(100, 0.01, 5, 5, seed=16)]
    current = [x / 1000 for x in noisy(100, 0.01, 5, seed=17)]
    current[0] *= 1.3
    result = compare(base, current, TTFT)
    assert result.verdict == "unchanged" and result.shift is not None
    assert len(result.shift.set_aside) == 1


def test_a_current_run_with_most_repetitions_stalled_is_not_a_clean_regression() -> None:
    base = history(100, 0.01, 5, 5, seed=8)
    current = [100.5, 75.2, 74.8, 99.6, 75.5]
    result = compare(base, current, DECODE)
    assert result.verdict == "inconclusive"
    assert result.shift is not None and result.shift.df < 10  # its own spread, not the pool's


def test_two_clock_states_a_few_percent_apart_are_kept_as_noise() -> None:
    rng = np.random.default_rng(9)
    def clocks(n: int) -> list[float]:
        return list(100 * np.where(rng.random(n) < 0.3, 0.92, 1.0)
                    * (1 + 0.01 * rng.standard_normal(n)))
    result = compare([clocks(5) for _ in range(5)], clocks(5), DECODE)
    assert result.shift is not None and result.shift.set_aside == ()
    assert not result.flagged


def test_run_to_run_drift_in_the_history_widens_the_interval() -> None:
    rng = np.random.default_rng(8)
    base = [noisy(100 * math.exp(0.04 * rng.standard_normal()), 0.005, 5, seed=100 + v)
            for v in range(20)]
    shift = measure_shift(base, noisy(95, 0.005, 5, seed=9), DECODE)
    assert shift.method == "sessions" and shift.drift_p < 0.01
    assert shift.std_error > 3 * shift.noise_cv * math.sqrt(1 / 5 + 1 / 100)
    assert compare(base, noisy(95, 0.005, 5, seed=9), DECODE).verdict != "regression"


def test_one_run_baseline_is_students_t_on_logs_as_in_scipy() -> None:
    base, cur = noisy(100, 0.02, 6, seed=10), noisy(97, 0.02, 4, seed=11)
    shift = measure_shift(base, cur, DECODE)
    ref = sps.ttest_ind(np.log(cur), np.log(base))
    assert shift.p_value == pytest.approx(float(ref.pvalue), rel=1e-9)
    ci = ref.confidence_interval(0.995)
    assert shift.interval(0.005) == pytest.approx((float(ci.low), float(ci.high)), rel=1e-9)


@pytest.mark.parametrize("seed", range(40))
def test_the_words_never_contradict_the_interval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shift = Shift(log_shift=float(rng.normal(0, 0.06)), std_error=float(rng.uniform(0.002, 0.04)),
                  df=float(rng.integers(2, 60)), n_baseline=20, n_current=5, method="pooled",
                  noise_cv=0.02, versions=4)
    for alpha in (0.05, 0.005, 5e-5):
        c = judge(shift, DECODE, alpha=alpha)
        excludes_zero = c.ci_low > 0 or c.ci_high < 0
        assert excludes_zero == (c.p_value < alpha)
        if c.verdict == "regression":  # significant AND large enough
            assert c.ci_high < 0 and c.relative_change <= -0.05
        elif c.verdict == "improvement":
            assert c.ci_low > 0 and c.relative_change >= 0.05
        elif c.verdict == "unchanged":  # a change of m is ruled out
            assert -0.05 < c.ci_low and c.ci_high < 0.05
        else:  # m is not ruled out, and no change of m was measured
            assert abs(c.relative_change) < 0.05 or not excludes_zero
            assert c.ci_low <= -0.05 or c.ci_high >= 0.05
        assert c.confidence == pytest.approx(1 - alpha)


@pytest.mark.parametrize("current", [[], [97.0], [97.0, 98.0]])
def test_too_few_samples_is_inconclusive_not_a_guess(current: list[float]) -> None:
    result = compare(BASE, current, DECODE)
    assert result.verdict == "inconclusive" and math.isnan(result.relative_change)
    assert result.reason == (f"decode: baseline has 5 and current {len(current)} samples; "
                             "need at least 3 on each side")


def test_an_empty_baseline_is_inconclusive() -> None:
    result = compare([], BASE, DECODE)
    assert result.verdict == "inconclusive" and result.n_baseline == 0


@pytest.mark.parametrize(("baseline", "current", "verdict"), [
    ([50.0] * 5, [45.0] * 5, "regression"),  # once "regression, p=7e-114"
    ([50.0] * 5, [50.0] * 5, "unchanged"),
    ([50.0] * 5, [40.0] * 5, "regression"),  # once "inconclusive": a sum of squares of 1e-31
    ([50.0] * 5, [52.0] * 5, "unchanged"),
    ([100.0] * 5, [95.0] * 5, "regression"),  # exactly the 5% minimum: it reaches it
    ([100.0] * 3, [110.0] * 3, "improvement"),
    ([[100.0] * 3, [100.0] * 3], [100.0] * 3, "unchanged"),
    ([[0.3] * 5, [0.3] * 5], [[0.1 * 3] * 5, [0.3] * 5], "unchanged"),  # 0.1 * 3 != 0.3
])
def test_exact_ties_are_decided_by_the_exact_difference_against_the_minimum(
    baseline: list[float], current: list[float], verdict: str
) -> None:
    result = compare(baseline, current, DECODE)
    assert result.verdict == verdict
    assert result.ci_low == result.ci_high == result.relative_change
    assert "exactly: every repetition of each side is identical" in result.reason
    assert "the exact change is judged against the 5% minimum" in result.reason
    if verdict == "unchanged":
        assert abs(result.relative_change) < 0.05
    # the same figures in other units round differently, and give the same verdict
    assert compare(_scaled(baseline, 1 / 3), _scaled(current, 1 / 3), DECODE).verdict == verdict


def _scaled(side: list, factor: float) -> list:  # type: ignore[type-arg]
    return [_scaled(x, factor) if isinstance(x, list) else x * factor for x in side]


def test_an_exact_tie_in_ttft_keeps_the_metrics_direction() -> None:
    assert compare([0.5] * 4, [0.6] * 4, TTFT).verdict == "regression"
    assert compare([0.5] * 4, [0.4] * 4, TTFT).verdict == "improvement"


@pytest.mark.parametrize(("baseline", "current"), [
    ([100.0] * 3, [100.0, 100.0, 101.0]), ([100.0, 101.0, 99.0], [90.0] * 3),
    ([[100.0] * 3, [100.0] * 3], [100.0, 100.5, 99.5]),
])
def test_one_side_identical_the_other_varying_is_inconclusive_never_unchanged(
    baseline: list[float], current: list[float]
) -> None:
    result = compare(baseline, current, DECODE)
    assert result.verdict == "inconclusive"
    assert "the repetitions of the baseline or of the current run are all identical" in (
        result.reason)


def test_one_identical_version_among_many_is_judged_by_the_others_spread() -> None:
    base = [*history(100, 0.01, 4, 5, seed=18), [100.0] * 5]
    assert compare(base, [90.0, 90.4, 89.6, 90.2, 89.9], DECODE).verdict == "regression"


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
    with pytest.raises(ConfigError, match="alpha is nan"):
        compare(BASE, BASE, DECODE, alpha=math.nan)
    with pytest.raises(ConfigError, match="min_samples is 1"):
        compare(BASE, BASE, DECODE, min_samples=1)
    with pytest.raises(ConfigError, match="at least 2 samples on each side"):
        measure_shift(BASE, [100.0], DECODE)


def test_same_inputs_give_the_same_result() -> None:
    base, cur = history(100, 0.02, 12, 5, seed=1), noisy(96, 0.02, 5, seed=2)
    first = compare(base, cur, DECODE)
    assert compare([list(v) for v in base], list(cur), DECODE) == first
    assert compare(BASE, cur, DECODE) == compare(tuple(BASE), tuple(cur), DECODE)


def test_a_five_version_history_catches_an_8_percent_step_at_cv_2_percent() -> None:
    base = history(100, 0.02, 5, 5, seed=3)
    result = compare(base, noisy(92, 0.02, 5, seed=4), DECODE)
    assert result.verdict == "regression" and result.n_baseline == 25
    assert measure_shift(base, noisy(92, 0.02, 5, seed=4), DECODE).method == "pooled"
    assert compare(base, noisy(100, 0.02, 5, seed=5), DECODE).verdict == "unchanged"


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
    borderline = ([100.0, 101.0, 99.0, 100.5, 99.5], [96.5, 89.0, 97.0, 91.5, 92.5])
    alone = compare(*borderline, DECODE)
    assert alone.verdict == "regression" and 0.0005 < alone.p_value < 0.005
    baseline = {"odd": borderline[0]} | {f"s{i}": noisy(100, 0.01, 5, i) for i in range(9)}
    current = {"odd": borderline[1]} | {f"s{i}": noisy(100, 0.01, 5, 50 + i) for i in range(9)}
    results = compare_many(baseline, current, DECODE)
    assert list(results) == list(current)
    assert results["odd"].verdict == "inconclusive"
    assert "not after Holm step-down over 10 comparisons" in results["odd"].reason
    assert results["s0"].correction.startswith("Holm step-down over 10 comparisons")
    clear = compare_many({"a": BASE, "b": BASE}, {"a": [90.0, 91.0, 89.0], "b": BASE}, DECODE)
    assert clear["a"].verdict == "regression" and clear["b"].verdict == "unchanged"


def test_compare_many_mismatched_keys_and_metrics_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"only in baseline \['x'\], only in current \['y'\]"):
        compare_many({"a": BASE, "x": BASE}, {"a": BASE, "y": BASE}, DECODE)
    with pytest.raises(ConfigError, match="no metric given for series 'b'"):
        compare_many({"a": BASE, "b": BASE}, {"a": BASE, "b": BASE}, {"a": DECODE})
    mixed = compare_many({"d": BASE, "t": BASE}, {"d": [90.0, 90.5, 89.5], "t": [90.0, 90.5, 89.5]},
                         {"d": DECODE, "t": TTFT})
    assert (mixed["d"].verdict, mixed["t"].verdict) == ("regression", "improvement")
