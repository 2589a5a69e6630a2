"""What is judged: a metric's direction and the smallest change worth flagging."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_tokperf.errors import ConfigError

DEFAULT_ALPHA = 0.005
"""One comparison, or a whole session through ``judge_family``: at most 0.5% false flags."""

START_SD = 0.01
"""A server start's own level (log SD) allowed for when pooling starts (docs/ci-and-builds.md)."""
WINDOW_SD = 0.025
"""The level a machine window is allowed where the host has not measured its own (log
SD): the watch's pairs measured again in later windows read 2-2.5% apart."""
CONFIRM_GAP_S = 600.0
"""Seconds after a flag's first A/B its confirmation may run without other work between:
the machine's windows last minutes (lab/2026-12-05-release-watch.md)."""


@dataclass(frozen=True, slots=True)
class Metric:
    """A measured figure: its direction and the smallest change worth flagging."""

    name: str
    higher_is_better: bool
    min_effect: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.min_effect < 1:
            raise ConfigError(
                f"min_effect for {self.name!r} is {self.min_effect!r}: give a fraction "
                "between 0 and 1, e.g. 0.05 for 5%"
            )

    @property
    def slow(self) -> int:
        """The sign of a stall in log units: -1 for a rate, +1 for seconds."""
        return -1 if self.higher_is_better else 1


DECODE = Metric("decode", higher_is_better=True)
PREFILL = Metric("prefill", higher_is_better=True)
TTFT = Metric("ttft", higher_is_better=False)
AGGREGATE = Metric("aggregate", higher_is_better=True)
"""All concurrent streams' output tokens per second of a round's wall time."""


def check_level(x: float, name: str) -> None:
    """``ConfigError`` unless ``0 < x < 1`` (NaN included)."""
    if not 0 < x < 1:
        raise ConfigError(f"{name} is {x!r}: give a probability between 0 and 1, e.g. 0.005")


def pct(x: float | None, digits: int = 1) -> str:
    """A change as text: ``-0.021`` -> ``−2.1%`` (a true minus sign); ``-`` when unknown."""
    if x is None or math.isnan(x):
        return "-"
    if math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return f"{x * 100:+.{digits}f}%".replace("-", "−")


RESOLVED_LOG = math.log(11.0)
"""Sane bound of a printed uncertainty (ln 11); wider prints as "not resolved"."""


def resolved(change: float | None) -> bool:
    """Whether a smallest resolvable change is printable (finite, up to +1000%)."""
    return (change is not None and math.isfinite(change) and change > -1
            and abs(math.log1p(change)) <= RESOLVED_LOG)


def interval_text(low: float, high: float, digits: int = 1) -> str:
    """``[−2.1%, +3.0%]``; ``not resolved`` when its half-width in log units is beyond
    ``RESOLVED_LOG`` (or an end is infinite or −100%); ``-`` when unknown (NaN)."""
    if math.isnan(low) or math.isnan(high):
        return "-"
    if not (low > -1 and math.isfinite(high)
            and math.log1p(high) - math.log1p(low) <= 2 * RESOLVED_LOG):
        return "not resolved"
    return f"[{pct(low, digits)}, {pct(high, digits)}]"


def fmt_p(p: float | None, alpha: float | None = None) -> str:
    """p to two figures, more when rounding would move it across ``alpha``; ``-`` unknown."""
    if p is None or math.isnan(p):
        return "-"
    if p == 0:
        return "0"
    if p < 1e-3:
        return f"{p:.1e}"
    text = ""
    for digits in (2, 3, 4):
        text = f"{p:.{digits}g}"
        if alpha is None or (float(text) < alpha) == (p < alpha):
            break
    return text
