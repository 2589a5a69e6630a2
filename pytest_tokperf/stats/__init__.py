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

__all__ = sorted(_PUBLIC)

if TYPE_CHECKING:  # the same names as _PUBLIC (tests/package/test_public_api.py checks)
    from pytest_tokperf.stats.calibration import (
        NoiseEstimate as NoiseEstimate,
        detectable_change as detectable_change,
        detectable_shift as detectable_shift,
        format_noise as format_noise,
        noise as noise,
        repetitions_needed as repetitions_needed,
    )
    from pytest_tokperf.stats.changepoints import (
        ChangePoint as ChangePoint,
        Point as Point,
        change_points as change_points,
        settled_baseline as settled_baseline,
    )
    from pytest_tokperf.stats.comparing import (
        compare as compare,
        compare_many as compare_many,
        measure_shift as measure_shift,
    )
    from pytest_tokperf.stats.drift import (
        HistoryJudgement as HistoryJudgement,
        Resolution as Resolution,
        compare_to_history as compare_to_history,
        judge_history as judge_history,
        resolution as resolution,
    )
    from pytest_tokperf.stats.family import (
        Correction as Correction,
        FamilyVerdict as FamilyVerdict,
        benjamini_hochberg as benjamini_hochberg,
        judge_family as judge_family,
    )
    from pytest_tokperf.stats.metric import (
        AGGREGATE as AGGREGATE,
        DECODE as DECODE,
        DEFAULT_ALPHA as DEFAULT_ALPHA,
        EFFICIENCY as EFFICIENCY,
        PREFILL as PREFILL,
        TTFT as TTFT,
        Metric as Metric,
        interval_text as interval_text,
    )
    from pytest_tokperf.stats.shifts import (
        SetAside as SetAside,
        Shift as Shift,
        log_samples as log_samples,
    )
    from pytest_tokperf.stats.verdict import (
        Comparison as Comparison,
        Outcome as Outcome,
        judge as judge,
    )


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_tokperf.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
