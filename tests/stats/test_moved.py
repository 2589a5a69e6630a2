"""A flag the machine's memory moved with is judged on what the move cannot explain
(stats.moved): withheld where the rest no longer makes the flag, kept with the arithmetic
where it does."""

from __future__ import annotations

import math

import pytest

from pytest_tokperf.stats import DECODE, TTFT, Comparison, compare
from pytest_tokperf.stats.moved import moved_verdict

RUNS = [[100.0, 100.5, 99.5, 100.2, 99.8]] * 4
"""A baseline of four runs at 100 tok/s, CV ~0.3%: any change of a few % is resolved."""


def _at(level: float) -> Comparison:
    return compare(RUNS, [level * x / 100 for x in RUNS[0]], DECODE)


def _plain(reason: str) -> str:
    return reason.replace("−", "-")


def test_a_drop_bigger_than_the_memory_explains_stands_with_the_arithmetic() -> None:
    # 60 -> 37 GB/s explains at most 37/60 - 1 = -38.3%; a -44% drop leaves about -9%
    flag = _at(56.0)
    kept = moved_verdict(flag, [37e9], [60e9])
    assert kept.verdict == "regression" and kept.shift is flag.shift
    reason = _plain(kept.reason)
    assert reason.startswith(_plain(flag.reason))
    assert ("the machine's memory moved: it read 37.0 GB/s around this run and 60.0 GB/s "
            "around the baseline's (x0.62), which explains up to -38.3% (bandwidth^1); the "
            "-44.0% less that is -9.2%") in reason
    assert reason.endswith("still a regression")


def test_a_drop_the_memory_explains_is_withheld_with_the_arithmetic() -> None:
    withheld = moved_verdict(_at(80.0), [37e9], [60e9])
    assert withheld.verdict == "inconclusive" and withheld.shift is None
    reason = _plain(withheld.reason)
    assert reason.startswith("inconclusive: the machine's memory moved: it read 37.0 GB/s")
    assert "explains up to -38.3% (bandwidth^1); the -20.0% less that is +29.7%" in reason
    assert "not a regression of 5% or more by itself" in reason


def test_a_host_exponent_explains_less() -> None:
    # decode ~ bandwidth^0.33: the same move explains -14.7%, so a -30% drop (-20% left)
    # stands and a -15% one (-0.4% left) does not
    assert moved_verdict(_at(70.0), [37e9], [60e9], exponent=0.33).verdict == "regression"
    assert moved_verdict(_at(85.0), [37e9], [60e9], exponent=0.33).verdict == "inconclusive"
    assert math.isclose(0.617 ** 0.33, 0.853, abs_tol=1e-3)


def test_a_rest_whose_interval_reaches_no_change_is_withheld() -> None:
    # a -41% drop on a noisy baseline: -4.5% would be left, not clear of 0
    noisy = compare([[100.0, 110.0, 90.0, 105.0, 95.0]] * 2, [59.0, 65.0, 53.0, 62.0, 56.0],
                    DECODE)
    assert noisy.verdict == "regression"
    assert moved_verdict(noisy, [37e9], [60e9]).verdict == "inconclusive"


def test_a_gain_on_faster_memory_and_a_slower_ttft_on_slower_memory_are_withheld() -> None:
    assert moved_verdict(_at(125.0), [60e9], [37e9]).verdict == "inconclusive"
    ttft = compare(RUNS, [1.25 * x for x in RUNS[0]], TTFT)  # 25% longer: a regression
    assert ttft.verdict == "regression"
    assert moved_verdict(ttft, [37e9], [60e9]).verdict == "inconclusive"
    assert moved_verdict(ttft, [60e9], [37e9]).verdict == "regression"


def test_a_change_against_the_memory_keeps_its_flag_and_says_so() -> None:
    kept = moved_verdict(_at(90.0), [60e9], [37e9])  # slower on faster memory
    assert kept.verdict == "regression"
    assert kept.reason.endswith("around the baseline's (x1.62), the other way: it explains none of this")


@pytest.mark.parametrize(("now", "then", "who"), [
    ([], [60e9], "this run"), ([None], [60e9], "this run"), ([37e9], [None, None], "its baseline"),
])
def test_without_probes_the_flag_stands_and_says_it_cannot_tell(now, then, who) -> None:
    kept = moved_verdict(_at(80.0), now, then)
    assert kept.verdict == "regression"
    assert kept.reason.endswith(f"; {who} has no bandwidth probe: the machine cannot be told "
                                "from the engine")


@pytest.mark.parametrize("now", [[55e9], [37e9, 58e9]])
def test_probes_that_did_not_all_move_leave_the_flag_alone(now) -> None:
    flag = _at(80.0)
    assert moved_verdict(flag, now, [60e9, 58e9]) is flag


def test_an_unflagged_comparison_is_left_alone_even_without_probes() -> None:
    same = _at(100.0)
    assert not same.flagged
    assert moved_verdict(same, [37e9], [60e9]) is same
    assert moved_verdict(same, [], []) is same
