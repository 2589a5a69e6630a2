"""A flag the machine's memory moved with is judged on what the move cannot explain
(stats.moved): withheld where the rest no longer makes the flag, kept with the arithmetic
where it does."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from pytest_tokperf.stats import DECODE, TTFT, Comparison, compare
from pytest_tokperf.stats.moved import BANDWIDTH_EXPONENT, host_exponent, moved_verdict

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
            "around the baseline's (x0.62), which explains up to -38.3% (bandwidth^1: the "
            "bound; this host's relation is not yet measured: needs runs in both memory "
            "states); the -44.0% less that is -9.2%") in reason
    assert reason.endswith("still a regression")


def test_a_drop_the_memory_explains_is_withheld_with_the_arithmetic() -> None:
    withheld = moved_verdict(_at(80.0), [37e9], [60e9])
    assert withheld.verdict == "inconclusive" and withheld.shift is None
    reason = _plain(withheld.reason)
    assert reason.startswith("inconclusive: the machine's memory moved: it read 37.0 GB/s")
    assert "explains up to -38.3% (bandwidth^1: the bound; " in reason
    assert "memory states); the -20.0% less that is +29.7%" in reason
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


def _host_runs(seed: int, *, exponent: float = 0.45, slow: int = 5, fast: int = 5,
               groups: int = 2, noise: float = 0.02) -> list[tuple[str, float, float]]:
    """Runs of ``groups`` builds, each ``slow`` at 37 GB/s and ``fast`` at 60, whose decode
    follows the probe as probe^``exponent`` with a log SD of ``noise``."""
    rng = random.Random(seed)
    return [(f"b{g}", gb * 1e9,
             100.0 * (g + 1) * (gb / 60) ** exponent * rng.lognormvariate(0, noise))
            for g in range(groups) for gb in [37.0] * slow + [60.0] * fast]


def test_the_host_bound_lies_just_above_the_relation_in_95_of_100_fits() -> None:
    fits = [host_exponent(_host_runs(seed, noise=0.05), 0.95) for seed in range(200)]
    assert all(f.source == f"this host's upper bound from {f.runs} runs" for f in fits)
    assert statistics.median(f.runs for f in fits) == 20
    assert 0.93 <= sum(f.value >= 0.45 for f in fits) / len(fits) <= 0.99  # 95.5% here
    assert 0.5 < statistics.median(f.value for f in fits) < 0.58  # 0.45 + 1.73 SE


def test_runs_whose_probe_caught_the_other_state_are_set_aside() -> None:
    # 3 of 10 runs on slow memory probed as fast: a plain fit's bound falls under the
    # relation (0.45) in most draws, the host's in few
    def caught(seed: int) -> list[tuple[str, float, float]]:
        return [(b, 60e9 if i < 3 else p, v) for i, (b, p, v) in
                enumerate(_host_runs(seed, slow=10, groups=1, noise=0.01))]
    fits = [host_exponent(caught(seed), 0.95) for seed in range(100)]
    plain = [host_exponent(caught(seed), 0.95, outliers=math.inf) for seed in range(100)]
    assert sum(f.value < 0.45 for f in fits) <= 10  # 2 here
    assert sum(f.value < 0.45 for f in plain) >= 50  # 60 here
    assert all(f.runs <= 12 for f in fits)


@pytest.mark.parametrize(("runs", "why"), [
    (_host_runs(1, slow=0, fast=10), "one state only"),
    ([(b, p * (1 + 0.2 * (i % 2)), v) for i, (b, p, v) in enumerate(_host_runs(1, slow=0))],
     "probes under 1.3x apart"),
    (_host_runs(1, slow=2, fast=10), "2 runs in one state"),
    (_host_runs(1, slow=3, fast=4, groups=1), "7 runs"),
])
def test_the_bound_stays_where_the_runs_cannot_tell(
        runs: list[tuple[str, float, float]], why: str) -> None:
    assert host_exponent(runs) is BANDWIDTH_EXPONENT, why
    assert str(BANDWIDTH_EXPONENT) == ("bandwidth^1: the bound; this host's relation is not "
                                       "yet measured: needs runs in both memory states")


@pytest.mark.parametrize(("exponent", "bound"), [(-0.3, 0.0), (1.6, 1.0)])
def test_the_host_bound_is_clipped_to_0_and_1(exponent: float, bound: float) -> None:
    assert host_exponent(_host_runs(2, exponent=exponent, noise=0.005)).value == bound


def test_a_regression_the_bound_withholds_stands_with_the_host_bound() -> None:
    # -30% on slow memory that costs -20.5% (decode ~ probe^0.45): -44.4% measured; a
    # probe reading 35 GB/s lets the bound explain -41.7%, the host's ~probe^0.5 -24%
    flag = _at(55.6)
    assert moved_verdict(flag, [35e9], [60e9]).verdict == "inconclusive"
    fitted = host_exponent(_host_runs(3))
    kept = moved_verdict(flag, [35e9], [60e9], exponent=fitted)
    assert kept.verdict == "regression", kept.reason
    assert f"(bandwidth^{fitted.value:g}: this host's upper bound from 20 runs)" in kept.reason
