"""A "before you buy" footprint from a parameter count, when there is no file: weights at
the quant's average bits per weight, plus the KV cache."""

from __future__ import annotations

import math

import gguf

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.model.kv import check_depth, kv_row_bytes, kv_type_label, kv_types
from pytest_tokperf.results import Footprint

FILE_MIX_BITS_PER_WEIGHT: dict[str, float] = {
    "Q2_K": 3.35, "Q3_K_S": 3.50, "Q3_K_M": 3.91, "Q3_K_L": 4.27, "Q4_K_S": 4.58,
    "Q4_K_M": 4.84, "Q5_K_S": 5.52, "Q5_K_M": 5.68, "Q6_K": 6.56,
}
"""Whole-file bits per weight of llama.cpp's k-quant mixes."""


def bits_per_weight(quant: str | float) -> float:
    """Average bits per weight for a file-type name ("Q4_K_M") or a number (passed through)."""
    if isinstance(quant, bool):
        raise ConfigError(
            f"bits per weight {quant!r} must be a number or a quant name like 'Q4_K_M'"
        )
    if isinstance(quant, (int, float)):
        value = float(quant)
    else:
        name = quant.strip().upper()
        if name in FILE_MIX_BITS_PER_WEIGHT:
            return FILE_MIX_BITS_PER_WEIGHT[name]
        try:
            qtype = gguf.GGMLQuantizationType[name]
        except KeyError:
            known = sorted(set(FILE_MIX_BITS_PER_WEIGHT) | {t.name for t in gguf.GGML_QUANT_SIZES})
            raise ConfigError(
                f"unknown quantization {quant!r}; give bits per weight as a number or "
                f"one of {', '.join(known)}"
            ) from None
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        value = type_size * 8 / block
    if not math.isfinite(value) or not 0 < value <= 64:
        raise ConfigError(f"bits per weight {quant!r} must be > 0 and <= 64")
    return value


def _check_count(name: str, value: float, *, positive: bool = False) -> None:
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    if bad or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(f"{name}={value!r} must be a finite number {bound}")


def _check_whole(**values: float) -> None:
    for name, value in values.items():
        _check_count(name, value)
        if not float(value).is_integer():
            raise ConfigError(f"{name}={value!r} must be a whole number")


def _split(parameters: float, active: float, active_parameters: float | None,
           expert_parameters: float | None) -> tuple[float, float, float]:
    """(non-expert parameters, expert parameters, active expert parameters)."""
    if expert_parameters is None:
        return active, 0.0, 0.0
    _check_count("expert_parameters", expert_parameters, positive=True)
    if expert_parameters > parameters:
        raise ConfigError(f"expert_parameters={expert_parameters!r} exceeds "
                          f"parameters={parameters!r}; give all routed expert weights")
    if active_parameters is None:
        raise ConfigError(f"expert_parameters={expert_parameters!r} needs active_parameters "
                          f"(what one token uses: non-expert weights plus its experts)")
    dense = parameters - expert_parameters
    if active < dense:
        raise ConfigError(
            f"active_parameters={active_parameters!r} is less than the non-expert "
            f"parameters ({dense:.4g} = parameters - expert_parameters), which every "
            f"token reads")
    return dense, expert_parameters, active - dense


def _kv(n_layer: int, per_layer: int, depth: int, window: int, sliding: int) -> int:
    """Mean KV bytes per position at ``depth`` (at depth 0: the rate of the first ones)."""
    if depth == 0:
        return n_layer * per_layer
    total = (n_layer - sliding) * per_layer * depth + sliding * per_layer * min(depth, window)
    return round(total / depth)


def estimate_footprint(
    parameters: float,
    bits_per_weight_or_quant: str | float,
    *,
    n_layer: int = 0,
    n_head_kv: int = 0,
    head_dim: int = 0,
    depth_tokens: int = 0,
    kv_type: str = "f16",
    active_parameters: float | None = None,
    expert_parameters: float | None = None,
    expert_quant: str | float | None = None,
    kv_type_k: str | None = None,
    kv_type_v: str | None = None,
    sliding_window: int = 0,
    sliding_layers: int = 0,
) -> Footprint:
    """Bytes per token from a parameter count (the embedding gather not subtracted). MoE:
    the non-expert ``parameters - expert_parameters`` streams in full, the experts at
    ``expert_quant`` as far as ``active_parameters`` reaches; SWA: ``sliding_layers``
    read at most ``sliding_window`` positions."""
    _check_count("parameters", parameters, positive=True)
    _check_whole(n_layer=n_layer, n_head_kv=n_head_kv, head_dim=head_dim,
                 sliding_window=sliding_window, sliding_layers=sliding_layers)
    check_depth(depth_tokens)
    active = parameters if active_parameters is None else active_parameters
    _check_count("active_parameters", active, positive=True)
    if active > parameters:
        raise ConfigError(
            f"active_parameters={active_parameters!r} exceeds parameters={parameters!r}; "
            f"for MoE give the total and the active count per token"
        )
    if depth_tokens > 0 and not (n_layer and n_head_kv and head_dim):
        raise ConfigError(
            f"depth_tokens={depth_tokens!r} needs n_layer, n_head_kv and head_dim to size "
            f"the KV cache (got {n_layer!r}, {n_head_kv!r}, {head_dim!r})"
        )
    if sliding_layers > n_layer or (sliding_layers and not sliding_window):
        raise ConfigError(
            f"sliding_layers={sliding_layers!r} must be at most n_layer={n_layer!r} and "
            f"needs sliding_window > 0 (got {sliding_window!r})"
        )
    if expert_quant is not None and expert_parameters is None:
        raise ConfigError(f"expert_quant={expert_quant!r} needs expert_parameters "
                          f"(all routed expert weights) to know what it prices")
    bpw = bits_per_weight(bits_per_weight_or_quant)
    expert_bpw = bpw if expert_quant is None else bits_per_weight(expert_quant)
    dense, experts, active_experts = _split(parameters, active, active_parameters,
                                            expert_parameters)
    type_k, type_v = kv_types(kv_type, kv_type_k, kv_type_v)
    elements = int(n_head_kv) * int(head_dim)
    per_layer = kv_row_bytes(elements, type_k) + kv_row_bytes(elements, type_v)
    return Footprint(
        architecture="estimate",
        weights_bytes=round(dense * bpw / 8 + active_experts * expert_bpw / 8),
        kv_bytes_per_position=_kv(int(n_layer), per_layer, depth_tokens, int(sliding_window),
                                  int(sliding_layers)),
        depth_tokens=depth_tokens,
        kv_type=kv_type_label(type_k, type_v),
        resident_bytes=round((parameters - experts) * bpw / 8 + experts * expert_bpw / 8),
        active_parameters=round(active),
        total_parameters=round(parameters),
    )
