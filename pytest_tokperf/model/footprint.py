"""Bytes one decode step reads: weights at their stored size, plus the KV cache.

Counted from the file's tensor table, never as ``params * bits / 8``: real files mix
quantization types. One generated token streams every weight tensor once, except:

- ``token_embd`` is a row gather (one row per token) unless the output head is tied
  to it (no ``output.weight``), in which case the head streams the whole table;
- stacked MoE expert tensors (``*_exps``) and old per-expert tensors
  (``blk.N.ffn_gate.E.weight``) count ``expert_used_count / expert_count`` of their
  bytes; routers (``ffn_gate_inp``) and shared experts (``*_shexp``) count in full;
- the KV cache adds, per earlier position, ``n_head_kv * (key_length + value_length)``
  elements per layer at the cache type's size (K only for multi-head latent attention).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import gguf

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.model.gguf_file import GGUFModel, GGUFTensor
from pytest_tokperf.results import Footprint

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

KNOWN_ARCHITECTURES = frozenset({
    "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
    "qwen2moe", "qwen3moe", "mixtral", "deepseek2",
})
"""Architectures whose tensor layout the counting rule was checked against."""

GATHERED_TENSORS = frozenset({"token_embd.weight", "position_embd.weight", "token_types.weight"})
"""Lookup tables: one row per token is read, not the whole matrix."""

FILE_MIX_BITS_PER_WEIGHT: dict[str, float] = {
    "Q2_K": 3.35,
    "Q3_K_S": 3.50,
    "Q3_K_M": 3.91,
    "Q3_K_L": 4.27,
    "Q4_K_S": 4.58,
    "Q4_K_M": 4.84,
    "Q5_K_S": 5.52,
    "Q5_K_M": 5.68,
    "Q6_K": 6.56,
}
"""Whole-file bits per weight of llama.cpp's k-quant mixes (attention, output and some
FFN tensors stay at higher precision). Source: llama.cpp ``tools/quantize/README.md``,
table "Llama 2 7B". Single-type names not listed here (Q8_0 = 8.5, Q4_0 = 4.5, F16 = 16,
IQ4_XS = 4.25, ...) are exact block sizes from ``gguf.GGML_QUANT_SIZES``."""

_PER_EXPERT = re.compile(r"^blk\.\d+\.ffn_(?:gate|up|down)\.(\d+)\.")
_GB = 1e9


def _is_expert(name: str) -> bool:
    return "_exps" in name or _PER_EXPERT.match(name) is not None


def kv_element_bytes(kv_type: str) -> tuple[int, int]:
    """(bytes, elements) per block of a KV cache type; ConfigError if unknown."""
    key = kv_type.strip().lower() if isinstance(kv_type, str) else kv_type
    if key not in KV_TYPES:
        raise ConfigError(
            f"kv_type={kv_type!r} is not a llama.cpp KV cache type; "
            f"use one of {', '.join(KV_TYPES)}"
        )
    return KV_TYPES[key]


def _kv_bytes(elements: int, kv_type: str) -> int:
    size, block = kv_element_bytes(kv_type)
    return -(-elements // block) * size


def _check_depth(depth_tokens: int) -> None:
    if isinstance(depth_tokens, bool) or not isinstance(depth_tokens, int) or depth_tokens < 0:
        raise ConfigError(
            f"depth_tokens={depth_tokens!r} must be a whole number of tokens >= 0 "
            f"(the context already in the KV cache)"
        )


def _expert_counts(model: GGUFModel, experts: list[GGUFTensor]) -> tuple[int, int, list[str]]:
    warnings: list[str] = []
    count, used = model.expert_count, model.expert_used_count
    if not experts:
        return count, used, warnings
    if count <= 0:
        stacked = [t.shape[2] for t in experts if "_exps" in t.name and len(t.shape) >= 3]
        split = [int(m.group(1)) + 1 for t in experts if (m := _PER_EXPERT.match(t.name))]
        count = max(stacked + split, default=0)
        warnings.append(
            f"{model.path.name}: no {model.architecture}.expert_count key; "
            f"read {count} experts from the tensor shapes"
        )
    if used <= 0 or used > count:
        warnings.append(
            f"{model.path.name}: expert_used_count={used!r} is missing or invalid; "
            f"counted all {count} experts as active (an upper bound)"
        )
        used = count
    return count, used, warnings


def footprint(model: GGUFModel, depth_tokens: int = 0, kv_type: str = "f16") -> Footprint:
    """Bytes one decode step reads for ``model`` with ``depth_tokens`` of context."""
    _check_depth(depth_tokens)
    kv_element_bytes(kv_type)
    kv_type = kv_type.strip().lower()
    names = {t.name for t in model.tensors}
    tied = "output.weight" not in names and "token_embd.weight" in names
    dense_bytes = dense_params = 0
    experts: list[GGUFTensor] = []
    for t in model.tensors:
        if t.name in GATHERED_TENSORS and not (tied and t.name == "token_embd.weight"):
            rows = max(t.n_rows, 1)
            dense_bytes += t.n_bytes // rows
            dense_params += t.n_elements // rows
        elif _is_expert(t.name):
            experts.append(t)
        else:
            dense_bytes += t.n_bytes
            dense_params += t.n_elements
    count, used, warnings = _expert_counts(model, experts)
    expert_bytes = sum(t.n_bytes for t in experts)
    expert_params = sum(t.n_elements for t in experts)
    if experts and count > 0:
        expert_bytes = expert_bytes * used // count
        expert_params = expert_params * used // count

    per_position = 0
    for n_kv in model.head_count_kv:
        per_position += _kv_bytes(n_kv * model.key_length, kv_type)
        if not model.is_mla:
            per_position += _kv_bytes(n_kv * model.value_length, kv_type)

    if model.architecture not in KNOWN_ARCHITECTURES:
        warnings.append(
            f"{model.path.name}: architecture {model.architecture!r} is not one tokperf "
            f"has checked; counted every tensor once (embedding gathered, experts scaled) "
            f"and K+V for every layer: compare with the engine's own figures"
        )
    if model.sliding_window and depth_tokens > model.sliding_window:
        warnings.append(
            f"{model.path.name}: {model.architecture} layers with a {model.sliding_window}-"
            f"token sliding window read fewer KV positions; KV bytes at depth "
            f"{depth_tokens} are an upper bound"
        )
    return Footprint(
        architecture=model.architecture,
        weights_bytes=dense_bytes + expert_bytes,
        kv_bytes_per_position=per_position,
        depth_tokens=depth_tokens,
        kv_type=kv_type,
        resident_bytes=model.tensor_bytes,
        active_parameters=dense_params + expert_params,
        total_parameters=model.parameter_count,
        expert_count=count if experts else model.expert_count,
        experts_used=used if experts else model.expert_used_count,
        tied_output=tied,
        warnings=tuple(warnings),
    )


def at_depth(fp: Footprint, depth_tokens: int) -> Footprint:
    """The same footprint with a different context depth."""
    _check_depth(depth_tokens)
    return replace(fp, depth_tokens=depth_tokens)


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
) -> Footprint:
    """A "before you buy" footprint from a parameter count, when there is no file.

    Every active weight is assumed streamed at the average bits per weight; the
    embedding gather is not subtracted, so this slightly overstates small-vocab models.
    """
    _check_count("parameters", parameters, positive=True)
    for name, value in (("n_layer", n_layer), ("n_head_kv", n_head_kv), ("head_dim", head_dim)):
        _check_count(name, value)
        if not float(value).is_integer():
            raise ConfigError(f"{name}={value!r} must be a whole number")
    _check_depth(depth_tokens)
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
    bpw = bits_per_weight(bits_per_weight_or_quant)
    kv_element_bytes(kv_type)
    kv_type = kv_type.strip().lower()
    per_layer = 2 * _kv_bytes(int(n_head_kv) * int(head_dim), kv_type)
    return Footprint(
        architecture="estimate",
        weights_bytes=round(active * bpw / 8),
        kv_bytes_per_position=int(n_layer) * per_layer,
        depth_tokens=depth_tokens,
        kv_type=kv_type,
        resident_bytes=round(parameters * bpw / 8),
        active_parameters=round(active),
        total_parameters=round(parameters),
    )


def describe(fp: Footprint) -> str:
    """One line: "weights 11.50 GB + KV 0.28 GB at depth 4096 = 11.78 GB per token"."""
    line = (
        f"weights {fp.weights_bytes / _GB:.2f} GB + KV {fp.kv_bytes / _GB:.2f} GB "
        f"at depth {fp.depth_tokens} = {fp.total_bytes / _GB:.2f} GB per token"
    )
    extras: list[str] = []
    if fp.expert_count:
        extras.append(f"{fp.experts_used} of {fp.expert_count} experts active")
    if fp.tied_output:
        extras.append("tied embedding streamed as the output head")
    if fp.resident_bytes != fp.weights_bytes:
        extras.append(f"{fp.resident_bytes / _GB:.2f} GB resident")
    return line + (f" ({'; '.join(extras)})" if extras else "")
