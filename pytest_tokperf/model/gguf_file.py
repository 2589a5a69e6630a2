"""Read a GGUF file's metadata and tensor table with ``gguf.GGUFReader``.

The 24-byte fixed header is checked here before the reader sees the file, so an
absurd tensor or key count fails at once instead of making the reader loop or
allocate; reads past the end of the file raise instead of returning short arrays.
Every failure becomes a ``ModelFileError`` that names the path and the fix.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import numpy.typing as npt

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.results import ModelInfo

HEADER_BYTES = 24
MIN_TENSOR_INFO_BYTES = 24
MIN_KV_BYTES = 12
MAX_TABLE_ENTRIES = 1_000_000
"""Real models carry hundreds to a few thousand tensors and tens of keys."""
SUPPORTED_VERSIONS = (2, 3)
HASHED_TENSOR_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One entry of the tensor table; ``shape`` is in ggml order (row length first)."""

    name: str
    type_name: str
    n_elements: int
    n_bytes: int
    shape: tuple[int, ...]

    @property
    def n_rows(self) -> int:
        """Rows of the matrix view: everything but the first (contiguous) dimension."""
        if not self.shape or self.shape[0] == 0:
            return 0
        return self.n_elements // self.shape[0]


@dataclass(frozen=True, slots=True)
class GGUFModel:
    """What a GGUF file says about its architecture, plus its tensor table.

    ``head_count_kv`` holds one value per layer: files store either a scalar (the
    same for all layers) or an array (hybrid and variable-GQA models).
    """

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
    tensors: tuple[GGUFTensor, ...]

    @property
    def block_count(self) -> int:
        return self.n_layer

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

    def tensor(self, name: str) -> GGUFTensor | None:
        return next((t for t in self.tensors if t.name == name), None)


def file_type_name(value: int | None) -> str | None:
    """``general.file_type`` as llama.cpp names it: 15 -> "Q4_K_M", 0 -> "F32"."""
    if value is None:
        return None
    try:
        name = gguf.LlamaFileType(value).name
    except ValueError:
        return f"unknown({value})"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


class _BoundedReader(gguf.GGUFReader):
    """A reader whose reads past the end of the file raise instead of coming back short."""

    def _get(
        self,
        offset: int,
        dtype: npt.DTypeLike,
        count: int = 1,
        override_order: Any = None,
    ) -> npt.NDArray[Any]:
        itemsize = np.dtype(dtype).itemsize
        end = int(offset) + itemsize * int(count)
        if int(offset) < 0 or int(count) < 0 or end > self.data.size:
            raise ValueError(
                f"a read of {itemsize * int(count)} bytes at offset {int(offset)} runs past "
                f"the end of the file ({self.data.size} bytes)"
            )
        return super()._get(offset, dtype, count, override_order)


def _check_path(path: Path) -> int:
    if not path.exists():
        raise ModelFileError(
            f"model file {str(path)!r} does not exist; pass the path of a .gguf file"
        )
    if path.is_dir():
        raise ModelFileError(
            f"model path {str(path)!r} is a directory; pass the .gguf file inside it"
        )
    try:
        return path.stat().st_size
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc


def check_header(path: Path) -> tuple[int, int, int]:
    """Validate the fixed header; returns ``(version, tensor_count, kv_count)``."""
    size = _check_path(path)
    if size < HEADER_BYTES:
        raise ModelFileError(
            f"model file {str(path)!r} is {size} bytes, shorter than a GGUF header "
            f"({HEADER_BYTES} bytes): it is truncated or not a model; download or write it again"
        )
    try:
        with path.open("rb") as fh:
            head = fh.read(HEADER_BYTES)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc
    if head[:4] != b"GGUF":
        raise ModelFileError(
            f"model file {str(path)!r} is not a GGUF file (starts with {head[:4]!r}, not "
            f"b'GGUF'); convert the model with llama.cpp's convert_hf_to_gguf.py"
        )
    order = "<"
    version = struct.unpack_from("<I", head, 4)[0]
    if version & 0xFFFF == 0:
        order = ">"
        version = struct.unpack_from(">I", head, 4)[0]
    if version not in SUPPORTED_VERSIONS:
        raise ModelFileError(
            f"model file {str(path)!r} is GGUF version {version}; only versions "
            f"{SUPPORTED_VERSIONS} can be read; re-convert it with a current llama.cpp"
        )
    tensor_count, kv_count = struct.unpack_from(order + "QQ", head, 8)
    needed = HEADER_BYTES + tensor_count * MIN_TENSOR_INFO_BYTES + kv_count * MIN_KV_BYTES
    if tensor_count > MAX_TABLE_ENTRIES or kv_count > MAX_TABLE_ENTRIES or needed > size:
        raise ModelFileError(
            f"model file {str(path)!r} claims {tensor_count} tensors and {kv_count} "
            f"metadata keys, implausible for a file of {size} bytes: the header is corrupt "
            f"or the file is truncated; download or write it again"
        )
    return version, tensor_count, kv_count


def _open_reader(path: Path) -> gguf.GGUFReader:
    check_header(path)
    try:
        return _BoundedReader(path)
    except (ValueError, KeyError, IndexError, OverflowError, TypeError,
            UnicodeDecodeError, OSError, MemoryError) as exc:
        raise ModelFileError(
            f"model file {str(path)!r} is truncated or corrupt ({type(exc).__name__}: "
            f"{exc}); download or write it again"
        ) from exc


def _scalar(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    if field is None or not field.types:
        return None
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        return None
    return field.contents()


def _int(reader: gguf.GGUFReader, key: str) -> int | None:
    value = _scalar(reader, key)
    if isinstance(value, (bool, str)) or value is None:
        return None
    return int(value)


def _int_or_list(reader: gguf.GGUFReader, key: str) -> int | list[int] | None:
    field = reader.get_field(key)
    if field is None or not field.types:
        return None
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        if field.types[-1] in (gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY):
            return None
        return [int(v) for v in field.contents()]
    return _int(reader, key)


def _per_layer(value: int | list[int] | None, n_layer: int, default: int) -> tuple[int, ...]:
    if value is None:
        return (default,) * n_layer
    if isinstance(value, int):
        return (value,) * n_layer
    return tuple(value[:n_layer]) + (value[-1] if value else default,) * (n_layer - len(value))


def _layer_count(tensors: Sequence[GGUFTensor]) -> int:
    indices = [int(t.name.split(".")[1]) for t in tensors
               if t.name.startswith("blk.") and t.name.split(".")[1].isdigit()]
    return max(indices) + 1 if indices else 0


def _tensors(reader: gguf.GGUFReader, path: Path, size: int) -> tuple[GGUFTensor, ...]:
    out: list[GGUFTensor] = []
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise ModelFileError(
                f"model file {str(path)!r} is truncated: tensor {t.name!r} ends at byte "
                f"{end} but the file has {size} bytes; download or write it again"
            )
        out.append(GGUFTensor(
            name=t.name,
            type_name=gguf.GGMLQuantizationType(t.tensor_type).name,
            n_elements=int(t.n_elements),
            n_bytes=int(t.n_bytes),
            shape=tuple(int(d) for d in t.shape.tolist()),
        ))
    return tuple(out)


def load_gguf(path: str | Path) -> GGUFModel:
    """Read the architecture parameters and tensor table of a GGUF file."""
    path = Path(path)
    reader = _open_reader(path)
    size = path.stat().st_size
    tensors = _tensors(reader, path, size)
    arch_value = _scalar(reader, gguf.Keys.General.ARCHITECTURE)
    arch = str(arch_value) if arch_value is not None else "unknown"

    def key(template: str) -> str:
        return template.format(arch=arch)

    embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    n_layer = _int(reader, key(gguf.Keys.LLM.BLOCK_COUNT)) or _layer_count(tensors)
    n_embd = _int(reader, key(gguf.Keys.LLM.EMBEDDING_LENGTH)) or (embd.shape[0] if embd else 0)
    head_counts = _per_layer(_int_or_list(reader, key(gguf.Keys.Attention.HEAD_COUNT)), n_layer, 0)
    n_head = max(head_counts, default=0)
    head_count_kv = _per_layer(
        _int_or_list(reader, key(gguf.Keys.Attention.HEAD_COUNT_KV)), n_layer, n_head
    )
    head_dim = n_embd // n_head if n_head else 0
    key_length = _int(reader, key(gguf.Keys.Attention.KEY_LENGTH)) or head_dim
    value_length = _int(reader, key(gguf.Keys.Attention.VALUE_LENGTH)) or head_dim
    vocab = _int(reader, key(gguf.Keys.LLM.VOCAB_SIZE))
    tokens = reader.get_field(gguf.Keys.Tokenizer.LIST)
    if vocab is None and tokens is not None:
        vocab = len(tokens.data)
    if vocab is None and embd is not None:
        vocab = embd.n_rows
    name = _scalar(reader, gguf.Keys.General.NAME)
    return GGUFModel(
        path=path,
        file_bytes=size,
        data_offset=int(reader.data_offset),
        architecture=arch,
        name=str(name) if name is not None else None,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        head_count_kv=head_count_kv,
        key_length=key_length,
        value_length=value_length,
        context_length=_int(reader, key(gguf.Keys.LLM.CONTEXT_LENGTH)),
        vocab_size=vocab,
        expert_count=_int(reader, key(gguf.Keys.LLM.EXPERT_COUNT)) or 0,
        expert_used_count=_int(reader, key(gguf.Keys.LLM.EXPERT_USED_COUNT)) or 0,
        expert_shared_count=_int(reader, key(gguf.Keys.LLM.EXPERT_SHARED_COUNT)) or 0,
        file_type=_int(reader, gguf.Keys.General.FILE_TYPE),
        is_mla=bool(_int(reader, key(gguf.Keys.Attention.KEY_LENGTH_MLA))
                    and _int(reader, key(gguf.Keys.Attention.VALUE_LENGTH_MLA))),
        sliding_window=_int(reader, key(gguf.Keys.Attention.SLIDING_WINDOW)),
        tensors=tensors,
    )


def content_hash(model: GGUFModel) -> str:
    """sha256 of the metadata region and the first MiB of tensor data (cheap to compute)."""
    digest = hashlib.sha256()
    remaining = min(model.file_bytes, model.data_offset + HASHED_TENSOR_BYTES)
    try:
        with model.path.open("rb") as fh:
            while remaining > 0:
                chunk = fh.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                digest.update(chunk)
                remaining -= len(chunk)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(model.path)!r}: {exc}") from exc
    return digest.hexdigest()


def model_info(path: str | Path) -> ModelInfo:
    """The identity of a model file, as stored beside every measurement."""
    model = load_gguf(path)
    return ModelInfo(
        file_name=model.path.name,
        path=str(model.path.resolve()),
        file_bytes=model.file_bytes,
        content_hash=content_hash(model),
        architecture=model.architecture,
        parameter_count=model.parameter_count,
        quant_types=model.quant_types,
        file_type=model.file_type_name,
        context_length=model.context_length,
    )
