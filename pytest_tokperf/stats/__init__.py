"""Regression statistics: scipy and numpy only, no storage and no pytest.

``metric`` (what is judged), ``shifts`` (the t statistic behind every verdict: stalls
set aside, pooled spread, drift allowed for), ``verdict`` (the rule that reads a
verdict off the interval), ``compare`` (one series or many), ``family`` (a session
judged together: ``judge_family``), ``changepoints`` (where a history's level stepped)
and ``calibration`` (noise, detectable change, repetitions needed).
"""

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
from pytest_tokperf.stats.compare import compare, compare_many, measure_shift
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

__all__ = [
    "AGGREGATE", "DECODE", "DEFAULT_ALPHA", "EFFICIENCY", "PREFILL", "TTFT", "ChangePoint", "Comparison",
    "Correction", "FamilyVerdict", "Metric", "NoiseEstimate", "Outcome", "Point", "SetAside",
    "Shift", "benjamini_hochberg", "change_points", "compare", "compare_many",
    "compare_to_history", "detectable_change", "detectable_shift", "format_noise", "judge",
    "judge_family", "log_samples", "measure_shift", "noise", "repetitions_needed",
    "settled_baseline",
]
