"""Random-weight Hugging Face model folders that mlx_lm and vLLM load, with no download."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_tokperf.errors import ConfigError, ModelFileError
from pytest_tokperf.model.spec import CHAT_TEMPLATE, ModelSpec
from pytest_tokperf.model.writer import cache_once
from pytest_tokperf.paths import models_dir
from pytest_tokperf.results import Progress

HF_WRITER_VERSION = 2
"""Bump when the files written for a spec change, so cached folders are rewritten."""

HF_DTYPES = {"F16": ("F16", np.float16, "float16"), "F32": ("F32", np.float32, "float32")}
"""GGUF tensor type -> (safetensors dtype, numpy dtype, config.json ``dtype``)."""

SAFETENSORS_DTYPES = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32,
                      "F64": np.float64, "I8": np.int8, "U8": np.uint8, "I16": np.int16,
                      "I32": np.int32, "I64": np.int64, "BOOL": np.bool_}

BOS = "<|endoftext|>"
EOS = "<|im_end|>"
SPECIALS = (BOS, "<|im_start|>", EOS, "<think>", "</think>")
"""The chat template's markers, whole tokens (ids 0-4)."""

_CORPUS_WORDS = 30000


def hf_tensor_plan(spec: ModelSpec) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """(name, shape, init) of every tensor of ``spec`` under Hugging Face Llama names."""
    check_hf_spec(spec)
    e, ff, hd = spec.n_embd, spec.n_ff, spec.head_size
    q, kv = spec.n_head * hd, spec.n_head_kv * hd
    out: list[tuple[str, tuple[int, ...], str]] = [
        ("model.embed_tokens.weight", (spec.n_vocab, e), "normal")]
    for i in range(spec.n_layer):
        b = f"model.layers.{i}."
        out += [(b + "input_layernorm.weight", (e,), "ones"),
                (b + "self_attn.q_proj.weight", (q, e), "normal"),
                (b + "self_attn.k_proj.weight", (kv, e), "normal"),
                (b + "self_attn.v_proj.weight", (kv, e), "normal"),
                (b + "self_attn.o_proj.weight", (e, q), "normal"),
                (b + "post_attention_layernorm.weight", (e,), "ones"),
                (b + "mlp.gate_proj.weight", (ff, e), "normal"),
                (b + "mlp.up_proj.weight", (ff, e), "normal"),
                (b + "mlp.down_proj.weight", (e, ff), "normal")]
    out.append(("model.norm.weight", (e,), "ones"))
    if not spec.tied:
        out.append(("lm_head.weight", (spec.n_vocab, e), "normal"))
    return tuple(out)


def check_hf_spec(spec: ModelSpec) -> None:
    """Refuse shapes that have no Hugging Face form here, naming what would work."""
    if spec.architecture != "llama" or spec.expert_count:
        raise ConfigError(
            f"--format hf writes dense llama shapes only (got architecture "
            f"{spec.architecture!r}, expert_count {spec.expert_count!r}); use --format gguf "
            f"for the others"
        )
    if spec.tensor_type not in HF_DTYPES:
        raise ConfigError(
            f"--format hf writes F16 or F32 tensors, not {spec.tensor_type!r} (safetensors "
            f"has no Q8_0); pass --type F16 or --type F32"
        )


def config_json(spec: ModelSpec) -> dict[str, object]:
    """``config.json`` of a Llama for transformers, mlx_lm and vLLM."""
    dtype = HF_DTYPES[spec.tensor_type][2]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.n_embd,
        "intermediate_size": spec.n_ff,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "head_dim": spec.head_size,
        "vocab_size": spec.n_vocab,
        "max_position_embeddings": spec.context_length,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": spec.tied,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "dtype": dtype,
        "name_or_path": spec.name,
    }


Lazy = tuple[str, tuple[int, ...], "np.dtype[Any]", Callable[[], np.ndarray]]
"""One tensor to write: name, shape, dtype and what makes its data (called once, in order)."""


def write_safetensors(path: Path, tensors: Sequence[Lazy],
                      metadata: dict[str, str] | None = None) -> Path:
    """Write ``tensors`` in the safetensors layout, one tensor in memory at a time."""
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    names = {np.dtype(v): k for k, v in SAFETENSORS_DTYPES.items() if k != "BF16"}
    for name, shape, dtype, _ in tensors:
        label = names.get(np.dtype(dtype))
        if label is None:
            raise ModelFileError(f"tensor {name!r}: numpy dtype {dtype!r} has no "
                                 f"safetensors name; use float16 or float32")
        n_bytes = math.prod(shape) * np.dtype(dtype).itemsize
        header[name] = {"dtype": label, "shape": list(shape),
                        "data_offsets": [offset, offset + n_bytes]}
        offset += n_bytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(len(raw).to_bytes(8, "little"))
        fh.write(raw)
        for name, shape, dtype, make in tensors:
            array = np.ascontiguousarray(make(), dtype=np.dtype(dtype).newbyteorder("<"))
            if array.shape != tuple(shape):
                raise ModelFileError(f"tensor {name!r} was made with shape {array.shape!r}, "
                                     f"not the {tuple(shape)!r} its header says")
            fh.write(array.tobytes())
    return path


def _lazy_tensors(spec: ModelSpec) -> list[Lazy]:
    dtype = np.dtype(HF_DTYPES[spec.tensor_type][1])

    def maker(index: int, shape: tuple[int, ...], init: str) -> Callable[[], np.ndarray]:
        def make() -> np.ndarray:
            if init == "ones":
                return np.ones(shape, dtype=dtype)
            rng = np.random.default_rng([spec.seed, index])
            values = rng.standard_normal(shape, dtype=np.float32)
            values *= 0.02
            return values.astype(dtype)
        return make

    return [(name, shape, dtype, maker(index, shape, init))
            for index, (name, shape, init) in enumerate(hf_tensor_plan(spec))]


def corpus(n_words: int = _CORPUS_WORDS, seed: int = 0) -> Iterator[str]:
    """Lines the tokenizer learns from: tokperf's prompt words, hex salts, pseudo-words."""
    from pytest_tokperf.engines.wire import FILLER_WORDS

    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
    hexdigits = np.array(list("0123456789abcdef"))
    for _ in range(400):  # frequent enough that each prompt word's merges come first
        yield " " + " ".join(FILLER_WORDS) + "\n"
    line: list[str] = []
    for i in range(n_words):
        if i % 5 == 0:
            line.append("".join(rng.choice(hexdigits, 12)) + " run " + str(i) + ":")
        else:
            line.append("".join(rng.choice(letters, int(rng.integers(2, 9)))))
        if len(line) == 12:
            yield " ".join(line) + "\n"
            line = []


def train_tokenizer(n_vocab: int, seed: int = 0) -> object:
    """A byte-level BPE of exactly ``n_vocab`` ids over printable ASCII, trained here."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError as exc:
        raise ConfigError(
            "--format hf trains its tokenizer with the `tokenizers` package, which is not "
            "installed; pip install 'pytest-tokperf[hf]' (or tokenizers)"
        ) from exc
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # ASCII only: every token decodes to whole characters, one token per streamed chunk
    trainer = trainers.BpeTrainer(
        vocab_size=n_vocab, special_tokens=list(SPECIALS), show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(seed=seed), trainer=trainer)
    missing = n_vocab - tokenizer.get_vocab_size()
    if missing > 0:  # the corpus ran out of merges: plain tokens fill the table
        tokenizer.add_tokens([AddedToken(f"<|fill{i}|>", special=False) for i in range(missing)])
    if tokenizer.get_vocab_size() != n_vocab:
        raise ModelFileError(
            f"the trained tokenizer has {tokenizer.get_vocab_size()} ids, not n_vocab="
            f"{n_vocab}; pick n_vocab >= {len(SPECIALS) + 256}"
        )
    return tokenizer


def tokenizer_config(spec: ModelSpec) -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": BOS,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": spec.context_length,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def write_hf_model(spec: ModelSpec, folder: str | Path,
                   progress: Progress | None = None) -> Path:
    """Write ``spec`` as a Hugging Face folder (created; must not hold a model yet)."""
    check_hf_spec(spec)
    folder = Path(folder)
    if not folder.parent.is_dir():
        raise ModelFileError(
            f"cannot write model {str(folder)!r}: folder {str(folder.parent)!r} does not "
            f"exist; create it first"
        )
    if (folder / "model.safetensors").exists():
        raise ModelFileError(f"{str(folder)!r} already holds a model.safetensors; pick an "
                             f"empty or new folder")
    folder.mkdir(exist_ok=True)
    tokenizer = train_tokenizer(spec.n_vocab, spec.seed)
    tokenizer.save(str(folder / "tokenizer.json"))  # type: ignore[attr-defined]
    _write_json(folder / "tokenizer_config.json", tokenizer_config(spec))
    _write_json(folder / "special_tokens_map.json",
                {"bos_token": BOS, "eos_token": EOS, "pad_token": BOS})
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    _write_json(folder / "config.json", config_json(spec))
    _write_json(folder / "generation_config.json",
                {"bos_token_id": 0, "eos_token_id": 2, "do_sample": False})
    if progress is not None:
        progress(f"writing {folder / 'model.safetensors'}")
    write_safetensors(folder / "model.safetensors", _lazy_tensors(spec),
                      {"format": "pt", "tokperf_spec": spec.key})
    return folder


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def cached_hf_model(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The folder for ``spec`` in the model cache, written once (atomically, under a lock)."""
    check_hf_spec(spec)
    target = models_dir() / f"{spec.slug}-{spec.key}-hf{HF_WRITER_VERSION}"
    return cache_once(target, target / "model.safetensors",
                      lambda path: write_hf_model(spec, path, progress))
