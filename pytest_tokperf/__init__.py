"""pytest-tokperf: local LLM engines measured against the memory-bandwidth ceiling.

A library first, a pytest plugin on top. What a user may import and rely on is in
``__all__``; every name loads its module on first use, so ``import pytest_tokperf``
costs nothing.

The map
=======
Imports point one way, top to bottom (``tests/package/test_layers.py`` holds the floors;
``docs/layout.md`` explains them).

Glue (thin; nothing else imports it)
  ``plugin``        pytest options/ini, the ``tok_bench`` fixture, header, summary, exit status
  ``hookspecs``     ``pytest_tokperf_*`` hooks (a conftest registers engines)
  ``cli/``          the ``tokperf`` command: ``main`` (parser; make-model, predict), ``bench``
                    (llama-bench's job over HTTP), ``data`` (results verbs), ``builds``
                    (install-engine, compare-builds, bisect)
  ``report/``       ``table`` (terminal), ``data`` (DB -> figures), ``formats`` (markdown,
                    JSON, JUnit), ``plots``, ``html``, ``files`` (a session's report files)

One run (composition root)
  ``bench/``        ``run`` (``BenchRun``: engine session + ceilings + store + gate, for the
                    plugin and ``tokperf bench`` alike), ``session`` (start or attach an
                    engine), ``measure`` (generations -> figures), ``speculative`` (A/B),
                    ``ceilings`` (ceiling per workload), ``recorder`` (results -> store),
                    ``gate`` (a result against its history), ``fixture`` (``TokBench``)
  ``settings``      options -> one frozen ``Settings``
  ``launch/``       local server processes: ``process`` (start, health, stop), ``plans``
                    (how each engine is started)
  ``builds/``       llama.cpp releases: ``releases``, ``sdist``, ``cmake``, ``install``
                    (cached binaries), ``compare`` (compare-builds), ``bisect``

Domain (each usable alone)
  ``storage/``      the results DB: ``store`` over one ``backend`` interface (SQLite via
                    sqlite-utils in ``sqlite_backend``, PostgreSQL via psycopg in
                    ``postgres``; ``location``: a path or a redacted URL), ``schema``
                    (migrations), ``rows`` (series key), ``history`` (the one store ->
                    points function), ``exchange`` (export/import/merge/reference runs)
  ``prediction``    the ceiling for hardware you do not own (``predict``)
  ``engines/``      one adapter per engine behind the ``Engine`` protocol (``base``), the
                    ``registry``, ``wire`` shapes, ``llama_server/`` (adapter, typed speed
                    settings, start-up log)
  ``model/``        GGUF reading, bytes read per token (``footprint``), the model writer
  ``stats/``        scipy only: ``compare`` (verdicts), ``nested`` (repetitions nested in
                    sessions), ``shifts``, ``changepoints``, ``drift`` (the gate's history
                    judgement), ``calibration`` (noise, detectable change), ``family`` (a
                    session), ``paired`` (the same-run A/B)
  ``ceiling``       pure arithmetic: bandwidth / bytes per token, efficiency, checks
  ``environment``   the run's host, OS, Python and CI identity
  ``transport/``    how bytes arrive: ``stream``, ``rawhttp``, ``events``, ``answers``
                    (error bodies), ``credentials`` (API keys, the secret scrubber)
  ``hardware/``     NVML, Apple, Linux CPU detection, the catalog (``hardware.csv``), the
                    bandwidth probe, ``reached`` (the highest bandwidth a host has shown),
                    ``placement``/``bandwidth`` (the engine's device -> its bandwidth),
                    ``bands`` (fixed efficiency bands with sources), ``band_fit`` (the
                    model fitted on db/public, ``band_fit.json``), ``expected`` (the one
                    band predict, import and outliers use)

Ground floor (imports nothing of ours)
  ``results``       frozen dataclasses that cross modules
  ``errors``        the error tree and ``TokperfWarning`` (no pytest import)
  ``paths``         where the tool keeps engines, models and probes (platformdirs)
  ``helper_runs``   short runs of an engine binary (``--help``, ``--version``), bounded

Where a new thing goes
  an engine         ``engines/<name>.py`` (an ``HttpAdapter`` or ``OpenAICompatible``
                    subclass), its name in ``engines/__init__`` and ``registry``; a
                    launch plan in ``launch/plans.py`` if tokperf may start it
  a workload        a field of ``results.Workload`` (and ``fixture.WORKLOAD_DEFAULTS``),
                    its requests in ``bench/measure.py``, its series field in
                    ``storage/rows.Series`` with a schema migration
  a metric          its per-sample figure in ``results.Sample``, its values in
                    ``storage/history.metric_values``, a ``stats.Metric`` (direction)
  a report          ``report/formats.py`` (text) or ``report/plots.py`` (figures), fed by
                    ``report/data.py``; a CLI verb in ``cli/data.py``
  a build feature   ``builds/``; its verb in ``cli/builds.py``
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
    "predict": "pytest_tokperf.prediction",
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

__all__ = sorted(_PUBLIC)

if TYPE_CHECKING:  # the same names as _PUBLIC (tests/package/test_public_api.py checks)
    __version__: str
    from pytest_tokperf.bench.fixture import (
        SpeculativeOutcome as SpeculativeOutcome,
        TokBench as TokBench,
        TokBenchResult as TokBenchResult,
    )
    from pytest_tokperf.bench.run import (
        BenchRun as BenchRun,
        Recorded as Recorded,
    )
    from pytest_tokperf.ceiling import (
        check_efficiency as check_efficiency,
        compute_ceiling as compute_ceiling,
        decode_efficiency as decode_efficiency,
    )
    from pytest_tokperf.engines.base import (
        Engine as Engine,
    )
    from pytest_tokperf.engines.registry import (
        EngineRegistry as EngineRegistry,
        create_engine as create_engine,
    )
    from pytest_tokperf.errors import (
        ConfigError as ConfigError,
        EngineError as EngineError,
        EngineProtocolError as EngineProtocolError,
        EngineUnavailable as EngineUnavailable,
        MeasurementError as MeasurementError,
        ModelFileError as ModelFileError,
        StorageError as StorageError,
        TokperfError as TokperfError,
        TokperfWarning as TokperfWarning,
    )
    from pytest_tokperf.prediction import (
        predict as predict,
    )
    from pytest_tokperf.results import (
        Bandwidth as Bandwidth,
        BenchResult as BenchResult,
        Ceiling as Ceiling,
        EngineInfo as EngineInfo,
        Footprint as Footprint,
        HardwareInfo as HardwareInfo,
        ModelInfo as ModelInfo,
        Sample as Sample,
        Summary as Summary,
        Workload as Workload,
    )
    from pytest_tokperf.settings import (
        Settings as Settings,
        resolve as resolve,
    )
    from pytest_tokperf.stats.changepoints import (
        change_points as change_points,
    )
    from pytest_tokperf.stats.comparing import (
        compare as compare,
    )
    from pytest_tokperf.stats.metric import (
        DECODE as DECODE,
        PREFILL as PREFILL,
        TTFT as TTFT,
        Metric as Metric,
    )
    from pytest_tokperf.stats.verdict import (
        Comparison as Comparison,
    )
    from pytest_tokperf.storage.history import (
        series_history as series_history,
    )
    from pytest_tokperf.storage.store import (
        ResultStore as ResultStore,
    )


def _installed_version() -> str:
    """The version pip installed (the package metadata), ``0+unknown`` when run from a
    source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-tokperf")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = globals()["__version__"] = _installed_version()
        return value
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_tokperf' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
