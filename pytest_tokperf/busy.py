"""What a measurement taken while other processes kept the machine busy becomes: one
rule (``BusyPolicy``) for every door: the plugin's checks and A/Bs, ``tokperf
compare-builds``, ``bisect``, ``watch`` and ``bench`` (``hardware.load`` tells busy
from quiet, stops a measurement still busy a minute in, and waits for a quiet window)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pytest_tokperf.errors import ConfigError

BusyOutcome = Literal["skip", "fail", "judge"]
BUSY_OUTCOMES: tuple[BusyOutcome, ...] = ("skip", "fail", "judge")
BUSY_HELP = ("what a measurement taken while other processes kept the machine busy becomes: "
             "'skip' reports it, neither a pass nor a fail (default); 'fail' fails it; "
             "'judge' lets its figures decide")


@dataclass(frozen=True, slots=True)
class BusyPolicy:
    """One rule for a measurement taken with neighbours busy, for every door (the
    plugin's checks and A/Bs, compare-builds, bisect, watch, bench): its ``outcome``,
    and how long to wait first for a quiet window and measure once more (``wait_s``;
    0: never; 'judge' never waits, its busy figures count)."""

    outcome: BusyOutcome = "skip"
    wait_s: float = 0.0

    @property
    def waits_s(self) -> float:
        """Seconds to wait for a quiet window before a busy measurement stands."""
        return 0.0 if self.outcome == "judge" else self.wait_s

    @property
    def judges(self) -> bool:
        """Busy figures decide (pass, fail, flag) as quiet ones do, measured to the end."""
        return self.outcome == "judge"

    def fails(self, busy: bool, failed: bool) -> bool:
        """Whether a check that ``failed`` on its figures fails the run: measured quiet,
        as it reads; measured ``busy``, always with 'fail', as it reads with 'judge',
        never with 'skip'."""
        if not busy:
            return failed
        return self.outcome == "fail" or (self.judges and failed)


def busy_policy(outcome: str, wait_s: float = 0.0, *, flag: str = "--busy",
                wait_flag: str = "--busy-wait") -> BusyPolicy:
    """A ``BusyPolicy`` from an option's words, or a ``ConfigError`` naming the value."""
    word = str(outcome).strip().lower()
    if word not in BUSY_OUTCOMES:
        raise ConfigError(f"{flag} {outcome!r} is not 'skip', 'fail' or 'judge' ({BUSY_HELP})")
    if not (math.isfinite(wait_s) and 0 <= wait_s < 1e6):
        raise ConfigError(f"{wait_flag} {wait_s!r}: give seconds, 0 or more (0: a busy "
                          f"measurement is never measured again), e.g. 120")
    return BusyPolicy(word, float(wait_s))
