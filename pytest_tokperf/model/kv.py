"""KV cache element sizes: llama.cpp's ``-ctk`` / ``-ctv`` types, K and V apart."""

from __future__ import annotations

from pytest_tokperf.errors import ConfigError

KV_TYPES: dict[str, tuple[int, int]] = {
    "f32": (4, 1),
    "f16": (2, 1),
    "bf16": (2, 1),
    "q8_0": (34, 32),
    "q4_0": (18, 32),
    "q4_1": (20, 32),
    "q5_0": (22, 32),
    "q5_1": (24, 32),
    "iq4_nl": (18, 32),
}
"""llama.cpp ``--cache-type-k/-v`` choices: (bytes per block, elements per block)."""


def kv_element_bytes(kv_type: str, name: str = "kv_type") -> tuple[int, int]:
    """(bytes, elements) per block of a KV cache type; ConfigError if unknown."""
    key = kv_type.strip().lower() if isinstance(kv_type, str) else kv_type
    if key not in KV_TYPES:
        raise ConfigError(
            f"{name}={kv_type!r} is not a llama.cpp KV cache type; "
            f"use one of {', '.join(KV_TYPES)}"
        )
    return KV_TYPES[key]


def kv_row_bytes(elements: int, kv_type: str) -> int:
    """Bytes of ``elements`` cache elements of one position, whole blocks."""
    size, block = kv_element_bytes(kv_type)
    return -(-elements // block) * size


def kv_types(kv_type: str = "f16", kv_type_k: str | None = None,
             kv_type_v: str | None = None) -> tuple[str, str]:
    """The (K, V) cache types: ``kv_type`` for both unless one is given apart."""
    k = kv_type if kv_type_k is None else kv_type_k
    v = kv_type if kv_type_v is None else kv_type_v
    kv_element_bytes(k, "kv_type" if kv_type_k is None else "kv_type_k")
    kv_element_bytes(v, "kv_type" if kv_type_v is None else "kv_type_v")
    return k.strip().lower(), v.strip().lower()


def kv_type_label(type_k: str, type_v: str) -> str:
    """``"q8_0"`` when K and V agree, ``"q8_0/f16"`` (K/V) when they differ."""
    return type_k if type_k == type_v else f"{type_k}/{type_v}"


def check_depth(depth_tokens: int) -> None:
    if isinstance(depth_tokens, bool) or not isinstance(depth_tokens, int) or depth_tokens < 0:
        raise ConfigError(
            f"depth_tokens={depth_tokens!r} must be a whole number of tokens >= 0 "
            f"(the context already in the KV cache)"
        )
