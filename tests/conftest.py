"""Shared fixtures: one real llama-server for the whole session, on loopback.

Engine tests attach to it with ``--tokperf-url`` so the suite runs one server
process; tests of the start path start (and stop) their own. A missing binary is a
failure with the fix in the message, never a silent skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import scipy.stats  # noqa: F401  (imported up front: pytester sessions share sys.modules)

from pytest_tokperf.engines.install import installed_llama_server
from pytest_tokperf.engines.launcher import LaunchSpec, ServerProcess, start_llama_server

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
