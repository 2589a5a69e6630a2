"""pytest-tokperf: local LLM engines measured against the memory-bandwidth ceiling.

A library first, a pytest plugin on top. What a user may import and rely on is in
``__all__``; every name loads its module on first use, so ``import pytest_tokperf``
costs nothing.

The map
=======
Imports point one way: glue -> domain -> value types.

Glue (thin; nothing else imports it)
  ``plugin``        pytest options/ini, the ``tok_bench`` fixture, header, summary, exit status
  ``hookspecs``     ``pytest_tokperf_*`` hooks (a conftest registers engines)
  ``cli/``          the ``tokperf`` command: ``main`` (install-engine, make-model, predict),
                    ``bench`` (llama-bench over HTTP), ``data`` (history, compare, changes,
                    accept, export/import/merge, plot, report), ``output`` (text or JSON)

The run (composition root)
  ``bench/run``     ``BenchRun``: engine session + ceilings + store + gate, for the plugin and
                    ``tokperf bench`` alike; ``Recorded``: what one result became
  ``bench/``        ``session`` (start or attach an engine), ``measure`` (generations ->
                    figures), ``speculative`` (A/B), ``ceilings`` (ceiling per workload),
                    ``recorder`` (results -> store), ``gate`` (a result against its history),
                    ``fixture`` (``TokBench``, what a test calls)

Domain (each usable alone)
  ``engines/``      one adapter per engine behind the ``Engine`` protocol, the registry,
                    launchers, the llama-server installer, the streaming wire code,
                    ``server_settings``/``server_log`` (typed speed settings, placement)
  ``model/``        GGUF reading, bytes read per token (``footprint``), the model writer
  ``hardware/``     NVML, Apple, Linux CPU detection, the catalog (``hardware.csv``), the
                    bandwidth probe (one buffer per session), ``reached`` (the highest
                    bandwidth a host has shown: what CPU decode is judged against),
                    ``placement``/``bandwidth`` (the engine's device -> its bandwidth,
                    splits), ``bands`` (expected efficiency with sources)
  ``ceiling``       pure arithmetic: bandwidth / bytes per token, efficiency, checks
  ``predict``       the ceiling for hardware you do not own
  ``storage/``      SQLite via sqlite-utils: ``store``, ``schema`` (migrations), ``rows``
                    (series key), ``history`` (the one store -> points function),
                    ``exchange`` (export/import/merge/reference runs)
  ``stats/``        scipy only: ``compare`` (verdicts), ``nested`` (repetitions nested
                    in sessions), ``changepoints``, ``drift`` (the gate's history
                    judgement), ``calibration`` (noise, detectable change)
  ``report/``       ``table`` (terminal), ``data`` (DB -> figures), ``formats`` (markdown,
                    JSON, JUnit), ``plots``, ``html``, ``files`` (a session's report files)

Value types (no behaviour beyond derived properties)
  ``results``       frozen dataclasses that cross modules; ``errors``; ``settings``

Where a new thing goes
  an engine         ``engines/<name>.py`` (an ``HttpAdapter`` or ``OpenAICompatible``
                    subclass), its name in ``engines/__init__`` and ``registry``; a
                    launcher plan in ``engines/launchers.py`` if tokperf may start it
  a workload        a field of ``results.Workload`` (and ``fixture.WORKLOAD_DEFAULTS``),
                    its requests in ``bench/measure.py``, its series field in
                    ``storage/rows.Series`` with a schema migration
  a metric          its per-sample figure in ``results.Sample``, its values in
                    ``storage/history.metric_values``, a ``stats.Metric`` (direction)
  a report          ``report/formats.py`` (text) or ``report/plots.py`` (figures), fed by
                    ``report/data.py``; a CLI verb in ``cli/data.py``
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC: dict[str, str] = {
    # the run and the fixture value
    "BenchRun": "pytest_tokperf.bench.run",
    "Recorded": "pytest_tokperf.bench.run",
    "TokBench": "pytest_tokperf.bench.fixture",
    "TokBenchResult": "pytest_tokperf.bench.fixture",
    "SpeculativeOutcome": "pytest_tokperf.bench.fixture",
    "Settings": "pytest_tokperf.settings",
    "resolve": "pytest_tokperf.settings",
    # value types
    "BenchResult": "pytest_tokperf.results",
    "Sample": "pytest_tokperf.results",
    "Summary": "pytest_tokperf.results",
    "Workload": "pytest_tokperf.results",
    "EngineInfo": "pytest_tokperf.results",
    "ModelInfo": "pytest_tokperf.results",
    "HardwareInfo": "pytest_tokperf.results",
    "Bandwidth": "pytest_tokperf.results",
    "Footprint": "pytest_tokperf.results",
    "Ceiling": "pytest_tokperf.results",
    # errors
    "TokperfError": "pytest_tokperf.errors",
    "ConfigError": "pytest_tokperf.errors",
    "EngineError": "pytest_tokperf.errors",
    "EngineUnavailable": "pytest_tokperf.errors",
    "EngineProtocolError": "pytest_tokperf.errors",
    "MeasurementError": "pytest_tokperf.errors",
    "ModelFileError": "pytest_tokperf.errors",
    "StorageError": "pytest_tokperf.errors",
    "TokperfWarning": "pytest_tokperf.errors",
    # domain entry points
    "Engine": "pytest_tokperf.engines.base",
    "EngineRegistry": "pytest_tokperf.engines.registry",
    "create_engine": "pytest_tokperf.engines.registry",
    "compute_ceiling": "pytest_tokperf.ceiling",
    "check_efficiency": "pytest_tokperf.ceiling",
    "decode_efficiency": "pytest_tokperf.ceiling",
    "predict": "pytest_tokperf.predict",
    "ResultStore": "pytest_tokperf.storage.store",
    "series_history": "pytest_tokperf.storage.history",
    "Metric": "pytest_tokperf.stats.metric",
    "Comparison": "pytest_tokperf.stats.verdict",
    "DECODE": "pytest_tokperf.stats.metric",
    "PREFILL": "pytest_tokperf.stats.metric",
    "TTFT": "pytest_tokperf.stats.metric",
    "compare": "pytest_tokperf.stats.comparing",
    "change_points": "pytest_tokperf.stats.changepoints",
}

__all__ = [
    "Bandwidth", "BenchResult", "BenchRun", "Ceiling", "Comparison", "ConfigError",
    "DECODE", "Engine", "EngineError", "EngineInfo", "EngineProtocolError",
    "EngineRegistry", "EngineUnavailable", "Footprint", "HardwareInfo", "MeasurementError",
    "Metric", "ModelFileError", "ModelInfo", "PREFILL", "Recorded", "ResultStore",
    "Sample", "Settings", "SpeculativeOutcome", "StorageError", "Summary", "TTFT",
    "TokBench", "TokBenchResult", "TokperfError", "TokperfWarning", "Workload",
    "change_points", "check_efficiency", "compare", "compute_ceiling", "create_engine",
    "decode_efficiency", "predict", "resolve", "series_history",
]

if TYPE_CHECKING:
    from pytest_tokperf.bench.fixture import SpeculativeOutcome, TokBench, TokBenchResult
    from pytest_tokperf.bench.run import BenchRun, Recorded
    from pytest_tokperf.ceiling import check_efficiency, compute_ceiling, decode_efficiency
    from pytest_tokperf.engines.base import Engine
    from pytest_tokperf.engines.registry import EngineRegistry, create_engine
    from pytest_tokperf.errors import (
        ConfigError,
        EngineError,
        EngineProtocolError,
        EngineUnavailable,
        MeasurementError,
        ModelFileError,
        StorageError,
        TokperfError,
        TokperfWarning,
    )
    from pytest_tokperf.predict import predict
    from pytest_tokperf.results import (
        Bandwidth,
        BenchResult,
        Ceiling,
        EngineInfo,
        Footprint,
        HardwareInfo,
        ModelInfo,
        Sample,
        Summary,
        Workload,
    )
    from pytest_tokperf.settings import Settings, resolve
    from pytest_tokperf.stats.changepoints import change_points
    from pytest_tokperf.stats.comparing import compare
    from pytest_tokperf.stats.metric import DECODE, PREFILL, TTFT, Metric
    from pytest_tokperf.stats.verdict import Comparison
    from pytest_tokperf.storage.history import series_history
    from pytest_tokperf.storage.store import ResultStore


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_tokperf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
