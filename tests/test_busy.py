"""One busy rule for every door: what a measurement taken with neighbours busy becomes."""

from __future__ import annotations

import pytest

from pytest_tokperf.busy import BusyPolicy, busy_policy
from pytest_tokperf.errors import ConfigError


@pytest.mark.parametrize(("outcome", "quiet", "busy_failed", "busy_passed"), [
    ("skip", (True, False), False, False),
    ("fail", (True, False), True, True),
    ("judge", (True, False), True, False),
])
def test_a_busy_check_fails_as_the_rule_says_and_a_quiet_one_as_it_reads(
        outcome: str, quiet: tuple[bool, bool], busy_failed: bool, busy_passed: bool) -> None:
    policy = busy_policy(outcome)
    assert (policy.fails(False, True), policy.fails(False, False)) == quiet
    assert policy.fails(True, True) is busy_failed
    assert policy.fails(True, False) is busy_passed


def test_judge_never_waits_for_a_quiet_window() -> None:
    assert BusyPolicy("skip", 30.0).waits_s == BusyPolicy("fail", 30.0).waits_s == 30.0
    assert BusyPolicy("judge", 30.0).waits_s == 0.0 and BusyPolicy("judge").judges


@pytest.mark.parametrize(("outcome", "wait", "message"), [
    ("maybe", 0.0, r"^--busy 'maybe' is not 'skip', 'fail' or 'judge'"),
    ("skip", -1.0, r"^--busy-wait -1.0: give seconds, 0 or more"),
    ("skip", float("nan"), r"^--busy-wait nan: give seconds"),
])
def test_a_bad_rule_names_the_value(outcome: str, wait: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        busy_policy(outcome, wait)
