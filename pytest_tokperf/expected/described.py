"""The model a user describes for ``predict``: a GGUF file, a Hugging Face folder,
parameters and a quant, or a download's file size; its footprint, and the quant whose
efficiency band applies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected.prediction import footprint_from_file_size
from pytest_tokperf.results import Footprint


@dataclass(frozen=True, slots=True)
class ModelAsk:
    """What ``tokperf predict`` was told of the model (its options' values)."""

    model: str | None = None
    params: float | None = None
    active_params: float | None = None
    expert_params: float | None = None
    expert_quant: str | None = None
    experts: str | None = None
    """``USED/TOTAL`` experts per token: the active count from the expert weights."""
    quant: str | None = None
    size: str | None = None
    layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    depth: int = 0
    kv_type: str = "f16"


def quant_or_bits(text: str) -> str | float:
    """``"Q4_K_M"`` stays a name; ``"4.5"`` is bits per weight."""
    try:
        return float(text)
    except ValueError:
        return text


def described_footprint(ask: ModelAsk) -> tuple[Footprint, str | float | None]:
    """The bytes read per token of the model ``ask`` describes, and the quant (or bits
    per weight) that picks its efficiency band: the file's own type unless one is given."""
    from pytest_tokperf.model.footprint import estimate_footprint, footprint
    from pytest_tokperf.model.gguf_file import load_gguf
    from pytest_tokperf.model.hf_file import hf_footprint, is_hf_folder, load_hf
    from pytest_tokperf.model.spec import parse_size

    given = quant_or_bits(ask.quant or "Q4_K_M")
    active = _active_params(ask)
    if ask.expert_params and not ask.params:
        raise ConfigError("--expert-params prices the experts of a --params estimate; a GGUF "
                          "(--model) has them already, a --size cannot tell them apart")
    if ask.model and is_hf_folder(Path(ask.model)):
        hf = load_hf(Path(ask.model))
        return (hf_footprint(hf, depth_tokens=ask.depth),
                given if ask.quant else hf.config_dtype or "F16")
    if ask.model:
        model = load_gguf(Path(ask.model))
        return (footprint(model, depth_tokens=ask.depth, kv_type=ask.kv_type),
                given if ask.quant else model.file_type_name)
    if ask.size:
        fp = footprint_from_file_size(
            parse_size(ask.size), given, parameters=ask.params, active_parameters=active,
            n_layer=ask.layers, n_head_kv=ask.kv_heads, head_dim=ask.head_dim,
            depth_tokens=ask.depth, kv_type=ask.kv_type)
        return fp, parse_size(ask.size) * 8 / ask.params if ask.params else given
    if ask.params:
        expert_quant = None if ask.expert_quant is None else quant_or_bits(ask.expert_quant)
        fp = estimate_footprint(
            ask.params, given, n_layer=ask.layers, n_head_kv=ask.kv_heads,
            head_dim=ask.head_dim, depth_tokens=ask.depth, kv_type=ask.kv_type,
            active_parameters=active, expert_parameters=ask.expert_params,
            expert_quant=expert_quant)
        if expert_quant is not None and ask.expert_params:
            dense = ask.params - ask.expert_params
            if fp.active_parameters - dense > dense:  # the experts read outweigh the rest
                return fp, expert_quant
        return fp, given
    raise ConfigError("predict needs a model: --model FILE.gguf, --params 8e9 --quant Q4_K_M, "
                      "or --size 4.9GB (the file size) with --quant or --params")


def _active_params(ask: ModelAsk) -> float | None:
    """``--active-params``, else non-expert + ``--experts USED/TOTAL`` of ``--expert-params``."""
    if ask.experts is None:
        return ask.active_params
    used, _, total = ask.experts.partition("/")
    if not (used.isdigit() and total.isdigit() and 0 < int(used) <= int(total)):
        raise ConfigError(f"--experts {ask.experts!r} must be USED/TOTAL experts per token, "
                          "e.g. 8/128")
    if ask.active_params is not None or not (ask.expert_params and ask.params):
        raise ConfigError("--experts needs --params and --expert-params (and no "
                          "--active-params): it sets the active count from them")
    return ask.params - ask.expert_params + ask.expert_params * int(used) / int(total)
