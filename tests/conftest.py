"""Shared fixtures: one real llama-server for the whole session, on loopback.

Engine tests attach to it with ``--tokperf-url`` so the suite runs one server
process; tests of the start path start (and stop) their own. A missing binary is a
failure with the fix in the message, never a silent skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import importlib
import os
import pkgutil

import pytest

import pytest_tokperf

# The suite checks floors on their figures: run beside other jobs (CI's neighbours, a
# build), a floor's test must not become a skip. tests/bench/test_bench_load.py holds the
# busy path (the product's default, 'skip') by naming it.
os.environ.setdefault("PYTEST_TOKPERF_BUSY", "judge")

# pytester runs sessions in this process and, after each, drops the modules that session
# imported; a library imported again then has new exception classes that the kept
# modules do not catch (httpx maps httpcore's errors by class). So everything the plugin
# may import is imported once, up front, and kept.
for _module in ("scipy.stats", "httpx", "httpcore", "sqlite_utils", "numpy", "gguf", "psycopg"):
    importlib.import_module(_module)
for _info in pkgutil.walk_packages(pytest_tokperf.__path__, "pytest_tokperf."):
    if not _info.name.endswith(".plots"):  # matplotlib is optional
        importlib.import_module(_info.name)

from pytest_tokperf.builds.install import installed_llama_server
from pytest_tokperf.launch.process import LaunchSpec, ServerProcess, start_llama_server

ENGINE_FIXTURES = frozenset({"server_binary", "llama_server", "llama_url"})
"""A test that uses one of these needs the built llama-server: it is marked ``engine``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``engine`` from the fixtures a test uses, so ``-m "not engine"`` runs without
    the binary whoever forgot the marker."""
    for item in items:
        if ENGINE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.engine)


# One engine thread leaves the client a core: with every core spinning in the
# engine's barriers, the client reads tokens in bursts and its timing means nothing.
THREADS = 1


@pytest.fixture(scope="session")
def server_binary() -> Path:
    installed = installed_llama_server()
    if installed is None:
        pytest.fail(
            "llama-server is not built: run `tokperf install-engine llama-server` "
            "(.ci/run does this) before the engine tests",
            pytrace=False,
        )
    return installed.binary


@pytest.fixture(scope="session")
def test_model() -> Path:
    from pytest_tokperf.model.writer import TEST_MODEL, cached_model

    return cached_model(TEST_MODEL)


@pytest.fixture(scope="session")
def llama_server(
    server_binary: Path, test_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    spec = LaunchSpec(binary=server_binary, model=test_model, log_path=log, threads=THREADS,
                      context_size=2048)
    with start_llama_server(spec) as server:
        yield server


@pytest.fixture
def llama_url(llama_server: ServerProcess) -> str:
    return llama_server.url


from tests.support.postgres import pg_cluster as pg_cluster, pg_url as pg_url  # noqa: E402
