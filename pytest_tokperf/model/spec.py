"""The shape of a synthetic model: ``ModelSpec``, its tensor plan, vocabulary and size (pure
values, no I/O)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Literal, get_args

import gguf

from pytest_tokperf.errors import ConfigError

Architecture = Literal["llama", "qwen2", "qwen3", "gemma", "qwen2moe", "qwen3moe"]
TensorType = Literal["F16", "F32", "Q8_0"]
ARCHITECTURES: tuple[str, ...] = get_args(Architecture)
TENSOR_TYPES: tuple[str, ...] = get_args(TensorType)
MOE_ARCHITECTURES = frozenset({"qwen2moe", "qwen3moe"})
WRITER_VERSION = 3
"""Bump when the bytes written for a spec change, so cached files are rewritten."""

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
MIN_VOCAB = len(SPECIAL_TOKENS) + 257
"""The smallest vocabulary: the control tokens, 256 byte tokens and one more."""

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content %}"
    "{{ '<think>\\n' + message.reasoning_content + '\\n</think>\\n' }}{%- endif %}"
    "{{- message.content + '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{ '<think>\\n' }}{%- endif %}{%- endif %}"
)
"""A Qwen3-style thinking template: output streams as ``reasoning_content``."""
_FILLER_ALPHABET = "etaoinshrdlucmfwypvbgkjqxz0123456789"
_ALIGN = 32
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?)(b?)\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_size(text: str | int) -> int:
    """Bytes from "1GB", "500MB", "1.5GiB", "70m" (SI unless ``i``), or a plain integer."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ConfigError(
                f"size {text!r} is not a size; write a number with an optional unit, "
                f"like '1GB', '500MB', '1.5GiB' or '70m'"
            )
        number, prefix, binary, _ = match.groups()
        if binary and not prefix:
            raise ConfigError(f"size {text!r} has 'i' without a unit; write e.g. '1.5GiB'")
        base = 1024 if binary else 1000
        value = round(float(number) * base ** _POWERS[prefix.lower()])
    if value <= 0:
        raise ConfigError(f"size {text!r} must be more than 0 bytes")
    return value


def multiple_near(value: int, step: int) -> str:
    """The multiples of ``step`` either side of ``value``: ``"256 or 288"``, ``"32"``."""
    below = value // step * step
    return f"{below} or {below + step}" if below > 0 else str(step)


def _check_spec(s: ModelSpec) -> str | None:
    """The first thing wrong with a spec, in words, or None."""
    for field in ("n_layer", "n_embd", "n_ff", "n_head", "n_head_kv", "context_length"):
        value = getattr(s, field)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{field}={value!r} must be a whole number >= 1"
    if s.architecture not in ARCHITECTURES:
        return f"architecture={s.architecture!r} is not one of {ARCHITECTURES}"
    if s.tensor_type not in TENSOR_TYPES:
        return f"tensor_type={s.tensor_type!r} is not one of {TENSOR_TYPES}"
    if not isinstance(s.n_vocab, int) or s.n_vocab < MIN_VOCAB:
        return (f"n_vocab={s.n_vocab!r} must be >= {MIN_VOCAB} ({len(SPECIAL_TOKENS)} control "
                f"+ 256 byte tokens + 1)")
    if s.head_dim is None and s.n_embd % s.n_head:
        return (f"n_embd={s.n_embd!r} is not a multiple of n_head={s.n_head!r}: give n_embd "
                f"a multiple of {s.n_head} (e.g. {multiple_near(s.n_embd, s.n_head)}), or set "
                f"head_dim")
    if s.head_dim is not None and s.head_dim < 2:
        return f"head_dim={s.head_dim!r} must be >= 2"
    if s.n_head % s.n_head_kv:
        return f"n_head={s.n_head!r} is not a multiple of n_head_kv={s.n_head_kv!r}"
    widths = (s.n_embd, s.n_ff, s.n_head * s.head_size)
    if s.tensor_type == "Q8_0" and any(n % 32 for n in widths):
        return (f"tensor_type='Q8_0' needs n_embd, n_ff and n_head*head_dim to be multiples "
                f"of 32 (got {widths})")
    if s.architecture in MOE_ARCHITECTURES and s.expert_count < 2:
        return f"architecture={s.architecture!r} needs expert_count >= 2"
    if s.expert_count and s.architecture not in MOE_ARCHITECTURES | {"llama"}:
        return f"architecture={s.architecture!r} has no experts; set expert_count=0"
    if s.expert_count and not 0 < s.expert_used_count <= s.expert_count:
        return (f"expert_used_count={s.expert_used_count!r} must be between 1 and "
                f"expert_count={s.expert_count!r}")
    if s.split_experts and (s.architecture != "llama" or not s.expert_count):
        return "split_experts=True needs architecture='llama' with expert_count > 0"
    if not isinstance(s.seed, int) or s.seed < 0:
        return f"seed={s.seed!r} must be a whole number >= 0"
    if not _NAME.match(s.name):
        return f"name={s.name!r} may hold only letters, digits, '.', '_' and '-'"
    return None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a synthetic model; every field goes into the cache key. Only ``llama``
    shapes are meant for llama-server."""

    n_layer: int = 8
    n_embd: int = 512
    n_ff: int = 1536
    n_head: int = 8
    n_head_kv: int = 4
    n_vocab: int = 8192
    architecture: Architecture = "llama"
    tensor_type: TensorType = "F16"
    tied_output: bool | None = None
    context_length: int = 4096
    expert_count: int = 0
    expert_used_count: int = 0
    split_experts: bool = False
    head_dim: int | None = None
    seed: int = 0
    name: str = "tokperf-synthetic"

    def __post_init__(self) -> None:
        problem = _check_spec(self)
        if problem is not None:
            raise ConfigError(f"ModelSpec.{problem}")

    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.n_embd // self.n_head

    @property
    def tied(self) -> bool:
        return self.architecture == "gemma" if self.tied_output is None else self.tied_output

    @property
    def key(self) -> str:
        """12 hex digits of the spec and writer version: the cache file's identity."""
        payload = json.dumps([WRITER_VERSION, dataclasses.asdict(self)], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def slug(self) -> str:
        return (f"{self.name}-{self.architecture}-{self.tensor_type.lower()}"
                f"-L{self.n_layer}-E{self.n_embd}-V{self.n_vocab}")


@dataclass(frozen=True, slots=True)
class PlannedTensor:
    """One tensor to write: numpy shape (row length last), ggml type and how to fill it."""

    name: str
    shape: tuple[int, ...]
    type_name: str
    init: Literal["normal", "ones", "zeros"]

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def n_bytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[self.type_name]]
        return self.n_elements // block * size


def _t(name: str, shape: tuple[int, ...], type_name: str, init: str = "normal") -> PlannedTensor:
    return PlannedTensor(name, shape, type_name, init)  # type: ignore[arg-type]


def _ffn(prefix: str, suffix: str, e: int, ff: int, wt: str,
         lead: tuple[int, ...] = ()) -> list[PlannedTensor]:
    return [_t(f"{prefix}ffn_gate{suffix}.weight", (*lead, ff, e), wt),
            _t(f"{prefix}ffn_down{suffix}.weight", (*lead, e, ff), wt),
            _t(f"{prefix}ffn_up{suffix}.weight", (*lead, ff, e), wt)]


def tensor_plan(spec: ModelSpec) -> tuple[PlannedTensor, ...]:
    """Every tensor of ``spec`` in file order, with llama.cpp's names and shapes."""
    e, ff, hd, wt = spec.n_embd, spec.n_ff, spec.head_size, spec.tensor_type
    q, kv, n_exp = spec.n_head * hd, spec.n_head_kv * hd, spec.expert_count
    out = [_t("token_embd.weight", (spec.n_vocab, e), wt)]
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        out += [_t(b + "attn_norm.weight", (e,), "F32", "ones"),
                _t(b + "attn_q.weight", (q, e), wt),
                _t(b + "attn_k.weight", (kv, e), wt),
                _t(b + "attn_v.weight", (kv, e), wt)]
        if spec.architecture in ("qwen2", "qwen2moe"):
            out += [_t(b + f"attn_{x}.bias", (n,), "F32", "zeros")
                    for x, n in (("q", q), ("k", kv), ("v", kv))]
        if spec.architecture in ("qwen3", "qwen3moe"):
            out += [_t(b + f"attn_{x}_norm.weight", (hd,), "F32", "ones") for x in "qk"]
        out += [_t(b + "attn_output.weight", (e, q), wt),
                _t(b + "ffn_norm.weight", (e,), "F32", "ones")]
        if not n_exp:
            out += _ffn(b, "", e, ff, wt)
            continue
        out.append(_t(b + "ffn_gate_inp.weight", (n_exp, e), "F32"))
        if spec.split_experts:
            for x in range(n_exp):
                out += _ffn(b, f".{x}", e, ff, wt)
        else:
            out += _ffn(b, "_exps", e, ff, wt, lead=(n_exp,))
        if spec.architecture == "qwen2moe":
            out.append(_t(b + "ffn_gate_inp_shexp.weight", (e,), "F32"))
            out += _ffn(b, "_shexp", e, ff, wt)
    out.append(_t("output_norm.weight", (e,), "F32", "ones"))
    if not spec.tied:
        out.append(_t("output.weight", (spec.n_vocab, e), wt))
    return tuple(out)


def _filler_pieces() -> Iterator[str]:
    yield "\u2581"
    for length in itertools.count(1):
        for letters in itertools.product(_FILLER_ALPHABET, repeat=length):
            word = "".join(letters)
            yield "\u2581" + word
            yield word


def vocab_pieces(n_vocab: int) -> tuple[str, ...]:
    """``<unk>``, ``<s>``, ``</s>``, 256 ``<0xXX>`` pieces, then fillers without ``<``."""
    fixed = SPECIAL_TOKENS + tuple(f"<0x{i:02X}>" for i in range(256))
    return fixed + tuple(itertools.islice(_filler_pieces(), max(n_vocab - len(fixed), 0)))


def predicted_file_bytes(spec: ModelSpec) -> int:
    """The file size ``write_model`` will produce, to within a few KB."""
    plan = tensor_plan(spec)
    meta = 24 + 2048 + sum(8 + len(p.encode()) + 8 for p in vocab_pieces(spec.n_vocab))
    meta += sum(8 + len(t.name) + 4 + 8 * len(t.shape) + 12 for t in plan)
    meta = -(-meta // _ALIGN) * _ALIGN
    return meta + sum(-(-t.n_bytes // _ALIGN) * _ALIGN for t in plan)


_LADDER: tuple[tuple[int, int, int, int, int], ...] = (
    # (n_embd, n_ff, n_head, n_head_kv, n_vocab)
    (2048, 5632, 32, 4, 32000),
    (1024, 2816, 16, 4, 32000),
    (512, 1536, 8, 4, 8192),
    (256, 704, 4, 4, 4096),
    (192, 512, 3, 3, 2048),
    (128, 352, 2, 2, 1024),
    (128, 352, 2, 2, 512),
    (4096, 11008, 32, 8, 32000),
    (8192, 28672, 64, 8, 32000),
)
MAX_LAYERS = 64


def spec_for_size(
    target: int | str,
    tensor_type: TensorType = "F16",
    *,
    seed: int = 0,
    context_length: int = 4096,
    tolerance: float = 0.10,
) -> ModelSpec:
    """A llama shape whose file is within ``tolerance`` of ``target`` bytes."""
    target_bytes = parse_size(target)
    fallback: ModelSpec | None = None
    for n_embd, n_ff, n_head, n_head_kv, n_vocab in _LADDER:
        def make(n_layer: int) -> ModelSpec:
            return ModelSpec(n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head,
                             n_head_kv=n_head_kv, n_vocab=n_vocab, tensor_type=tensor_type,
                             context_length=context_length, seed=seed)
        one, two = predicted_file_bytes(make(1)), predicted_file_bytes(make(2))
        layers = min(max(round((target_bytes - one) / (two - one)) + 1, 1), MAX_LAYERS)
        spec = make(layers)
        if abs(predicted_file_bytes(spec) - target_bytes) <= tolerance * target_bytes:
            if layers >= 2:
                return spec
            fallback = fallback or spec
    if fallback is not None:
        return fallback
    raise ConfigError(
        f"no synthetic model shape comes within {tolerance:.0%} of {target!r} "
        f"({target_bytes} bytes); pick a size between about 2 MB and 60 GB"
    )


def draft_spec_for(spec: ModelSpec) -> ModelSpec:
    """A much smaller llama with the same vocabulary: a draft for speculative decoding."""
    n_embd = max(128, spec.n_embd // 4 // 64 * 64)
    n_head = max(2, n_embd // 64)
    return ModelSpec(n_layer=max(1, spec.n_layer // 4), n_embd=n_embd,
                     n_ff=-(-int(n_embd * 2.75) // 32) * 32, n_head=n_head, n_head_kv=n_head,
                     n_vocab=spec.n_vocab, tensor_type=spec.tensor_type,
                     context_length=spec.context_length, seed=spec.seed + 1,
                     name=f"{spec.name}-draft")


TEST_MODEL = ModelSpec(n_layer=8, n_embd=512, n_ff=1536, n_head=8, n_head_kv=4,
                       n_vocab=8192, name="tokperf-test")
"""About 67 MB in F16: fast enough to decode hundreds of tokens in a unit-test run."""

MAIN_MODEL = ModelSpec(n_layer=10, n_embd=2048, n_ff=5632, n_head=32, n_head_kv=4,
                       n_vocab=32000, name="tokperf-main")
"""About 1.14 GB in F16: bandwidth-bound on a CPU."""

ENGINES_MODEL = ModelSpec(n_layer=4, n_embd=256, n_ff=704, n_head=4, n_head_kv=2,
                          n_vocab=4096, name="tokperf-engines")
"""About 10 MB in F16: one shape every engine loads in seconds (real-engine tests)."""


PRESETS = {"main": MAIN_MODEL, "test": TEST_MODEL, "engines": ENGINES_MODEL}
"""The generated models by name (``tokperf make-model --preset``)."""


def spec_from(preset: str = "main", size: str | None = None, tensor_type: TensorType = "F16", *,
              layers: int | None = None, width: int | None = None,
              vocab: int | None = None) -> ModelSpec:
    """A preset's shape (or one near a file ``size``) in ``tensor_type``, with layers,
    width and vocabulary given by the user, each refused under its option's name."""
    spec = (spec_for_size(parse_size(size), tensor_type=tensor_type) if size
            else replace(PRESETS[preset], tensor_type=tensor_type))
    heads = spec.n_head if spec.head_dim is None else 1
    for flag, value, least in (("--layers", layers, 1), ("--width", width, 1),
                               ("--vocab", vocab, MIN_VOCAB)):
        if value is not None and value < least:
            raise ConfigError(f"{flag} {value} is too small: give at least {least}")
    step = math.lcm(heads, 32) if tensor_type == "Q8_0" else heads
    if width is not None and width % step:
        what = " and ".join(([f"the {heads} attention heads"] if heads > 1 else [])
                            + (["Q8_0's blocks of 32"] if tensor_type == "Q8_0" else []))
        raise ConfigError(f"--width {width} is not a multiple of {what}: give a multiple of "
                          f"{step} (e.g. {multiple_near(width, step)})")
    return replace(spec, n_layer=spec.n_layer if layers is None else layers,
                   n_embd=spec.n_embd if width is None else width,
                   n_vocab=spec.n_vocab if vocab is None else vocab)
