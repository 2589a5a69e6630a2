"""Engine name -> adapter factory, for ``--tokperf-engine NAME`` and for scripts; a
conftest adds names through ``pytest_tokperf_add_engines``, nothing is global."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx

from pytest_tokperf.engines import DEFAULT_IDLE_TIMEOUT_S
from pytest_tokperf.engines.base import Engine
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.transport import MAX_BODY_BYTES
from pytest_tokperf.transport.credentials import ApiKey


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything an adapter gets: where, how long to wait, which model, settings."""

    base_url: str
    timeout_s: float = 600.0
    settings: tuple[tuple[str, str], ...] = ()
    """Settings pairs recorded in ``EngineInfo.settings`` (a started server's flags)."""
    model: str | None = None
    """The model to ask for, where the engine serves several (Ollama, vLLM, LM Studio)."""
    transport: httpx.BaseTransport | None = None
    """For tests: an ``httpx.MockTransport`` instead of the network."""
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    """Longest gap between streamed events once they flow (``tokperf_idle_timeout``)."""
    api_key: ApiKey | None = None
    """Sent as ``Authorization: Bearer``; its ``repr`` is masked."""
    max_body_bytes: int = MAX_BODY_BYTES
    """The byte cap of one non-streamed answer (``tokperf_max_body``)."""


EngineFactory = Callable[[EngineConfig], Engine]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _lazy(module: str, class_name: str, *, takes_model: bool = True) -> EngineFactory:
    """A factory that imports its adapter on first use (keeps plugin start-up light)."""

    def factory(config: EngineConfig) -> Engine:
        adapter = getattr(importlib.import_module(f"pytest_tokperf.engines.{module}"), class_name)
        extra = {"model": config.model} if takes_model else {}
        engine: Engine = adapter(config.base_url, timeout_s=config.timeout_s,
                                 idle_timeout_s=config.idle_timeout_s, api_key=config.api_key,
                                 settings=config.settings, transport=config.transport,
                                 max_body_bytes=config.max_body_bytes, **extra)
        return engine

    return factory


BUILTIN_ENGINES: Mapping[str, EngineFactory] = MappingProxyType({
    "llama-server": _lazy("llama_server.adapter", "LlamaServer", takes_model=False),
    "ollama": _lazy("ollama", "Ollama"),
    "vllm": _lazy("vllm", "VLLM"),
    "lmstudio": _lazy("lmstudio", "LMStudio"),
    "mlx": _lazy("mlx", "MLX"),
    "sglang": _lazy("sglang", "SGLang"),
    "openai": _lazy("openai_compat", "OpenAICompatible"),
})
"""The adapters this package ships; ``openai`` is any OpenAI-compatible server."""


class EngineRegistry:
    """Names -> factories: the built-ins plus whatever was registered."""

    def __init__(self, factories: Mapping[str, EngineFactory] = BUILTIN_ENGINES) -> None:
        self._factories: dict[str, EngineFactory] = dict(factories)

    def register(self, name: str, factory: EngineFactory) -> None:
        """Add ``name``; a built-in or already registered name cannot be taken over."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(
                f"engine name {name!r} is not usable as --tokperf-engine: use letters, digits, "
                f"'-', '_' or '.'"
            )
        if not callable(factory):
            raise ConfigError(f"engine {name!r}: the factory {factory!r} is not callable")
        if name in self._factories and self._factories[name] is not factory:
            raise ConfigError(
                f"engine {name!r} is already registered ({self._factories[name]!r}); pick "
                f"another name"
            )
        self._factories[name] = factory

    def names(self) -> tuple[str, ...]:
        return tuple(self._factories)

    def create(self, name: str, base_url: str, **options: Any) -> Engine:
        """``create_engine(name, base_url, registry=self, **options)``."""
        return create_engine(name, base_url, registry=self, **options)


def create_engine(
    name: str, base_url: str, *, timeout_s: float = 600.0,
    settings: tuple[tuple[str, str], ...] = (), model: str | None = None,
    transport: httpx.BaseTransport | None = None, registry: EngineRegistry | None = None,
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, api_key: ApiKey | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Engine:
    """An adapter for engine ``name`` at ``base_url``; ``ConfigError`` if unknown."""
    factories = (registry if registry is not None else EngineRegistry())._factories
    factory = factories.get(name)
    if factory is None:
        raise ConfigError(
            f"--tokperf-engine {name!r} is not an engine this plugin knows; choose one of: "
            f"{', '.join(factories)} (a conftest can add more with the "
            f"pytest_tokperf_add_engines hook)"
        )
    config = EngineConfig(base_url=base_url.rstrip("/"), timeout_s=timeout_s,
                          settings=settings, model=model, transport=transport,
                          idle_timeout_s=idle_timeout_s, api_key=api_key,
                          max_body_bytes=max_body_bytes)
    engine = factory(config)
    if not isinstance(engine, Engine):
        raise ConfigError(
            f"the factory registered for engine {name!r} returned {engine!r}, which lacks "
            f"the Engine methods (name, base_url, ready, info, generate, close)"
        )
    return engine
