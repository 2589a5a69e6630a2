"""pytest-tokperf: local LLM engines measured against the memory-bandwidth ceiling.

A library first, a pytest plugin on top. What a user may import and rely on is in
``__all__``; every name loads its module on first use, so ``import pytest_tokperf``
costs nothing. The map of the package is in docs/design.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_PUBLIC: dict[str, str] = {
    # the run and the fixture value
    "BenchRun": "pytest_tokperf.bench.run",
    "TokBench": "pytest_tokperf.bench.fixture",
    "TokBenchResult": "pytest_tokperf.bench.fixture",
    "Settings": "pytest_tokperf.settings",
    # value types
    "BenchResult": "pytest_tokperf.results",
    "Workload": "pytest_tokperf.results",
    "EngineInfo": "pytest_tokperf.results",
    "Ceiling": "pytest_tokperf.results",
    # errors
    "TokperfError": "pytest_tokperf.errors",
    "ConfigError": "pytest_tokperf.errors",
    "EngineError": "pytest_tokperf.errors",
    "ModelFileError": "pytest_tokperf.errors",
    "StorageError": "pytest_tokperf.errors",
    "TokperfWarning": "pytest_tokperf.errors",
    # domain entry points
    "Engine": "pytest_tokperf.engines.base",
    "EngineRegistry": "pytest_tokperf.engines.registry",
    "create_engine": "pytest_tokperf.engines.registry",
    "compute_ceiling": "pytest_tokperf.ceiling",
    "predict": "pytest_tokperf.expected.prediction",
    "ResultStore": "pytest_tokperf.storage.store",
}

__all__ = sorted(_PUBLIC)

if TYPE_CHECKING:  # the same names as _PUBLIC (tests/package/test_public_api.py checks)
    __version__: str
    from pytest_tokperf.bench.fixture import TokBench as TokBench
    from pytest_tokperf.bench.fixture import TokBenchResult as TokBenchResult
    from pytest_tokperf.bench.run import BenchRun as BenchRun
    from pytest_tokperf.ceiling import compute_ceiling as compute_ceiling
    from pytest_tokperf.engines.base import Engine as Engine
    from pytest_tokperf.engines.registry import EngineRegistry as EngineRegistry
    from pytest_tokperf.engines.registry import create_engine as create_engine
    from pytest_tokperf.errors import (
        ConfigError as ConfigError,
        EngineError as EngineError,
        ModelFileError as ModelFileError,
        StorageError as StorageError,
        TokperfError as TokperfError,
        TokperfWarning as TokperfWarning,
    )
    from pytest_tokperf.expected.prediction import predict as predict
    from pytest_tokperf.results import (
        BenchResult as BenchResult,
        Ceiling as Ceiling,
        EngineInfo as EngineInfo,
        Workload as Workload,
    )
    from pytest_tokperf.settings import Settings as Settings
    from pytest_tokperf.storage.store import ResultStore as ResultStore

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
