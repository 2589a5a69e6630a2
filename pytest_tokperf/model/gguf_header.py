"""A bounded reader for a GGUF file's header: metadata keys and the tensor table.

Every length is checked before use; tensor data is never read. Refusals are
``ModelFileError`` naming the file, the key or tensor, and what is wrong.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.gguf_walk import (
    FIX,
    MAX_METADATA_STRINGS,
    MAX_NESTED_ARRAYS,
    VT,
    Cursor,
    Entry,
    GGUFField,
    Walker,
    value_type_name,
)

__all__ = ["MAX_METADATA_STRINGS", "MAX_NESTED_ARRAYS", "MAX_TENSORS", "GGUFField",
           "GGUFHeader", "GGUFTensor", "check_header", "read_header"]

HEADER_BYTES = 24
SUPPORTED_VERSIONS = (2, 3)
MAX_TENSORS = 1 << 15
"""Real models carry hundreds to a few thousand tensors."""
MAX_KEYS = 1 << 14
"""Real models carry tens of metadata keys."""
MIN_TENSOR_INFO_BYTES = 24
"""Name length (8), dimension count (4), type (4), offset (8): an empty name, no dims."""
MIN_KV_BYTES = 13
"""Key length (8), value type (4) and a one-byte value."""
DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True, slots=True)
class GGUFTensor:
    """One entry of the tensor table; ``shape`` is in ggml order (row length first)."""

    name: str
    type_name: str
    n_elements: int
    n_bytes: int
    shape: tuple[int, ...]
    data_offset: int = 0
    """Absolute file offset of the tensor's first byte."""

    @property
    def n_rows(self) -> int:
        """Rows of the matrix view: everything but the first (contiguous) dimension."""
        return self.n_elements // self.shape[0] if self.shape and self.shape[0] else 0


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """Everything before the tensor data, validated."""

    path: Path
    file_bytes: int
    version: int
    byte_order: str
    alignment: int
    data_offset: int
    fields: Mapping[str, GGUFField]
    tensors: tuple[GGUFTensor, ...]


def _stat(path: Path) -> int:
    if not path.exists() and path.is_symlink():
        raise ModelFileError(
            f"model path {str(path)!r} is a symbolic link that leads nowhere (to a missing "
            f"file, or round in a loop); point it at the .gguf file, or pass the file itself"
        )
    if not path.exists():
        raise ModelFileError(
            f"model file {str(path)!r} does not exist; pass the path of a .gguf file"
        )
    if path.is_dir():
        raise ModelFileError(
            f"model path {str(path)!r} is a directory; pass the .gguf file inside it"
        )
    if not path.is_file():
        raise ModelFileError(
            f"model path {str(path)!r} is not a regular file (a FIFO, socket or device: "
            f"reading it could block forever); pass the .gguf file itself"
        )
    try:
        return path.stat().st_size
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc


def _fixed_header(path: Path, head: bytes, size: int) -> tuple[str, int, int, int]:
    if size < HEADER_BYTES:
        raise ModelFileError(
            f"model file {str(path)!r} is {size} bytes, shorter than a GGUF header "
            f"({HEADER_BYTES} bytes): it is truncated or not a model; {FIX}"
        )
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
    if tensor_count > MAX_TENSORS or kv_count > MAX_KEYS or needed > size:
        raise ModelFileError(
            f"model file {str(path)!r} claims {tensor_count} tensors and {kv_count} "
            f"metadata keys, implausible for a file of {size} bytes (each tensor entry takes "
            f"at least {MIN_TENSOR_INFO_BYTES} bytes and each key {MIN_KV_BYTES}; at most "
            f"{MAX_TENSORS} tensors and {MAX_KEYS} keys are read): the header is corrupt "
            f"or the file is truncated; {FIX}"
        )
    return order, version, tensor_count, kv_count


def check_header(path: Path) -> tuple[int, int, int]:
    """Validate the fixed 24-byte header; returns ``(version, tensor_count, kv_count)``."""
    path = Path(path)
    size = _stat(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(HEADER_BYTES)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc
    _, version, tensor_count, kv_count = _fixed_header(path, head, size)
    return version, tensor_count, kv_count


def _alignment(cur: Cursor, fields: Mapping[str, GGUFField]) -> int:
    field = fields.get("general.alignment")
    if field is None:
        return DEFAULT_ALIGNMENT
    cur.where = "metadata key 'general.alignment'"
    value = field.value
    if field.type != VT.UINT32 or not isinstance(value, int) or isinstance(value, bool):
        cur.fail(f"it is a {value_type_name(field.type)}, not a UINT32")
    if value <= 0 or value & (value - 1):
        cur.fail(f"alignment {value} is not a power of two")
    return value


def _place(cur: Cursor, entries: list[Entry], alignment: int,
           data_offset: int) -> tuple[GGUFTensor, ...]:
    """Check each tensor's data lies inside the file; tensors with absolute offsets."""
    size = cur.size
    if entries and data_offset > size:
        cur.where = "the tensor data"
        cur.fail(f"it would start at byte {data_offset} but the file has {size} bytes")
    out: list[GGUFTensor] = []
    total = 0
    for name, type_name, n_elements, n_bytes, dims, offset in entries:
        end = data_offset + offset + n_bytes
        if offset % alignment or end > size:
            cur.where = f"tensor {name!r}"
            if offset % alignment:
                cur.fail(f"its data offset {offset} is not a multiple of the alignment "
                         f"{alignment}")
            raise ModelFileError(
                f"model file {str(cur.path)!r} is truncated: tensor {name!r} ends at "
                f"byte {end} but the file has {size} bytes; {FIX}"
            )
        total += n_bytes
        out.append(GGUFTensor(name, type_name, n_elements, n_bytes, dims, data_offset + offset))
    if total > max(0, size - data_offset):  # no tensors: no data section, even unpadded
        cur.where = "the tensor table"
        cur.fail(f"its {len(entries)} tensors claim {total} bytes but the data section holds "
                 f"{size - data_offset}: their offsets overlap")
    return tuple(out)


def read_header(path: str | Path, keep_string_arrays: Collection[str] = ()) -> GGUFHeader:
    """Read and validate a GGUF file's metadata and tensor table (no tensor data). String
    arrays named in ``keep_string_arrays`` are kept as bytes; others only counted."""
    path = Path(path)
    size = _stat(path)
    try:
        with path.open("rb") as fh:
            order, version, tensor_count, kv_count = _fixed_header(
                path, fh.read(HEADER_BYTES), size)
            cur = Cursor(fh, path, size, order)
            cur.pos = HEADER_BYTES
            walker = Walker(cur, keep_string_arrays)
            fields = walker.fields(kv_count)
            alignment = _alignment(cur, fields)
            entries = walker.tensors(tensor_count)
            data_offset = -(-cur.pos // alignment) * alignment
            tensors = _place(cur, entries, alignment, data_offset)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc
    return GGUFHeader(path=path, file_bytes=size, version=version, byte_order=order,
                      alignment=alignment, data_offset=data_offset, fields=fields,
                      tensors=tensors)
