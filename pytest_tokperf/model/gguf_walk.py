"""The low-level pass over a GGUF header (``gguf_header.read_header`` is the entry point)."""

from __future__ import annotations

import math
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, Union

import gguf

from pytest_tokperf.errors import ModelFileError

MAX_METADATA_STRINGS = 1 << 21
"""Strings inside arrays, all keys together (real tokenizers hold under a million)."""
MAX_NESTED_ARRAYS = 1 << 16
"""Arrays inside arrays (llama.cpp refuses any; gguf-py can write them)."""
MAX_NESTING = 4
MAX_KEY_BYTES = 1 << 16
MAX_TENSOR_NAME_BYTES = 1 << 10
"""llama.cpp allows 63 bytes; other ggml programs allow more."""
MAX_DIMS = 4
KEPT_STRING_BYTES = 1 << 12
"""Scalar strings up to this long are decoded; longer ones (chat templates) are skipped."""
KEPT_ARRAY_ITEMS = 1 << 12
"""Numeric arrays up to this long (per-layer values) are read; longer ones are skipped."""
KEPT_NUMBERS = 1 << 16
"""At most this many array numbers are kept for the whole file."""
INT64_MAX = (1 << 63) - 1
_WINDOW = 1 << 20
FIX = "download or write it again"

VT = gguf.GGUFValueType
_NUMERIC: dict[int, str] = {
    VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I",
    VT.INT32: "i", VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q",
    VT.FLOAT64: "d",
}
_MIN_ITEM_BYTES: dict[int, int] = {
    **{t: struct.calcsize("<" + f) for t, f in _NUMERIC.items()},
    VT.STRING: 8,
    VT.ARRAY: 12,
}

_TYPE_SIZES: dict[int, tuple[int, int, str]] = {
    int(t): (block, size, t.name) for t, (block, size) in gguf.GGML_QUANT_SIZES.items()
}
"""ggml tensor type id -> (elements per block, bytes per block, name)."""
_ENTRY_MAX = 8 + MAX_TENSOR_NAME_BYTES + 4 + 8 * MAX_DIMS + 4 + 8

Scalar = Union[int, float, bool, str]
Where = Union[str, tuple[str, int, int, Union[str, None]]]
"""A place in the file: words, or (kind, index, count, name) formatted only on failure."""
FieldValue = Union[Scalar, tuple[Union[int, float, bool], ...], tuple[bytes, ...], None]
Entry = tuple[str, str, int, int, tuple[int, ...], int]
"""A tensor-table entry: name, type name, elements, bytes, dims, offset in the data."""


def value_type_name(value_type: int) -> str:
    return VT(value_type).name


@dataclass(frozen=True, slots=True)
class GGUFField:
    """One metadata key; ``value`` None when not kept (its type and ``count`` only)."""

    key: str
    type: int
    count: int
    value: FieldValue
    item_type: int | None = None

    @property
    def is_array(self) -> bool:
        return self.type == VT.ARRAY


class Cursor:
    """Sequential reads through a window of the file; every read checked against its end."""

    def __init__(self, fh: BinaryIO, path: Path, size: int, order: str) -> None:
        self.fh, self.path, self.size = fh, path, size
        self.buf, self.base, self.pos = b"", 0, 0
        self.where: Where = "the header"
        self.u32_st = struct.Struct(order + "I")
        self.u64_st = struct.Struct(order + "Q")
        self.scalar_st = {t: struct.Struct(order + f) for t, f in _NUMERIC.items()}
        self.dims_st = [struct.Struct(f"{order}{n}Q") for n in range(MAX_DIMS + 1)]
        self.order = order

    def place(self) -> str:
        if isinstance(self.where, str):
            return self.where
        kind, index, count, name = self.where
        if name is None:
            return f"{kind} {index + 1} of {count}"
        return f"{kind} {name!r} ({index + 1} of {count})"

    def fail(self, problem: str) -> NoReturn:
        raise ModelFileError(
            f"model file {str(self.path)!r} is truncated or corrupt: {self.place()}: "
            f"{problem}; {FIX}"
        )

    def need(self, n: int, what: str) -> None:
        left = self.size - self.pos
        if n > left:
            self.fail(f"{what} needs {n} bytes but only {left} are left in the file "
                      f"(of {self.size}, at byte {self.pos})")

    def window(self, n: int) -> int:
        """Index in ``buf`` of ``pos``, with at least ``n`` bytes after it."""
        i = self.pos - self.base
        if i < 0 or i + n > len(self.buf):
            try:
                self.fh.seek(self.pos)
                self.buf = self.fh.read(max(n, _WINDOW))
            except OSError as exc:
                raise ModelFileError(f"cannot read model file {str(self.path)!r}: {exc}") from exc
            self.base, i = self.pos, 0
            if len(self.buf) < n:
                self.fail(f"the file ended at byte {self.pos + len(self.buf)} although it "
                          f"is {self.size} bytes (was it changed while being read?)")
        return i

    def read(self, n: int, what: str) -> bytes:
        self.need(n, what)
        i = self.window(n)
        self.pos += n
        return self.buf[i:i + n]

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[Any, ...]:
        return fmt.unpack(self.read(fmt.size, what))

    def u32(self, what: str) -> int:
        return int(self.unpack(self.u32_st, what)[0])

    def u64(self, what: str) -> int:
        return int(self.unpack(self.u64_st, what)[0])

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def text(self, limit: int, what: str) -> str:
        n = self.u64(f"the length of {what}")
        if n > limit:
            self.need(n, f"{what} of {n} bytes")
            self.fail(f"{what} is {n} bytes long, more than the {limit} allowed")
        raw = self.read(n, f"{what} of {n} bytes")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"{what} is not valid UTF-8 ({raw[:40]!r})")

    def walk_strings(self, count: int, keep: list[bytes] | None) -> None:
        """Step over ``count`` length-prefixed strings, keeping their bytes if asked."""
        unpack = self.u64_st.unpack_from
        left = count
        while left:
            i = self.window(8)
            buf, end, base = self.buf, len(self.buf), self.base
            while left and i + 8 <= end:
                j = i + 8 + unpack(buf, i)[0]
                if j > end:
                    break
                if keep is not None:
                    keep.append(buf[i + 8:j])
                i = j
                left -= 1
            self.pos = base + i
            if not left:
                return
            if i + 8 <= end:  # a string longer than the window: read it the slow way
                what = f"string {count - left + 1} of {count}"
                n = self.u64(f"the length of {what}")
                if keep is not None:
                    if n > KEPT_STRING_BYTES:
                        self.need(n, f"{what} ({n} bytes)")
                        self.fail(f"{what} is {n} bytes long, more than the "
                                  f"{KEPT_STRING_BYTES} a token may have")
                    keep.append(self.read(n, f"{what} ({n} bytes)"))
                else:
                    self.skip(n, f"{what} ({n} bytes)")
                left -= 1


class Walker:
    """The metadata and tensor-table pass over one file."""

    def __init__(self, cur: Cursor, keep_string_arrays: Collection[str]) -> None:
        self.cur = cur
        self.keep_string_arrays = keep_string_arrays
        self.strings = 0
        self.nested = 0
        self.kept_numbers = 0

    def value_type(self, what: str) -> int:
        value_type = self.cur.u32(what)
        if value_type not in _MIN_ITEM_BYTES:
            self.cur.fail(f"{what} is {value_type}, not a GGUF value type (0-12)")
        return value_type

    def scalar(self, value_type: int) -> FieldValue:
        cur = self.cur
        if value_type == VT.STRING:
            n = cur.u64("the string length")
            if n > KEPT_STRING_BYTES:
                cur.skip(n, f"a string of {n} bytes")
                return None
            return cur.read(n, f"a string of {n} bytes").decode("utf-8", errors="replace")
        value: FieldValue = cur.unpack(cur.scalar_st[value_type], "the value")[0]
        return value

    def array(self, key: str, depth: int) -> tuple[int, int, FieldValue]:
        cur = self.cur
        item_type = self.value_type("the array's item type")
        count = cur.u64("the array length")
        smallest = _MIN_ITEM_BYTES[item_type]
        left = cur.size - cur.pos
        if count * smallest > left:
            cur.fail(f"an array of {count} {value_type_name(item_type)} items needs at least "
                     f"{count * smallest} bytes but only {left} are left in the file "
                     f"(of {cur.size})")
        if item_type in _NUMERIC:
            n_bytes = count * smallest
            if count <= KEPT_ARRAY_ITEMS and self.kept_numbers + count <= KEPT_NUMBERS:
                self.kept_numbers += count
                fmt = struct.Struct(f"{cur.order}{count}{_NUMERIC[item_type]}")
                return item_type, count, cur.unpack(fmt, f"{count} array items")
            cur.skip(n_bytes, f"{count} array items")
            return item_type, count, None
        if item_type == VT.STRING:
            self.strings += count
            if self.strings > MAX_METADATA_STRINGS:
                cur.fail(f"the metadata holds more than {MAX_METADATA_STRINGS} strings in "
                         f"arrays (this array adds {count}); real models hold under a "
                         f"million, so the file is refused rather than walked")
            keep: list[bytes] | None = [] if depth == 0 and key in self.keep_string_arrays else None
            cur.walk_strings(count, keep)
            return item_type, count, tuple(keep) if keep is not None else None
        if depth + 1 >= MAX_NESTING:
            cur.fail(f"arrays are nested more than {MAX_NESTING} deep")
        self.nested += count
        if self.nested > MAX_NESTED_ARRAYS:
            cur.fail(f"the metadata holds more than {MAX_NESTED_ARRAYS} arrays inside arrays "
                     f"(this array adds {count}; llama.cpp refuses nested arrays altogether)")
        where = cur.where
        outer = cur.place()
        for index in range(count):
            cur.where = f"{outer}, item {index} of {count}"
            self.array(key, depth + 1)
        cur.where = where
        return item_type, count, None

    def fields(self, kv_count: int) -> dict[str, GGUFField]:
        cur = self.cur
        out: dict[str, GGUFField] = {}
        for index in range(kv_count):
            cur.where = ("metadata key", index, kv_count, None)
            key = cur.text(MAX_KEY_BYTES, "the key name")
            if not key:
                cur.fail("the key name is empty")
            cur.where = ("metadata key", index, kv_count, key)
            if key in out:
                cur.fail("the key appears twice")
            value_type = self.value_type("the value type")
            if value_type == VT.ARRAY:
                item_type, count, value = self.array(key, 0)
                out[key] = GGUFField(key, value_type, count, value, item_type)
            else:
                out[key] = GGUFField(key, value_type, 1, self.scalar(value_type))
        return out

    def tensor(self, index: int, count: int, seen: set[str]) -> Entry:
        """One tensor-table entry read field by field: the precise refusal on any lie."""
        cur = self.cur
        cur.where = ("tensor entry", index, count, None)
        name = cur.text(MAX_TENSOR_NAME_BYTES, "the tensor name")
        cur.where = ("tensor", index, count, name)
        if name in seen:
            cur.fail("a second tensor has the same name")
        seen.add(name)
        n_dims = cur.u32("the dimension count")
        if n_dims > MAX_DIMS:
            cur.fail(f"it has {n_dims} dimensions; ggml tensors have at most {MAX_DIMS}")
        dims = tuple(int(d) for d in cur.unpack(cur.dims_st[n_dims], f"{n_dims} dimensions"))
        type_id = cur.u32("the tensor type")
        offset = cur.u64("the data offset")
        type_name, n_elements, n_bytes = check_tensor(cur, type_id, dims)
        return name, type_name, n_elements, n_bytes, dims, offset

    def fast_tensor(self, seen: set[str]) -> Entry | None:
        """One entry parsed in place when every field is plausible, else None (no move)."""
        cur = self.cur
        i = cur.window(min(_ENTRY_MAX, cur.size - cur.pos))
        buf, end = cur.buf, len(cur.buf)
        if i + 8 > end:
            return None
        length = cur.u64_st.unpack_from(buf, i)[0]
        j = i + 8 + length
        if length > MAX_TENSOR_NAME_BYTES or j + 4 > end:
            return None
        n_dims = cur.u32_st.unpack_from(buf, j)[0]
        k = j + 4 + 8 * n_dims
        if n_dims > MAX_DIMS or k + 12 > end:
            return None
        try:
            name = buf[i + 8:j].decode("utf-8")
        except UnicodeDecodeError:
            return None
        dims: tuple[int, ...] = cur.dims_st[n_dims].unpack_from(buf, j + 4)
        info = _TYPE_SIZES.get(cur.u32_st.unpack_from(buf, k)[0])
        if name in seen or info is None or (dims and dims[0] % info[0]):
            return None
        n_elements = math.prod(dims)
        n_bytes = n_elements // info[0] * info[1]
        if n_elements > INT64_MAX or max(dims, default=0) > INT64_MAX or n_bytes > cur.size:
            return None
        seen.add(name)
        cur.pos = cur.base + k + 12
        return name, info[2], n_elements, n_bytes, dims, cur.u64_st.unpack_from(buf, k + 4)[0]

    def tensors(self, count: int) -> list[Entry]:
        seen: set[str] = set()
        out: list[Entry] = []
        for index in range(count):
            entry = self.fast_tensor(seen)
            out.append(entry if entry is not None else self.tensor(index, count, seen))
        return out


def check_tensor(cur: Cursor, type_id: int, dims: tuple[int, ...]) -> tuple[str, int, int]:
    """(type name, elements, bytes) of a tensor, or the refusal that says what is wrong."""
    info = _TYPE_SIZES.get(type_id)
    if info is None:
        cur.fail(f"type {type_id} is not a ggml tensor type (gguf {gguf_version()} knows "
                 f"{len(gguf.GGML_QUANT_SIZES)}); update the gguf package or re-convert")
    block, type_size, type_name = info
    if any(d > INT64_MAX for d in dims) or math.prod(dims) > INT64_MAX:
        cur.fail(f"shape {list(dims)} has more than 2^63 elements (dimensions overflow)")
    n_elements = math.prod(dims)
    if dims and dims[0] % block:
        cur.fail(f"rows of {dims[0]} {type_name} elements are not a whole number of "
                 f"{block}-element blocks")
    n_bytes = n_elements // block * type_size
    if n_bytes > cur.size:
        cur.fail(f"shape {list(dims)} in {type_name} is {n_bytes} bytes, more than the whole "
                 f"file ({cur.size} bytes)")
    return type_name, n_elements, n_bytes


def gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:  # pragma: no cover - gguf is a dependency
        return "?"
