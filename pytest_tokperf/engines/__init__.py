"""Engine adapters: one per engine behind the ``Engine`` protocol, and their registry."""

from pytest_tokperf.transport import DEFAULT_IDLE_TIMEOUT_S

BUILTIN_ENGINE_NAMES = ("llama-server", "ollama", "vllm", "lmstudio", "mlx", "sglang", "openai")
"""The engines this package ships adapters for (``registry.BUILTIN_ENGINES``' keys)."""

__all__ = ["BUILTIN_ENGINE_NAMES", "DEFAULT_IDLE_TIMEOUT_S"]
