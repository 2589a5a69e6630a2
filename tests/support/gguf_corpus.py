"""The hostile-GGUF corpus: crafted files (lying array, string, key and tensor counts,
nested arrays, truncations, overflowing dims, offsets past the end, the string and tensor
caps reached exactly, a FIFO, a folder, symlinks) and well-formed ones (the 67 MB test
model, Gemma-3-4B and gpt-oss-20b shaped files with real-sized tokenizers, 95 MB of
skipped metadata), each with the answer ``tokperf predict`` must give: accepted or
refused. Large fillers are holes, so the corpus costs little disk.
``tests/model/test_gguf_corpus.py`` loads each in a fresh process and holds it to 2 s and
200 MB.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.model.gguf_header import (
    MAX_METADATA_STRINGS,
    MAX_NESTED_ARRAYS,
    MAX_TENSORS,
)
from tests.support.gguf_bytes import (
    QT,
    VT,
    array,
    gstr,
    header,
    kv,
    kv_array,
    kv_str,
    strings,
    tensor_info,
    write_file,
    write_tensors,
)
from tests.support.gguf_shapes import write_gemma3_4b, write_gpt_oss_20b

MiB = 1 << 20
ARCH = kv_str("general.architecture", "llama")
NORM = ("output_norm.weight", [8], QT.F32)


@dataclass(frozen=True)
class Case:
    """One file: its name, the answer it must get (``accepted``/``refused``), its writer."""

    name: str
    expect: str
    build: Callable[[Path], Path]


def _zeros(total: int, *kvs: bytes, n_kv: int | None = None, n_tensors: int | None = None,
           tensors: tuple[bytes, ...] = ()) -> Callable[[Path], Path]:
    """Keys then a hole up to ``total`` bytes."""
    def build(path: Path) -> Path:
        path = write_file(path, list(kvs), list(tensors), n_kv=n_kv, n_tensors=n_tensors)
        with path.open("r+b") as fh:
            fh.truncate(max(total, path.stat().st_size))
        return path
    return build


def _cut(source: Callable[[Path], Path], keep: float) -> Callable[[Path], Path]:
    """The first ``keep`` of the file: a fraction (< 1) or a byte count."""
    def build(path: Path) -> Path:
        whole = source(path.with_suffix(".whole"))
        size = int(whole.stat().st_size * keep) if keep < 1 else int(keep)
        with whole.open("rb") as src, path.open("wb") as dst:
            while size > 0:
                chunk = src.read(min(size, 8 * MiB))
                if not chunk:
                    break
                dst.write(chunk)
                size -= len(chunk)
        if whole.parent == path.parent:
            whole.unlink()
        return path
    return build


def _test_model(path: Path) -> Path:
    from pytest_tokperf.model.writer import TEST_MODEL, cached_model

    return cached_model(TEST_MODEL)


def _strings_at_cap(path: Path) -> Path:
    count = MAX_METADATA_STRINGS
    return write_tensors(path, [ARCH, kv_array("tokenizer.ggml.merges", VT.STRING, count,
                                               bytes(8 * count))], [NORM])


def _realistic_strings_at_cap(path: Path) -> Path:
    items = [f"tok{i:07d}" for i in range(MAX_METADATA_STRINGS)]
    return write_tensors(path, [ARCH, kv_array("tokenizer.ggml.tokens", VT.STRING, len(items),
                                               strings(items))], [NORM])


def _tensors_at_cap(path: Path) -> Path:
    return write_tensors(path, [ARCH], [(f"blk.{i}.w", [8], QT.F32) for i in range(MAX_TENSORS)])


def _both_caps(path: Path) -> Path:
    count = MAX_METADATA_STRINGS
    return write_tensors(path, [ARCH, kv_array("tokenizer.ggml.merges", VT.STRING, count,
                                               bytes(8 * count))],
                         [(f"blk.{i}.w", [8], QT.F32) for i in range(MAX_TENSORS)])


def _nested_at_cap(path: Path) -> Path:
    inner = array(VT.UINT8, 64, bytes(64))
    return write_tensors(path, [ARCH, kv("general.nested", VT.ARRAY,
                                         array(VT.ARRAY, MAX_NESTED_ARRAYS,
                                               inner * MAX_NESTED_ARRAYS))], [NORM])


def _overlap_at_cap(path: Path) -> Path:
    entries = [tensor_info(f"blk.{i}.w", [1024], QT.F32, 0) for i in range(MAX_TENSORS)]
    return write_file(path, [ARCH], entries, data_bytes=4096)


def _deep(path: Path) -> Path:
    value = array(VT.UINT8, 0)
    for _ in range(8):
        value = array(VT.ARRAY, 1, value)
    return write_file(path, [kv("general.deep", VT.ARRAY, value)])


def _big_scalar_string(path: Path) -> Path:
    return write_tensors(path, [ARCH, kv("tokenizer.chat_template", VT.STRING,
                                         gstr(b"x" * (95 * MiB)))], [NORM])


def _big_numeric(path: Path) -> Path:
    n = 95 * MiB
    return write_tensors(path, [ARCH, kv_array("tokenizer.ggml.token_type", VT.UINT8, n,
                                               bytes(n))], [NORM])


def _tensor_lie(path: Path) -> Path:
    return _zeros(95 * MiB, ARCH, n_tensors=MAX_TENSORS,
                  tensors=(tensor_info("output_norm.weight", [8], QT.F32, 0),))(path)


BLOCKS = "llama.block_count"
ALIGN = "general.alignment"


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _raw(data: bytes) -> Callable[[Path], Path]:
    def build(path: Path) -> Path:
        path.write_bytes(data)
        return path
    return build


def _directory(path: Path) -> Path:
    path.mkdir()
    return path


def _symlink_loop(path: Path) -> Path:
    path.symlink_to(path.name)
    return path


def _symlink_device(path: Path) -> Path:
    path.symlink_to("/dev/zero")
    return path


SMALL_KVS = [ARCH, kv(BLOCKS, VT.UINT32, struct.pack("<I", 1)),
             kv_str("general.name", "small")]
SMALL_TABLE = (tensor_info("output_norm.weight", [8], QT.F32, 0)
               + tensor_info("blk.0.w", [8], QT.F32, 32))


def _small(path: Path) -> Path:
    """Three keys, two tensors: cut at each section boundary below."""
    return write_tensors(path, SMALL_KVS, [NORM, ("blk.0.w", [8], QT.F32)])


def _entry(name: str, dims_blob: bytes, n_dims: int, qtype: int, offset: int = 0) -> bytes:
    return gstr(name) + struct.pack("<I", n_dims) + dims_blob + struct.pack("<IQ", qtype, offset)


def cleanup(path: Path) -> None:
    """Remove a case's file (or folder, or link)."""
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


def _reader_cases() -> list[Case]:
    """The reader's own checks, one file each: every section boundary, every field."""
    keys_end = 24 + sum(len(k) for k in SMALL_KVS)
    data_start = -(-(keys_end + len(SMALL_TABLE)) // 32) * 32

    def tensors(*entries: bytes, data: int = 64) -> Callable[[Path], Path]:
        return lambda p: write_file(p, [ARCH], list(entries), data_bytes=data)

    def keys(*kvs: bytes) -> Callable[[Path], Path]:
        return lambda p: write_tensors(p, [ARCH, *kvs], [NORM])

    return [
        Case("zero-length file", "refused", _raw(b"")),
        Case("23 bytes (short of the header)", "refused", _raw(b"GGUF" + bytes(19))),
        Case("magic GGML", "refused", _raw(b"GGML" + bytes(60))),
        Case("version 1", "refused", _raw(header(0, 0, version=1) + bytes(8))),
        Case("version 2^31", "refused", _raw(header(0, 0, version=2**31) + bytes(8))),
        Case("a directory named model.gguf", "refused", _directory),
        Case("symlink loop", "refused", _symlink_loop),
        Case("symlink to /dev/zero", "refused", _symlink_device),
        Case("cut after the 24-byte header", "refused", _cut(_small, 24)),
        Case("cut inside the first key", "refused", _cut(_small, 34)),
        Case("cut between the keys and the tensor table", "refused", _cut(_small, keys_end)),
        Case("cut inside the tensor table", "refused", _cut(_small, keys_end + 20)),
        Case("cut where the tensor data starts", "refused", _cut(_small, data_start)),
        Case("duplicate key general.architecture", "refused",
             keys(kv_str("general.architecture", "qwen2"))),
        Case("key with an empty name", "refused", keys(kv("", VT.UINT32, bytes(4)))),
        Case("key name not UTF-8", "refused", keys(kv(b"\xff\xfe", VT.UINT32, bytes(4)))),
        Case("value type 99", "refused",
             lambda p: write_file(p, [ARCH, kv("general.x", 99, bytes(8))])),
        Case("alignment 0", "refused", keys(kv(ALIGN, VT.UINT32, struct.pack("<I", 0)))),
        Case("alignment 3 (not a power of two)", "refused",
             keys(kv(ALIGN, VT.UINT32, struct.pack("<I", 3)))),
        Case("alignment as a string", "refused", keys(kv_str(ALIGN, "32"))),
        Case("alignment 2^31", "refused", keys(kv(ALIGN, VT.UINT32, struct.pack("<I", 2**31)))),
        Case("n_dims 5", "refused", tensors(_entry("t", struct.pack("<5Q", 1, 1, 1, 1, 8), 5,
                                                   QT.F32))),
        Case("n_dims 2^32-1", "refused", tensors(_entry("t", b"", 2**32 - 1, QT.F32))),
        Case("ggml type 9999", "refused", tensors(tensor_info("t", [8], 9999, 0))),
        Case("ggml type 4 (Q4_2, removed)", "refused", tensors(tensor_info("t", [32], 4, 0))),
        Case("dims product 2^65", "refused",
             tensors(tensor_info("t", [2**32, 2**32, 2], QT.F32, 0))),
        Case("tensor name length 2^40", "refused", tensors(gstr(b"t", 2**40) + bytes(64))),
        Case("tensor name not UTF-8", "refused", tensors(tensor_info(b"\xff\xfe", [8], QT.F32, 0))),
        Case("the same tensor twice", "refused", lambda p: write_tensors(p, [ARCH], [NORM, NORM])),
        Case("two tensors at one offset", "refused",
             tensors(tensor_info("a", [64], QT.F32, 0), tensor_info("b", [64], QT.F32, 0),
                     data=256)),
        Case("tensor offset not aligned", "refused", tensors(tensor_info("a", [8], QT.F32, 4))),
        Case("tensor data 1 byte past the end", "refused",
             tensors(tensor_info("a", [16], QT.F32, 0), data=63)),
        Case("block_count 30000 with 3 tensors", "refused",
             lambda p: write_tensors(p, [ARCH, kv(BLOCKS, VT.UINT32, struct.pack("<I", 30000))],
                                     [NORM, ("blk.0.w", [8], QT.F32), ("blk.1.w", [8], QT.F32)])),
        Case("sliding-window pattern of 2^40 bools", "refused",
             lambda p: write_file(p, [ARCH, kv_array("llama.attention.sliding_window_pattern",
                                                     VT.BOOL, 2**40)])),
        Case("OK: block_count a string (read as missing)", "accepted",
             keys(kv_str(BLOCKS, "32"))),
        Case("OK: block_count NaN (read as missing)", "accepted",
             keys(kv(BLOCKS, VT.FLOAT32, struct.pack("<f", float("nan"))))),
        Case("OK: head_count -1 (read as missing)", "accepted",
             keys(kv("llama.attention.head_count", VT.INT32, struct.pack("<i", -1)))),
        Case("OK: context_length 2^64-1", "accepted",
             keys(kv("llama.context_length", VT.UINT64, struct.pack("<Q", 2**64 - 1)))),
        Case("OK: architecture of 1 MiB", "accepted",
             lambda p: write_tensors(p, [kv_str("general.architecture", "x" * MiB)], [NORM])),
        Case("OK: 1M head counts for 2 layers", "accepted",
             lambda p: write_tensors(p, [ARCH, kv(BLOCKS, VT.UINT32, struct.pack("<I", 2)),
                                         kv_array("llama.attention.head_count", VT.UINT32,
                                                  1 << 20, bytes(4 << 20))],
                                     [NORM, ("blk.0.w", [8], QT.F32), ("blk.1.w", [8], QT.F32)])),
        Case("OK: a tensor with a zero dimension", "accepted",
             lambda p: write_tensors(p, [ARCH], [("t", [0, 8], QT.F32), NORM])),
        Case("OK: header only, block_count 80", "accepted",
             lambda p: write_file(p, [ARCH, kv(BLOCKS, VT.UINT32, struct.pack("<I", 80))])),
    ]


def corpus() -> list[Case]:
    big = 95 * MiB  # 99.6 MB
    return [
        Case("issue: u8 array 2^40 + 4 MiB", "refused",
             _zeros(4 * MiB, kv_array("general.tags", VT.UINT8, 2**40))),
        Case("u8 array 2^40 + 67 MiB", "refused",
             _zeros(67 * MiB, kv_array("general.tags", VT.UINT8, 2**40))),
        Case("u64 array 2^60 + 95 MiB", "refused",
             _zeros(big, kv_array("general.tags", VT.UINT64, 2**60))),
        Case("string array 2^40 + 95 MiB", "refused",
             _zeros(big, kv_array("tokenizer.ggml.tokens", VT.STRING, 2**40))),
        Case("12.4M empty strings in 95 MiB", "refused",
             _zeros(big, kv_array("tokenizer.ggml.tokens", VT.STRING, big // 8 - 8))),
        Case("string length 2^62 + 95 MiB", "refused",
             _zeros(big, kv("general.name", VT.STRING, gstr(b"x", 2**62)))),
        Case("3rd string of an array 2^60 long", "refused",
             _zeros(big, kv_array("tokenizer.ggml.tokens", VT.STRING, 5,
                                  strings(["a", "b"]) + gstr(b"c", 2**60)))),
        Case("key length 2^40 + 95 MiB", "refused", _zeros(big, gstr(b"general.name", 2**40))),
        Case("nested array inner 2^40 u64", "refused",
             _zeros(MiB, kv_array("general.n", VT.ARRAY, 2, array(VT.UINT8, 1, b"a")
                                  + array(VT.UINT64, 2**40)))),
        Case("8.3M empty nested arrays in 95 MiB", "refused",
             _zeros(big, kv_array("general.n", VT.ARRAY, big // 12 - 8))),
        Case("arrays nested 8 deep", "refused", _deep),
        Case("16384 keys claimed over 95 MiB of zeros", "refused",
             _zeros(big, ARCH, n_kv=16384)),
        Case(f"{MAX_TENSORS} tensors claimed over 95 MiB of zeros", "refused", _tensor_lie),
        Case("dims 2^62 x 2^62", "refused",
             _zeros(MiB, ARCH, tensors=(tensor_info("t", [2**62, 2**62], QT.F32, 0),))),
        Case("dims 2^31 x 2^20 f16 (4 PB)", "refused",
             _zeros(MiB, ARCH, tensors=(tensor_info("t", [2**31, 2**20], QT.F16, 0),))),
        Case("tensor offset 2^50", "refused",
             _zeros(MiB, ARCH, tensors=(tensor_info("t", [8], QT.F32, 2**50),))),
        Case(f"{MAX_TENSORS} overlapping tensors", "refused", _overlap_at_cap),
        Case("test model cut at 50%", "refused", _cut(_test_model, 0.5)),
        Case("test model cut in its metadata", "refused", _cut(_test_model, 0.001)),
        Case("gpt-oss tokenizer cut mid-merges", "refused",
             _cut(lambda p: write_gpt_oss_20b(p, tokens=201_088, merges=446_189), 8e6)),
        Case("block_count 2^32-1 (20 KB)", "refused",
             lambda p: write_tensors(p, [ARCH, kv(BLOCKS, VT.UINT32, struct.pack("<I", 2**32 - 1))],
                                     [NORM])),
        Case("block_count 2^60 (u64)", "refused",
             lambda p: write_tensors(p, [ARCH, kv(BLOCKS, VT.UINT64, struct.pack("<Q", 2**60))],
                                     [NORM])),
        Case("block_count 1e30 (f32)", "refused",
             lambda p: write_tensors(p, [ARCH, kv(BLOCKS, VT.FLOAT32, struct.pack("<f", 1e30))],
                                     [NORM])),
        Case("tensor blk.999999999.w", "refused",
             lambda p: write_tensors(p, [ARCH], [NORM, ("blk.999999999.w", [8], QT.F32)])),
        Case("FIFO named model.gguf", "refused", _fifo),
        *_reader_cases(),
        Case("OK: test model (67 MB)", "accepted", _test_model),
        Case("OK: gemma-3-4b shape + 262k tokens", "accepted",
             lambda p: write_gemma3_4b(p, tokens=262_144)),
        Case("OK: gpt-oss-20b shape + 201k tokens + 446k merges", "accepted",
             lambda p: write_gpt_oss_20b(p, tokens=201_088, merges=446_189)),
        Case(f"OK: {MAX_METADATA_STRINGS} empty strings (cap)", "accepted", _strings_at_cap),
        Case(f"OK: {MAX_METADATA_STRINGS} 10-byte strings (cap)", "accepted",
             _realistic_strings_at_cap),
        Case(f"OK: {MAX_TENSORS} tensors (cap)", "accepted", _tensors_at_cap),
        Case("OK: string cap + tensor cap together", "accepted", _both_caps),
        Case(f"OK: {MAX_NESTED_ARRAYS} nested u8 arrays (cap)", "accepted", _nested_at_cap),
        Case("OK: 95 MiB chat template", "accepted", _big_scalar_string),
        Case("OK: 95 MiB u8 array", "accepted", _big_numeric),
    ]
