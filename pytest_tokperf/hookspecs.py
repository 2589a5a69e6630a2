"""Hooks pytest-tokperf calls; implement them in a ``conftest.py`` or a plugin.

Each docstring is an example to paste.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_tokperf.engines.registry import EngineFactory


@pytest.hookspec
def pytest_tokperf_add_engines(register: Callable[[str, EngineFactory], None]) -> None:
    """Register more engines for ``--tokperf-engine NAME``; called once, at configure time.

    ``register(name, factory)``: ``factory(config)`` gets an ``EngineConfig`` and returns
    an ``Engine``. An OpenAI-compatible server needs only a subclass::

        # conftest.py
        from pytest_tokperf.engines.openai_compat import OpenAICompatible

        class MyServer(OpenAICompatible):
            name = "my-server"
            display = "my inference server"
            send_ignore_eos = True  # it accepts llama.cpp's ignore_eos

        def pytest_tokperf_add_engines(register):
            register("my-server", lambda config: MyServer(
                config.base_url, timeout_s=config.timeout_s, model=config.model,
                settings=config.settings, transport=config.transport,
                idle_timeout_s=config.idle_timeout_s, api_key=config.api_key,
            ))
    """
