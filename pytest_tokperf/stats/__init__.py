"""Regression statistics: scipy and numpy only, no storage and no pytest.

``metric`` (what is judged), ``shifts`` (the t statistic behind every verdict: stalls
set aside, pooled spread, drift allowed for), ``verdict`` (the rule that reads a
verdict off the interval), ``comparing`` (``compare``: one series or many), ``family`` (a session
judged together: ``judge_family``), ``changepoints`` (where a history's level stepped)
and ``calibration`` (noise, detectable change, repetitions needed).

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
    "compare_to_history": "pytest_tokperf.stats.changepoints",
    "settled_baseline": "pytest_tokperf.stats.changepoints",
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
    "SetAside": "pytest_tokperf.stats.shifts",
    "Shift": "pytest_tokperf.stats.shifts",
    "log_samples": "pytest_tokperf.stats.shifts",
    "Comparison": "pytest_tokperf.stats.verdict",
    "Outcome": "pytest_tokperf.stats.verdict",
    "judge": "pytest_tokperf.stats.verdict",
}

__all__ = [
    "AGGREGATE", "DECODE", "DEFAULT_ALPHA", "EFFICIENCY", "PREFILL", "TTFT", "ChangePoint", "Comparison",
    "Correction", "FamilyVerdict", "Metric", "NoiseEstimate", "Outcome", "Point", "SetAside",
    "Shift", "benjamini_hochberg", "change_points", "compare", "compare_many",
    "compare_to_history", "detectable_change", "detectable_shift", "format_noise", "judge",
    "judge_family", "log_samples", "measure_shift", "noise", "repetitions_needed",
    "settled_baseline",
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
        compare_to_history,
        settled_baseline,
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
