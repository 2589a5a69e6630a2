"""Bytes one decode step reads: weights at their stored size, plus the KV cache, counted
from the tensor table (the rules are in docs/design.md).
"""

from __future__ import annotations

import re
from dataclasses import replace

from pytest_tokperf.model.estimate import bits_per_weight, estimate_footprint
from pytest_tokperf.model.gguf_file import GGUFModel, GGUFTensor
from pytest_tokperf.model.kv import check_depth, kv_row_bytes, kv_type_label, kv_types
from pytest_tokperf.results import Footprint

__all__ = ["GATHERED_TENSORS", "KNOWN_ARCHITECTURES", "at_depth", "bits_per_weight", "describe",
           "estimate_footprint", "footprint", "kv_bytes"]

KNOWN_ARCHITECTURES = frozenset({
    "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
    "qwen2moe", "qwen3moe", "mixtral", "deepseek2", "gpt-oss",
})
"""Architectures whose tensor layout the counting rule was checked against."""

GATHERED_TENSORS = frozenset({"token_embd.weight", "position_embd.weight", "token_types.weight"})
"""Lookup tables: one row per token is read, not the whole matrix."""

_PER_EXPERT = re.compile(r"^blk\.\d+\.ffn_(?:gate|up|down)\.(\d+)\.")
_GB = 1e9


def _is_expert(name: str) -> bool:
    return "_exps" in name or _PER_EXPERT.match(name) is not None


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


def _layer_kv(model: GGUFModel, layer: int, n_kv: int, type_k: str, type_v: str) -> int:
    """KV bytes one position costs in one layer."""
    windowed = model.is_windowed(layer)
    k_len = (model.key_length_swa or model.key_length) if windowed else model.key_length
    v_len = (model.value_length_swa or model.value_length) if windowed else model.value_length
    size = kv_row_bytes(n_kv * k_len, type_k)
    if not model.is_mla:
        size += kv_row_bytes(n_kv * v_len, type_v)
    return size


def kv_bytes(model: GGUFModel, depth_tokens: int, kv_type: str = "f16", *,
             kv_type_k: str | None = None, kv_type_v: str | None = None) -> int:
    """KV cache bytes one decoded token reads with ``depth_tokens`` earlier positions."""
    check_depth(depth_tokens)
    type_k, type_v = kv_types(kv_type, kv_type_k, kv_type_v)
    window = model.sliding_window or 0
    total = 0
    for layer, n_kv in enumerate(model.head_count_kv):
        positions = min(depth_tokens, window) if model.is_windowed(layer) else depth_tokens
        total += positions * _layer_kv(model, layer, n_kv, type_k, type_v)
    return total


def footprint(
    model: GGUFModel,
    depth_tokens: int = 0,
    kv_type: str = "f16",
    *,
    kv_type_k: str | None = None,
    kv_type_v: str | None = None,
) -> Footprint:
    """Bytes one decode step reads for ``model`` at ``depth_tokens``; ``kv_type_k``/``_v``
    override ``kv_type``."""
    check_depth(depth_tokens)
    type_k, type_v = kv_types(kv_type, kv_type_k, kv_type_v)
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

    if depth_tokens > 0:
        total_kv = kv_bytes(model, depth_tokens, kv_type_k=type_k, kv_type_v=type_v)
        per_position = round(total_kv / depth_tokens)
    else:
        per_position = sum(_layer_kv(model, layer, n_kv, type_k, type_v)
                           for layer, n_kv in enumerate(model.head_count_kv))

    if model.architecture not in KNOWN_ARCHITECTURES:
        warnings.append(
            f"{model.path.name}: architecture {model.architecture!r} is not one tokperf "
            f"has checked; counted every tensor once (embedding gathered, experts scaled) "
            f"and K+V for every layer: compare with the engine's own figures"
        )
    if model.sliding_window and depth_tokens > model.sliding_window:
        warnings += [f"{model.path.name}: {note}" for note in model.swa_notes]
    return Footprint(
        architecture=model.architecture, weights_bytes=dense_bytes + expert_bytes,
        kv_bytes_per_position=per_position, depth_tokens=depth_tokens,
        kv_type=kv_type_label(type_k, type_v), resident_bytes=model.tensor_bytes,
        active_parameters=dense_params + expert_params, total_parameters=model.parameter_count,
        expert_count=count if experts else model.expert_count,
        experts_used=used if experts else model.expert_used_count,
        tied_output=tied, warnings=tuple(warnings),
    )


def at_depth(fp: Footprint, depth_tokens: int, model: GGUFModel | None = None) -> Footprint:
    """The same footprint at another context depth. Without ``model`` the KV bytes scale
    linearly (exact only for full attention)."""
    check_depth(depth_tokens)
    if model is None:
        return replace(fp, depth_tokens=depth_tokens)
    type_k, _, type_v = fp.kv_type.partition("/")
    return footprint(model, depth_tokens, kv_type_k=type_k, kv_type_v=type_v or type_k)


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
