"""Random-weight GGUF models that llama-server loads, written locally with no download."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from pytest_tokperf.paths import models_dir
from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.results import Progress
from pytest_tokperf.model.spec import (
    CHAT_TEMPLATE,
    MAIN_MODEL,
    SPECIAL_TOKENS,
    TEST_MODEL,
    ModelSpec,
    PlannedTensor,
    draft_spec_for,
    tensor_plan,
    vocab_pieces,
)

__all__ = ["MAIN_MODEL", "TEST_MODEL", "cached_model", "draft_spec_for", "write_model"]

_FILE_TYPE = {"F16": gguf.LlamaFileType.MOSTLY_F16, "F32": gguf.LlamaFileType.ALL_F32,
              "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
_CHUNK_ELEMENTS = 1 << 22


def _add_metadata(writer: gguf.GGUFWriter, spec: ModelSpec, pieces: tuple[str, ...]) -> None:
    writer.add_name(spec.name)
    writer.add_file_type(int(_FILE_TYPE[spec.tensor_type]))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    if spec.head_dim is not None:
        writer.add_key_length(spec.head_dim)
        writer.add_value_length(spec.head_dim)
    writer.add_rope_dimension_count(spec.head_size)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6 if spec.architecture == "gemma" else 1e-5)
    writer.add_vocab_size(spec.n_vocab)
    if spec.expert_count:
        writer.add_expert_count(spec.expert_count)
        writer.add_expert_used_count(spec.expert_used_count)
        writer.add_expert_feed_forward_length(spec.n_ff)
        if spec.architecture == "qwen2moe":
            writer.add_expert_shared_feed_forward_length(spec.n_ff)
    n_fixed = len(SPECIAL_TOKENS) + 256
    n_filler = len(pieces) - n_fixed
    # <0xXX> as NORMAL tokens: output stays valid UTF-8, which llama-server must stream
    types = ([gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
             + [gguf.TokenType.NORMAL] * (256 + n_filler))
    writer.add_chat_template(CHAT_TEMPLATE)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(pieces))
    writer.add_token_scores([0.0] * n_fixed + [-float(i) for i in range(n_filler)])
    writer.add_token_types([int(t) for t in types])
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def _fill(t: PlannedTensor, rng: np.random.Generator) -> np.ndarray:
    """The tensor's stored bytes as an array, generated a few MB at a time."""
    if t.init != "normal":
        return (np.ones if t.init == "ones" else np.zeros)(t.shape, dtype=np.float32)
    cols = t.shape[-1]
    rows = t.n_elements // cols
    quantized = t.type_name == "Q8_0"
    if quantized:
        out = np.empty((rows, t.n_bytes // rows), dtype=np.uint8)
    else:
        out = np.empty((rows, cols), dtype=np.float16 if t.type_name == "F16" else np.float32)
    step = max(1, _CHUNK_ELEMENTS // cols)
    for start in range(0, rows, step):
        chunk = rng.standard_normal((min(step, rows - start), cols), dtype=np.float32)
        chunk *= 0.02
        stop = start + len(chunk)
        if quantized:
            out[start:stop] = gguf.quants.quantize(chunk, gguf.GGMLQuantizationType.Q8_0)
        else:
            out[start:stop] = chunk
    return out


def write_model(spec: ModelSpec, path: str | Path, progress: Progress | None = None) -> Path:
    """Write ``spec`` to ``path`` as a GGUF file, one tensor at a time."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ModelFileError(
            f"cannot write model {str(path)!r}: folder {str(path.parent)!r} does not exist; "
            f"create it first"
        )
    plan = tensor_plan(spec)
    writer = gguf.GGUFWriter(path, spec.architecture)
    try:
        _add_metadata(writer, spec, vocab_pieces(spec.n_vocab))
        for t in plan:
            dtype = np.float16 if t.type_name == "F16" else np.float32
            writer.add_tensor_info(t.name, t.shape, np.dtype(dtype), t.n_bytes,
                                   raw_dtype=gguf.GGMLQuantizationType[t.type_name])
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for index, t in enumerate(plan):
            writer.write_tensor_data(_fill(t, np.random.default_rng([spec.seed, index])))
            if progress is not None and t.n_bytes >= 1 << 24:
                progress(f"wrote {t.name} ({t.n_bytes / 1e6:.0f} MB)")
    except BaseException:
        writer.close()
        path.unlink(missing_ok=True)
        raise
    writer.close()
    return path


def cache_once(target: Path, made: Path, write: Callable[[Path], object]) -> Path:
    """``target`` in the model cache, made once: ``write`` fills a scratch path beside it,
    moved in whole under a lock; ``made`` is the file that exists once ``target`` does."""
    folder = target.parent
    if made.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{target.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if made.is_file():
                return target
            scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=folder))
            try:
                write(scratch / target.name)
                shutil.rmtree(target, ignore_errors=True)
                os.replace(scratch / target.name, target)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    except OSError as exc:
        raise ModelFileError(
            f"cannot write the synthetic model to {str(folder)!r} ({exc}); set "
            f"PYTEST_TOKPERF_CACHE to a writable folder"
        ) from exc
    return target


def cached_model(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The file for ``spec`` in the model cache, written once (atomically, under a lock)."""
    target = models_dir() / f"{spec.slug}-{spec.key}.gguf"

    def write(path: Path) -> None:
        if progress is not None:
            progress(f"writing synthetic model {target.name} ...")
        write_model(spec, path, progress)

    return cache_once(target, target, write)
