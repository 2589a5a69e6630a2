"""Engine adapters: one per engine behind the ``Engine`` protocol (``base``), the
``registry`` of names, the shared wire shapes (``wire``, ``answers``, ``speculation``) and
``llama_server/`` (adapter, typed settings, start-up log).

How bytes arrive is ``transport/``; starting a server process is ``launch/``. Only the
names live here, so reading settings costs no HTTP client import.
"""

from pytest_tokperf.transport import DEFAULT_IDLE_TIMEOUT_S

BUILTIN_ENGINE_NAMES = ("llama-server", "ollama", "vllm", "lmstudio", "mlx", "sglang", "openai")
"""The engines this package ships adapters for (``registry.BUILTIN_ENGINES``' keys)."""

__all__ = ["BUILTIN_ENGINE_NAMES", "DEFAULT_IDLE_TIMEOUT_S"]
