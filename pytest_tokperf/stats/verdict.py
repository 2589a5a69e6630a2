"""The decision rule: a verdict read off the interval of the change.

Regression/improvement: the interval excludes 0 and the change reaches the minimum effect
``m``; unchanged: the interval inside ``(-m, +m)``; inconclusive otherwise (docs/design.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.calibration import detectable_shift, repetitions_needed
from pytest_tokperf.stats.metric import (
    DEFAULT_ALPHA, Metric, check_level, fmt_p, interval_text, pct, resolved,
)
from pytest_tokperf.stats.shifts import Shift

Outcome = Literal["regression", "improvement", "unchanged", "inconclusive"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """The verdict on one series: ``relative_change`` and its interval at ``confidence``
    (NaN with too few samples), the ``shift`` behind it."""

    metric: str
    verdict: Outcome
    relative_change: float
    ci_low: float
    ci_high: float
    confidence: float
    p_value: float
    n_baseline: int
    n_current: int
    reason: str
    shift: Shift | None = None
    min_effect: float = math.nan
    higher_is_better: bool = True
    correction: str = ""

    @property
    def regressed(self) -> bool:
        return self.verdict == "regression"

    @property
    def flagged(self) -> bool:
        """A regression or an improvement: a claim that the level moved by ``m`` or more."""
        return self.verdict in ("regression", "improvement")

    def brief(self) -> str:
        """``-12.0% [-14.1%, -9.8%]``: the change and its interval."""
        return f"{pct(self.relative_change)} {interval_text(self.ci_low, self.ci_high)}"

    def as_metric(self) -> Metric:
        """The metric this comparison was judged as (direction and minimum effect)."""
        return Metric(self.metric, self.higher_is_better, self.min_effect)


EXACT_TOLERANCE = 1e-9
"""Relative slack within which an exact change counts as reaching the minimum effect."""


def judge(shift: Shift, metric: Metric, *, alpha: float = DEFAULT_ALPHA, note: str = ""
          ) -> Comparison:
    """Apply the module's decision rule to ``shift`` at level ``alpha``."""
    check_level(alpha, "alpha")
    m, d, p = metric.min_effect, shift.log_shift, shift.p_value
    rel = _ratio(d)
    lo, hi = (_ratio(x) for x in shift.interval(alpha))
    figures = f"{metric.name} {pct(rel)} {interval_text(lo, hi)}"
    level = alpha / shift.tests
    corrected = "" if shift.tests == 1 else f", Bonferroni over {shift.tests} comparisons"
    verdict: Outcome
    if shift.method == "exact":
        verdict, why = _exact(rel, metric)
    elif shift.method == "no spread":
        verdict = "inconclusive"
        figures = f"{metric.name} {pct(rel)}"
        why = (f"{figures}: the repetitions of the baseline or of the current run are all "
               "identical, so there is no noise to judge by; a measured rate always varies: "
               "check that the figure is measured, not copied or rounded")
    elif lo > 0 or hi < 0:
        if abs(rel) >= m * (1 - EXACT_TOLERANCE):
            worse = (d < 0) == metric.higher_is_better
            verdict = "regression" if worse else "improvement"
            why = (f"{figures}: the interval excludes no change (p={fmt_p(p, alpha)} < "
                   f"{fmt_p(alpha)}{corrected}) and the change reaches the {m:.0%} minimum")
        elif -m < lo and hi < m:
            verdict = "unchanged"
            why = (f"{figures}: a real change (p={fmt_p(p, alpha)}), below the {m:.0%} "
                   "minimum")
        else:
            verdict = "inconclusive"
            why = (f"{figures}: a real change (p={fmt_p(p, alpha)}), below the {m:.0%} "
                   f"minimum as measured, but the interval reaches {m:.0%}: more samples "
                   "would settle whether it is that large")
    elif -m < lo and hi < m:
        verdict = "unchanged"
        why = f"{figures}: the interval lies within ±{m:.0%}, p={fmt_p(p, alpha)}"
    else:
        verdict = "inconclusive"
        why = f"{figures}: {_unsettled(shift, metric, level)}"
    if shift.method == "sessions" and verdict != "inconclusive":
        why += (f"; sessions, not repetitions, are the unit here: {_sessions(shift)} "
                f"(sessions spread {_cv(shift.between_cv)}, repetitions "
                f"{_cv(shift.noise_cv)})")
    return Comparison(
        metric=metric.name, verdict=verdict, relative_change=rel, ci_low=lo, ci_high=hi,
        confidence=1 - level, p_value=p, n_baseline=shift.n_baseline,
        n_current=shift.n_current, reason=why + _stalls(shift) + note, shift=shift,
        min_effect=m, higher_is_better=metric.higher_is_better,
    )


def _exact(rel: float, metric: Metric) -> tuple[Outcome, str]:
    """The exact rule: a tie decided by the difference itself against the minimum."""
    m = metric.min_effect
    head = (f"{metric.name} {pct(rel)} exactly: every repetition of each side is identical "
            "(a copied or rounded figure?), so there is no noise to judge by and the exact "
            f"change is judged against the {m:.0%} minimum")
    if abs(rel) >= m * (1 - EXACT_TOLERANCE):
        worse = (rel < 0) == metric.higher_is_better
        return ("regression" if worse else "improvement"), head + f": it reaches {m:.0%}"
    return "unchanged", head + (": none" if rel == 0 else f": below {m:.0%}")


def phase_figures(shift: Shift) -> str:
    """``sessions spread 12.1% while a session's 5 repetitions pin its level to ±0.6%``."""
    sessions = shift.versions + shift.sessions_current
    reps = (shift.n_baseline + shift.n_current) / sessions
    pinned = shift.noise_cv / math.sqrt(reps)
    return (f"sessions spread {_cv(shift.between_cv)} while a session's {reps:.2g} "
            f"repetitions pin its level to ±{_cv(pinned)}")


def _cv(x: float) -> str:
    return "-" if math.isnan(x) else f"{math.expm1(x):.1%}"


def _sessions(shift: Shift) -> str:
    return (f"{shift.versions} vs {shift.sessions_current} session"
            f"{'s' * (shift.sessions_current != 1)}")


def _unsettled(shift: Shift, metric: Metric, level: float) -> str:
    m = metric.min_effect
    seen = detectable_shift(shift, level * shift.tests)
    resolves = f"about {seen:.1%}" if resolved(seen) else "no change within ±1000%: not resolved"
    if shift.phase_dominated:
        steps = f"under {seen:.0%}" if resolved(seen) else "of any size up to 1000%"
        return (f"phase-dominated history: steps {steps} cannot be seen; use the "
                f"same-run A/B ({phase_figures(shift)}; {_sessions(shift)}, "
                f"p={fmt_p(shift.p_value)}: more repetitions per session would not help)")
    head = (f"cannot tell a {m:.0%} change from none at {shift.n_baseline} vs "
            f"{shift.n_current} samples (p={fmt_p(shift.p_value)}); this comparison "
            f"resolves {resolves}")
    if shift.method == "sessions":
        return head + (f", as the sessions differ more than their repetitions explain "
                       f"({_sessions(shift)}, p={fmt_p(shift.drift_p)}): more sessions, not "
                       "more repetitions, would settle it")
    try:
        reps = repetitions_needed(shift.noise_cv, m, level, versions=shift.versions)
    except ConfigError:
        return head + f"; at CV {shift.noise_cv:.1%} no practical repetition count would"
    return head + (f" at CV {shift.noise_cv:.1%}; {reps} repetitions per session would "
                   "settle it")


def _where(shift: Shift, index: int) -> str:
    if index >= shift.versions:
        j = index - shift.versions
        return "current" if shift.sessions_current == 1 else f"current session {j}"
    return "baseline" if shift.versions == 1 else f"baseline session {index}"


def _stalls(shift: Shift) -> str:
    text = ""
    if shift.set_aside:
        listed = ", ".join(f"{s.value:.5g} ({_where(shift, s.version)}, {pct(s.deviation)} off "
                           "its session's median)" for s in shift.set_aside)
        text = f"; set aside as stalled repetitions: {listed}"
    if shift.disturbed:
        listed = ", ".join(_where(shift, i) for i in shift.disturbed)
        text += (f"; judged by its own spread, as its repetitions disagree far more than the "
                 f"other sessions': {listed}")
    return text


def _ratio(log_shift: float) -> float:
    if math.isnan(log_shift):
        return math.nan
    return math.expm1(log_shift) if log_shift < 700 else math.inf
