"""One parse of a GGUF file: architecture, attention layout, tensor table and identity.

Every failure is a ``ModelFileError`` naming the path, the key and the fix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.attention import SlidingWindow, resolve
from pytest_tokperf.model.gguf_header import (
    MAX_TENSORS,
    MIN_TENSOR_INFO_BYTES,
    GGUFField,
    GGUFHeader,
    GGUFTensor,
    check_header,
    read_header,
)
from pytest_tokperf.results import ModelInfo

__all__ = ["GGUFModel", "GGUFTensor", "check_header", "file_type_name", "load_gguf",
           "model_info"]

HASHED_TENSOR_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class GGUFModel:
    """A GGUF file's architecture and tensor table (``head_count_kv`` per layer)."""

    path: Path
    file_bytes: int
    data_offset: int
    architecture: str
    name: str | None
    n_layer: int
    n_embd: int
    n_head: int
    head_count_kv: tuple[int, ...]
    key_length: int
    value_length: int
    context_length: int | None
    vocab_size: int | None
    expert_count: int
    expert_used_count: int
    expert_shared_count: int
    file_type: int | None
    is_mla: bool
    """Multi-head latent attention (DeepSeek-2 style): the cache holds K only."""
    sliding_window: int | None
    """Window of the windowed layers in tokens (the file's key, or llama.cpp's default)."""
    tensors: tuple[GGUFTensor, ...]
    swa_layers: tuple[bool, ...] = ()
    """Per layer: True when it reads at most ``sliding_window`` KV positions."""
    swa_source: str = "no sliding window"
    """Where the layer pattern came from: a key of the file or llama.cpp's rule."""
    swa_notes: tuple[str, ...] = ()
    """Assumptions about the window; reported once the depth exceeds it."""
    key_length_swa: int | None = None
    value_length_swa: int | None = None
    content_hash: str | None = None
    """sha256 of the metadata and the first MiB of tensor data."""

    @property
    def n_head_kv(self) -> int:
        return max(self.head_count_kv, default=0)

    @property
    def parameter_count(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def quant_types(self) -> tuple[str, ...]:
        return tuple(sorted({t.type_name for t in self.tensors}))

    @property
    def file_type_name(self) -> str | None:
        return file_type_name(self.file_type)

    @property
    def info(self) -> ModelInfo:
        """The identity of the file, as stored beside every measurement."""
        return ModelInfo(
            file_name=self.path.name,
            path=str(self.path.resolve()),
            file_bytes=self.file_bytes,
            content_hash=self.content_hash,
            architecture=self.architecture,
            parameter_count=self.parameter_count,
            quant_types=self.quant_types,
            file_type=self.file_type_name,
            context_length=self.context_length,
        )

    def tensor(self, name: str) -> GGUFTensor | None:
        return next((t for t in self.tensors if t.name == name), None)

    def is_windowed(self, layer: int) -> bool:
        return bool(self.sliding_window) and layer < len(self.swa_layers) and self.swa_layers[layer]


def file_type_name(value: int | None) -> str | None:
    """``general.file_type`` as llama.cpp names it: 15 -> "Q4_K_M", 0 -> "F32"."""
    if value is None:
        return None
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"unknown({value})"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


class _Keys:
    """Typed lookups into a header's fields; wrong types read as missing."""

    def __init__(self, fields: Mapping[str, GGUFField], arch: str) -> None:
        self.fields, self.arch = fields, arch

    def name(self, template: str) -> str:
        return template.format(arch=self.arch)

    def field(self, template: str) -> GGUFField | None:
        return self.fields.get(self.name(template))

    def number(self, template: str) -> int | None:
        field = self.field(template)
        value = field.value if field is not None and not field.is_array else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return int(value) if float(value).is_integer() and value >= 0 else None

    def text(self, template: str) -> str | None:
        field = self.field(template)
        value = field.value if field is not None else None
        return value if isinstance(value, str) else None

    def numbers(self, template: str) -> int | list[int] | None:
        """A scalar, or a numeric array that was small enough to keep."""
        field = self.field(template)
        if field is None or not field.is_array:
            return self.number(template)
        if not isinstance(field.value, tuple):
            return None
        values = [v for v in field.value if isinstance(v, (int, float))]
        if len(values) != len(field.value) or any(not float(v).is_integer() or v < 0
                                                   for v in values):
            return None
        return [int(v) for v in values]


def _per_layer(value: int | list[int] | None, n_layer: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * n_layer
    if isinstance(value, int):
        return (value,) * n_layer
    return tuple(value[:n_layer]) + (value[-1] if value else default,) * (n_layer - len(value))


MAX_LAYERS = MAX_TENSORS
"""No more layers than tensors are read (models have a few hundred blocks)."""


def _checked_layers(header: GGUFHeader, keys: _Keys, tensors: Sequence[GGUFTensor]) -> int:
    """The block count, refused above what the file can hold (at least one tensor a layer)
    before anything is built per layer."""
    stated = keys.number(gguf.Keys.LLM.BLOCK_COUNT)
    n_layer = stated or _layer_count(tensors)
    header_bytes = min(header.data_offset, header.file_bytes)
    bound = (min(MAX_LAYERS, max(len(tensors), header_bytes // MIN_TENSOR_INFO_BYTES))
             if tensors else MAX_LAYERS)
    if n_layer > bound:
        source = (f"its key {keys.name(gguf.Keys.LLM.BLOCK_COUNT)!r}" if stated
                  else "its tensor names (blk.N.*)")
        why = (f"each layer has at least one tensor; it lists {len(tensors)}, and its "
               f"{header_bytes}-byte header could list at most "
               f"{header_bytes // MIN_TENSOR_INFO_BYTES} tensor entries of "
               f"{MIN_TENSOR_INFO_BYTES} bytes" if tensors else "it lists no tensors")
        raise ModelFileError(
            f"model file {str(header.path)!r} claims {n_layer} layers by {source}, more "
            f"than the file can hold ({bound}: {why}; at most {MAX_LAYERS} layers are "
            f"read): the header is corrupt or crafted; download or convert the model again")
    return n_layer


def _layer_count(tensors: Sequence[GGUFTensor]) -> int:
    digits = [t.name.split(".")[1] for t in tensors
              if t.name.startswith("blk.") and t.name.split(".")[1].isdecimal()]
    indices = [int(d) if len(d) <= 9 else 10**9 for d in digits]  # int() of 5000 digits raises
    return max(indices) + 1 if indices else 0


def _hash(path: Path, n_bytes: int) -> str:
    digest = hashlib.sha256()
    remaining = n_bytes
    try:
        with path.open("rb") as fh:
            while remaining > 0:
                chunk = fh.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                digest.update(chunk)
                remaining -= len(chunk)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc
    return digest.hexdigest()


def _sliding_window(keys: _Keys, n_layer: int) -> SlidingWindow:
    pattern_key = keys.name(gguf.Keys.Attention.SLIDING_WINDOW_PATTERN)
    field = keys.field(gguf.Keys.Attention.SLIDING_WINDOW_PATTERN)
    pattern: int | Sequence[int | bool] | None = None
    if field is not None and field.is_array and isinstance(field.value, tuple):
        pattern = [v for v in field.value if isinstance(v, (int, bool))]
    elif field is not None:
        pattern = keys.number(gguf.Keys.Attention.SLIDING_WINDOW_PATTERN)
    return resolve(keys.arch, n_layer, keys.number(gguf.Keys.Attention.SLIDING_WINDOW), pattern,
                   pattern_key, keys.name(gguf.Keys.Attention.SLIDING_WINDOW))


def model_from_header(header: GGUFHeader) -> GGUFModel:
    fields, tensors = header.fields, header.tensors
    arch_field = fields.get(gguf.Keys.General.ARCHITECTURE)
    arch = arch_field.value if arch_field is not None and isinstance(arch_field.value, str) \
        else "unknown"
    keys = _Keys(fields, arch)
    embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    n_layer = _checked_layers(header, keys, tensors)
    n_embd = keys.number(gguf.Keys.LLM.EMBEDDING_LENGTH) or (embd.shape[0] if embd else 0)
    head_counts = _per_layer(keys.numbers(gguf.Keys.Attention.HEAD_COUNT), n_layer, 0)
    n_head = max(head_counts, default=0)
    head_count_kv = _per_layer(keys.numbers(gguf.Keys.Attention.HEAD_COUNT_KV), n_layer, n_head)
    head_dim = n_embd // n_head if n_head else 0
    key_length = keys.number(gguf.Keys.Attention.KEY_LENGTH) or head_dim
    value_length = keys.number(gguf.Keys.Attention.VALUE_LENGTH) or head_dim
    vocab = keys.number(gguf.Keys.LLM.VOCAB_SIZE)
    tokens = fields.get(gguf.Keys.Tokenizer.LIST)
    if vocab is None and tokens is not None and tokens.is_array:
        vocab = tokens.count
    if vocab is None and embd is not None:
        vocab = embd.n_rows
    window = _sliding_window(keys, n_layer)
    digest = _hash(header.path, min(header.file_bytes, header.data_offset + HASHED_TENSOR_BYTES))
    return GGUFModel(
        path=header.path, file_bytes=header.file_bytes, data_offset=header.data_offset,
        architecture=arch, name=keys.text(gguf.Keys.General.NAME),
        n_layer=n_layer, n_embd=n_embd, n_head=n_head, head_count_kv=head_count_kv,
        key_length=key_length, value_length=value_length,
        context_length=keys.number(gguf.Keys.LLM.CONTEXT_LENGTH), vocab_size=vocab,
        expert_count=keys.number(gguf.Keys.LLM.EXPERT_COUNT) or 0,
        expert_used_count=keys.number(gguf.Keys.LLM.EXPERT_USED_COUNT) or 0,
        expert_shared_count=keys.number(gguf.Keys.LLM.EXPERT_SHARED_COUNT) or 0,
        file_type=keys.number(gguf.Keys.General.FILE_TYPE),
        is_mla=bool(keys.number(gguf.Keys.Attention.KEY_LENGTH_MLA)
                    and keys.number(gguf.Keys.Attention.VALUE_LENGTH_MLA)),
        tensors=tensors, sliding_window=window.window, swa_layers=window.layers,
        swa_source=window.source, swa_notes=window.notes,
        key_length_swa=keys.number(gguf.Keys.Attention.KEY_LENGTH_SWA),
        value_length_swa=keys.number(gguf.Keys.Attention.VALUE_LENGTH_SWA),
        content_hash=digest,
    )


def load_gguf(path: str | Path) -> GGUFModel:
    """Parse a GGUF file once: architecture, attention layout, tensor table and hash."""
    return model_from_header(read_header(Path(path)))


def model_info(model: str | Path | GGUFModel) -> ModelInfo:
    """The identity of a model file (pass a loaded ``GGUFModel`` to avoid a second parse)."""
    if not isinstance(model, GGUFModel):
        model = load_gguf(model)
    return model.info
