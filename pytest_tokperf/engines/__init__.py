"""Engine adapters behind one ``Engine`` protocol, their registry and launchers.

Only the names live here, so reading settings costs no HTTP client import.
"""

BUILTIN_ENGINE_NAMES = ("llama-server", "ollama", "vllm", "lmstudio", "mlx", "sglang", "openai")
"""The engines this package ships adapters for (``registry.BUILTIN_ENGINES``' keys)."""
