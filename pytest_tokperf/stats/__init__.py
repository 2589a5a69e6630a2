"""Regression statistics: scipy and numpy only, no storage and no pytest.

The judge: ``compare`` (one series, repetitions nested in sessions) and ``compare_many``,
``judge_history`` (a result against its history), ``judge_family`` (a session judged
together), ``change_points`` and ``noise``; their parts live in the submodules. Names load
their module on first use, so importing ``pytest_tokperf.stats.metric`` costs no scipy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC: dict[str, str] = {
    **dict.fromkeys(("compare", "compare_many"), "pytest_tokperf.stats.comparing"),
    "judge_history": "pytest_tokperf.stats.drift",
    "judge_family": "pytest_tokperf.stats.family",
    "change_points": "pytest_tokperf.stats.changepoints",
    "noise": "pytest_tokperf.stats.calibration",
    **dict.fromkeys(("Comparison", "Outcome"), "pytest_tokperf.stats.verdict"),
    **dict.fromkeys(("Metric", "DECODE", "PREFILL", "TTFT"), "pytest_tokperf.stats.metric"),
}

__all__ = sorted(_PUBLIC)

if TYPE_CHECKING:  # the same names as _PUBLIC (tests/package/test_public_api.py checks)
    from pytest_tokperf.stats.calibration import noise as noise
    from pytest_tokperf.stats.changepoints import change_points as change_points
    from pytest_tokperf.stats.comparing import compare as compare, compare_many as compare_many
    from pytest_tokperf.stats.drift import judge_history as judge_history
    from pytest_tokperf.stats.family import judge_family as judge_family
    from pytest_tokperf.stats.metric import DECODE as DECODE, PREFILL as PREFILL, TTFT as TTFT
    from pytest_tokperf.stats.metric import Metric as Metric
    from pytest_tokperf.stats.verdict import Comparison as Comparison, Outcome as Outcome


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_tokperf.stats' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
