"""Byte-level GGUF builders for crafted files: any count, length or offset, true or not.

Shared by ``tests/test_model_crafted.py`` (one refusal message per kind) and
``tests/model/test_gguf_corpus.py`` (time and peak memory over a corpus). Large fillers are
written as holes (``truncate``), so a 100 MB file costs no disk and no time.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import gguf

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType


def gstr(value: bytes | str, length: int | None = None) -> bytes:
    """A GGUF string: u64 length (``length`` may lie) and the bytes."""
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def kv(key: bytes | str, value_type: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", value_type) + payload


def kv_u32(key: str, value: int) -> bytes:
    return kv(key, VT.UINT32, struct.pack("<I", value))


def kv_str(key: str, value: str) -> bytes:
    return kv(key, VT.STRING, gstr(value))


def array(item_type: int, count: int, payload: bytes = b"") -> bytes:
    """An array value (after the ARRAY type tag): item type, count (may lie), items."""
    return struct.pack("<IQ", item_type, count) + payload


def kv_array(key: str, item_type: int, count: int, payload: bytes = b"") -> bytes:
    return kv(key, VT.ARRAY, array(item_type, count, payload))


def strings(items: Sequence[bytes | str]) -> bytes:
    return b"".join(gstr(s) for s in items)


def tensor_info(name: str | bytes, dims: Sequence[int], qtype: int, offset: int) -> bytes:
    """A tensor-table entry; dims in ggml order (row length first)."""
    return (gstr(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", qtype, offset))


def tensor_bytes(dims: Sequence[int], qtype: int) -> int:
    block, size = gguf.GGML_QUANT_SIZES[QT(qtype)]
    count = 1
    for d in dims:
        count *= d
    return count // block * size


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def write_file(path: Path, kvs: Sequence[bytes], tensors: Sequence[bytes] = (), *,
               n_tensors: int | None = None, n_kv: int | None = None, data_bytes: int = 0,
               filler: int = 0, alignment: int = 32) -> Path:
    """Header, keys, tensor table, padding, then ``data_bytes`` of tensor data (a hole).

    ``filler`` appends that many zero bytes (a hole) right after the keys, before the
    tensor table: the room a lying length can claim without running past the end.
    """
    body = header(len(tensors) if n_tensors is None else n_tensors,
                  len(kvs) if n_kv is None else n_kv) + b"".join(kvs)
    with path.open("wb") as fh:
        fh.write(body)
        fh.seek(len(body) + filler)
        table = b"".join(tensors)
        fh.write(table)
        end = fh.tell()
        if tensors and data_bytes:
            end = -(-end // alignment) * alignment + data_bytes
        fh.truncate(end)
    return path


def write_tensors(path: Path, kvs: Sequence[bytes],
                  tensors: Sequence[tuple[str, Sequence[int], int]], alignment: int = 32) -> Path:
    """A well-formed file: tensors packed in order at aligned offsets, data as a hole."""
    entries, offset = [], 0
    for name, dims, qtype in tensors:
        entries.append(tensor_info(name, dims, qtype, offset))
        offset += -(-tensor_bytes(dims, qtype) // alignment) * alignment
    return write_file(path, kvs, entries, data_bytes=max(offset, 1), alignment=alignment)
