"""Regression statistics: scipy and numpy only, no storage and no pytest.

``compare`` (the verdict on one series: ``Metric``, ``Comparison``, ``compare``,
``compare_many``), ``shifts`` (the tests and intervals behind it), ``changepoints``
(where a history's level stepped), ``calibration`` (noise, detectable change,
repetitions needed).
"""

from pytest_tokperf.stats.calibration import (
    NoiseEstimate,
    detectable_change,
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
from pytest_tokperf.stats.compare import (
    DECODE,
    DEFAULT_ALPHA,
    EFFICIENCY,
    PREFILL,
    TTFT,
    Comparison,
    Metric,
    Outcome,
    Shift,
    benjamini_hochberg,
    compare,
    compare_many,
    judge,
    log_samples,
    measure_shift,
)

__all__ = [
    "DECODE", "DEFAULT_ALPHA", "EFFICIENCY", "PREFILL", "TTFT", "ChangePoint", "Comparison",
    "Metric", "NoiseEstimate", "Outcome", "Point", "Shift", "benjamini_hochberg",
    "change_points", "compare", "compare_many", "compare_to_history", "detectable_change",
    "format_noise", "judge", "log_samples", "measure_shift", "noise", "repetitions_needed",
    "settled_baseline",
]
