"""Hooks pytest-tokperf calls; implement them in a ``conftest.py`` or a plugin.

The plugin adds these with ``pluginmanager.add_hookspecs`` in ``pytest_addhooks``.
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

    ``register(name, factory)``: ``factory(config)`` gets an
    ``pytest_tokperf.engines.registry.EngineConfig`` (``base_url``, ``timeout_s``,
    ``model``, ``settings``, ``transport``) and returns an object with the ``Engine``
    methods (``name``, ``base_url``, ``ready()``, ``info()``, ``generate(request)``,
    ``close()``). An OpenAI-compatible server needs only a subclass::

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
            ))

    then ``pytest --tokperf-engine my-server --tokperf-url http://127.0.0.1:9000``.
    """
