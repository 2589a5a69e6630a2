"""Regression statistics: scipy and numpy only, no storage and no pytest.

``metric`` (what is judged), ``shifts`` (a shift's value type; stalls set aside inside
their session), ``nested`` (the t statistic behind every verdict: repetitions nested in
sessions, the between-session spread counted when sessions differ, exact ties),
``verdict`` (the rule that reads a verdict off the interval), ``comparing`` (``compare``:
one series or many), ``family`` (a session judged together: ``judge_family``),
``changepoints`` (where a history's level stepped), ``drift`` (the gate: a result against
the settled and the accepted level; what a history can resolve) and ``calibration``
(noise, detectable change, repetitions needed).

Names load their module on first use, so importing ``pytest_tokperf.stats.metric`` (a
light module) from anywhere costs no scipy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC: dict[str, str] = {
    "NoiseEstimate": "pytest_tokperf.stats.calibration",
    "detectable_change": "pytest_tokperf.stats.calibration",
    "detectable_shift": "pytest_tokperf.stats.calibration",
    "format_noise": "pytest_tokperf.stats.calibration",
    "noise": "pytest_tokperf.stats.calibration",
    "repetitions_needed": "pytest_tokperf.stats.calibration",
    "ChangePoint": "pytest_tokperf.stats.changepoints",
    "Point": "pytest_tokperf.stats.changepoints",
    "change_points": "pytest_tokperf.stats.changepoints",
    "settled_baseline": "pytest_tokperf.stats.changepoints",
    "HistoryJudgement": "pytest_tokperf.stats.drift",
    "Resolution": "pytest_tokperf.stats.drift",
    "compare_to_history": "pytest_tokperf.stats.drift",
    "judge_history": "pytest_tokperf.stats.drift",
    "resolution": "pytest_tokperf.stats.drift",
    "compare": "pytest_tokperf.stats.comparing",
    "compare_many": "pytest_tokperf.stats.comparing",
    "measure_shift": "pytest_tokperf.stats.comparing",
    "Correction": "pytest_tokperf.stats.family",
    "FamilyVerdict": "pytest_tokperf.stats.family",
    "benjamini_hochberg": "pytest_tokperf.stats.family",
    "judge_family": "pytest_tokperf.stats.family",
    "AGGREGATE": "pytest_tokperf.stats.metric",
    "DECODE": "pytest_tokperf.stats.metric",
    "DEFAULT_ALPHA": "pytest_tokperf.stats.metric",
    "EFFICIENCY": "pytest_tokperf.stats.metric",
    "PREFILL": "pytest_tokperf.stats.metric",
    "TTFT": "pytest_tokperf.stats.metric",
    "Metric": "pytest_tokperf.stats.metric",
    "interval_text": "pytest_tokperf.stats.metric",
    "SetAside": "pytest_tokperf.stats.shifts",
    "Shift": "pytest_tokperf.stats.shifts",
    "log_samples": "pytest_tokperf.stats.shifts",
    "Comparison": "pytest_tokperf.stats.verdict",
    "Outcome": "pytest_tokperf.stats.verdict",
    "judge": "pytest_tokperf.stats.verdict",
}

__all__ = [
    "AGGREGATE", "DECODE", "DEFAULT_ALPHA", "EFFICIENCY", "PREFILL", "TTFT", "ChangePoint", "Comparison",
    "Correction", "FamilyVerdict", "HistoryJudgement", "Metric", "NoiseEstimate", "Outcome",
    "Point", "Resolution", "SetAside", "Shift", "benjamini_hochberg", "change_points",
    "compare", "compare_many", "compare_to_history", "detectable_change", "detectable_shift",
    "format_noise", "interval_text", "judge", "judge_family", "judge_history", "log_samples",
    "measure_shift", "noise", "repetitions_needed", "resolution", "settled_baseline",
]

if TYPE_CHECKING:
    from pytest_tokperf.stats.calibration import (
        NoiseEstimate,
        detectable_change,
        detectable_shift,
        format_noise,
        noise,
        repetitions_needed,
    )
    from pytest_tokperf.stats.changepoints import (
        ChangePoint,
        Point,
        change_points,
        settled_baseline,
    )
    from pytest_tokperf.stats.drift import (
        HistoryJudgement,
        Resolution,
        compare_to_history,
        judge_history,
        resolution,
    )
    from pytest_tokperf.stats.comparing import compare, compare_many, measure_shift
    from pytest_tokperf.stats.family import (
        Correction,
        FamilyVerdict,
        benjamini_hochberg,
        judge_family,
    )
    from pytest_tokperf.stats.metric import (
        AGGREGATE,
        DECODE,
        DEFAULT_ALPHA,
        EFFICIENCY,
        PREFILL,
        TTFT,
        Metric,
        interval_text,
    )
    from pytest_tokperf.stats.shifts import SetAside, Shift, log_samples
    from pytest_tokperf.stats.verdict import Comparison, Outcome, judge


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_tokperf.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
