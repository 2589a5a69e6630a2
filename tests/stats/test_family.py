"""A session judged as one family: Holm's step-down and Benjamini-Hochberg on intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats import DECODE, TTFT, Comparison, compare, judge_family
from pytest_tokperf.stats.shifts import Shift
from pytest_tokperf.stats.verdict import judge


def with_p(p: float, log_shift: float = -0.08, df: float = 30.0) -> Shift:
    """A shift whose two-sided t p-value is ``p``."""
    se = abs(log_shift) / float(special.stdtrit(df, 1 - p / 2))
    return Shift(log_shift, se, df, 25, 5, "pooled", 0.02, 5)


def clean(n: int, seed: int = 0) -> dict[str, Comparison]:
    rng = np.random.default_rng(seed)
    return {f"t{i}": judge(Shift(float(rng.normal(0, 0.005)), 0.005, 24.0, 25, 5, "pooled",
                                 0.01, 5), DECODE) for i in range(n)}


def test_a_strong_regression_survives_holm_and_is_judged_at_its_level() -> None:
    session = clean(99) | {"slow": judge(with_p(1e-9), DECODE)}
    family = judge_family(session)
    slow = family.comparisons["slow"]
    assert slow.verdict == "regression" and family.regressions == ["slow"]
    assert slow.confidence == pytest.approx(1 - 0.005 / 100)  # first of 100 Holm steps
    assert slow.ci_high < 0 and slow.ci_low <= -0.05
    assert "(Holm step-down: p=" in slow.reason and "over 100 comparisons)" in slow.reason
    assert family.summary == ("Holm step-down over 100 comparisons at alpha 0.005: "
                              "1 regression, 0 improvements, 0 flags withdrawn")
    assert all(c.correction.startswith("Holm step-down over 100") for c in family.comparisons.values())


def test_a_flag_significant_only_alone_is_withdrawn_as_inconclusive() -> None:
    alone = judge(with_p(0.0012), DECODE)
    assert alone.verdict == "regression"
    family = judge_family(clean(99) | {"odd": alone})
    odd = family.comparisons["odd"]
    assert odd.verdict == "inconclusive" and family.withdrawn == 1
    assert odd.ci_low < 0 < odd.ci_high  # the interval at the level that stopped Holm
    assert "flagged alone at p=0.0012; not after Holm step-down over 100 comparisons, which " \
           "needed p ≤ 5.0e-05" in odd.reason


def test_holm_steps_down_so_a_build_that_slows_many_series_is_caught() -> None:
    # 10 series all at p = 0.0006: Holm's first step needs 0.005/10, its last 0.005/1;
    # each passes because the threshold loosens as the earlier ones pass.
    session = {f"s{i}": judge(with_p(0.0004 + i * 1e-5), DECODE) for i in range(10)}
    family = judge_family(session)
    assert family.regressions == list(session)
    levels = sorted(1 - c.confidence for c in family.comparisons.values())
    assert levels == pytest.approx([0.005 / k for k in range(10, 0, -1)])


def test_the_correction_never_turns_a_verdict_into_a_flag() -> None:
    small = judge(Shift(-0.02, 0.004, 30.0, 25, 5, "pooled", 0.01, 5), DECODE)
    noisy = judge(Shift(-0.04, 0.03, 30.0, 25, 5, "pooled", 0.05, 5), DECODE)
    assert (small.verdict, noisy.verdict) == ("unchanged", "inconclusive")
    family = judge_family({"small": small, "noisy": noisy, "slow": judge(with_p(1e-12), DECODE)})
    assert family.comparisons["small"].verdict == "unchanged"
    assert family.comparisons["small"].ci_high == small.ci_high
    assert family.comparisons["noisy"].verdict == "inconclusive"


def test_direction_survives_the_correction() -> None:
    faster_ttft = judge(with_p(1e-9), TTFT)
    family = judge_family(clean(5) | {"ttft": faster_ttft})
    assert family.comparisons["ttft"].verdict == "improvement"


def test_one_comparison_is_its_own_family() -> None:
    single = compare([100.0, 101.0, 99.0, 100.5, 99.5], [96.5, 89.0, 97.0, 91.5, 92.5], DECODE)
    family = judge_family({"only": single})
    assert family.comparisons["only"].verdict == single.verdict == "regression"
    assert family.comparisons["only"].ci_low == single.ci_low


def test_comparisons_without_data_pass_through_untested() -> None:
    scarce = compare([100.0, 101.0], [99.0], DECODE)
    flat = compare([100.0] * 3, [100.0] * 3, DECODE)
    family = judge_family({"scarce": scarce, "flat": flat, "slow": judge(with_p(1e-3), DECODE)})
    assert family.tested == 1
    assert family.comparisons["scarce"].verdict == "inconclusive"
    assert math.isnan(family.comparisons["scarce"].p_value)
    assert family.comparisons["slow"].verdict == "regression"


def test_benjamini_hochberg_flags_at_the_false_coverage_adjusted_level() -> None:
    session = clean(8) | {"a": judge(with_p(1e-4), DECODE), "b": judge(with_p(8e-4), DECODE)}
    holm = judge_family(session)
    bh = judge_family(session, method="bh")
    assert holm.regressions == ["a"] and bh.regressions == ["a", "b"]
    assert bh.comparisons["b"].confidence == pytest.approx(1 - 2 * 0.005 / 10)
    assert bh.summary.startswith("Benjamini-Hochberg over 10 comparisons at alpha 0.005")


def test_a_clean_session_of_100_real_comparisons_flags_nothing() -> None:
    rng = np.random.default_rng(5)
    session = {}
    for i in range(100):
        versions = [list(100 * (1 + 0.02 * rng.standard_normal(5))) for _ in range(5)]
        session[i] = compare(versions, list(100 * (1 + 0.02 * rng.standard_normal(5))), DECODE)
    family = judge_family(session)
    assert family.tested == 100 and family.regressions == []
    assert not any(c.flagged for c in family.comparisons.values())


def test_bad_family_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="method is 'bonferroni': give 'holm' or 'bh'"):
        judge_family({}, method="bonferroni")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="alpha is 1.5"):
        judge_family({}, alpha=1.5)
    assert judge_family({}).summary == ("Holm step-down over 0 comparisons at alpha 0.005: "
                                        "0 regressions, 0 improvements, 0 flags withdrawn")
