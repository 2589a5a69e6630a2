"""A bounded reader for a GGUF file's header: metadata keys and the tensor table.

Every length in the file is checked against the bytes left before anything is read,
looped over or allocated: an array's length times the smallest size of its items, a
string's length, the tensor and key counts, each tensor's dimensions, byte size and
data offset. Reading is sequential through a 1 MiB window and never touches tensor
data, so a file of any size costs at most its metadata in time and a few MB of memory.

Walking items one by one (strings, nested arrays) is the only per-item Python work, so
their number is capped (``MAX_METADATA_STRINGS``, ``MAX_NESTED_ARRAYS``) far above what
real models hold; numeric arrays are skipped in one step unless short enough to keep.
The checks follow llama.cpp's own loader (``ggml/src/gguf.cpp``: empty and duplicate
keys, duplicate tensor names, at most 4 dimensions, element counts below 2^63, rows a
whole number of quantization blocks, a power-of-two ``general.alignment``). Every
refusal is a ``ModelFileError`` naming the file, the key or tensor, and what is wrong.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, Union

import gguf

from pytest_tokperf.errors import ModelFileError

HEADER_BYTES = 24
SUPPORTED_VERSIONS = (2, 3)
MAX_TENSORS = 1 << 15
"""Real models carry hundreds to a few thousand tensors (~7 us each to read here)."""
MAX_KEYS = 1 << 14
"""Real models carry tens of metadata keys."""
MIN_TENSOR_INFO_BYTES = 24
"""Name length (8), dimension count (4), type (4), offset (8): an empty name, no dims."""
MIN_KV_BYTES = 13
"""Key length (8), value type (4) and a one-byte value."""
MAX_METADATA_STRINGS = 1 << 21
"""Strings inside arrays, all keys together. The largest real tokenizers hold under a
million (a ~200k vocabulary plus ~450k BPE merges); each costs ~0.3 us to walk."""
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
DEFAULT_ALIGNMENT = 32
_WINDOW = 1 << 20
_FIX = "download or write it again"

_VT = gguf.GGUFValueType
_NUMERIC: dict[int, str] = {
    _VT.UINT8: "B", _VT.INT8: "b", _VT.UINT16: "H", _VT.INT16: "h", _VT.UINT32: "I",
    _VT.INT32: "i", _VT.FLOAT32: "f", _VT.BOOL: "?", _VT.UINT64: "Q", _VT.INT64: "q",
    _VT.FLOAT64: "d",
}
_MIN_ITEM_BYTES: dict[int, int] = {
    **{t: struct.calcsize("<" + f) for t, f in _NUMERIC.items()},
    _VT.STRING: 8,
    _VT.ARRAY: 12,
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


def _type_name(value_type: int) -> str:
    return _VT(value_type).name


@dataclass(frozen=True, slots=True)
class GGUFField:
    """One metadata key. ``value`` holds scalars (strings up to ``KEPT_STRING_BYTES``),
    numeric arrays up to ``KEPT_ARRAY_ITEMS`` items, string arrays that were asked for
    (as bytes); anything else is ``None`` and only its type and ``count`` are known."""

    key: str
    type: int
    count: int
    value: FieldValue
    item_type: int | None = None

    @property
    def is_array(self) -> bool:
        return self.type == _VT.ARRAY


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
        if not self.shape or self.shape[0] == 0:
            return 0
        return self.n_elements // self.shape[0]


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


def _fixed_header(path: Path, head: bytes, size: int) -> tuple[str, int, int, int]:
    if size < HEADER_BYTES:
        raise ModelFileError(
            f"model file {str(path)!r} is {size} bytes, shorter than a GGUF header "
            f"({HEADER_BYTES} bytes): it is truncated or not a model; {_FIX}"
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
            f"or the file is truncated; {_FIX}"
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


class _Cursor:
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
            f"{problem}; {_FIX}"
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
        self.need(fmt.size, what)
        i = self.window(fmt.size)
        self.pos += fmt.size
        return fmt.unpack_from(self.buf, i)

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


class _Walker:
    """The metadata and tensor-table pass over one file."""

    def __init__(self, cur: _Cursor, keep_string_arrays: Collection[str]) -> None:
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
        if value_type == _VT.STRING:
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
            cur.fail(f"an array of {count} {_type_name(item_type)} items needs at least "
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
        if item_type == _VT.STRING:
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
            if value_type == _VT.ARRAY:
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
        type_name, n_elements, n_bytes = _check_tensor(cur, type_id, dims)
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


def _check_tensor(cur: _Cursor, type_id: int, dims: tuple[int, ...]) -> tuple[str, int, int]:
    """(type name, elements, bytes) of a tensor, or the refusal that says what is wrong."""
    info = _TYPE_SIZES.get(type_id)
    if info is None:
        cur.fail(f"type {type_id} is not a ggml tensor type (gguf {_gguf_version()} knows "
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


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:  # pragma: no cover - gguf is a dependency
        return "?"


def _alignment(cur: _Cursor, fields: Mapping[str, GGUFField]) -> int:
    field = fields.get("general.alignment")
    if field is None:
        return DEFAULT_ALIGNMENT
    cur.where = "metadata key 'general.alignment'"
    value = field.value
    if field.type != _VT.UINT32 or not isinstance(value, int) or isinstance(value, bool):
        cur.fail(f"it is a {_type_name(field.type)}, not a UINT32")
    if value <= 0 or value & (value - 1):
        cur.fail(f"alignment {value} is not a power of two")
    return value


def _place(cur: _Cursor, entries: list[Entry], alignment: int,
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
                f"byte {end} but the file has {size} bytes; {_FIX}"
            )
        total += n_bytes
        out.append(GGUFTensor(name, type_name, n_elements, n_bytes, dims, data_offset + offset))
    if total > size - data_offset:
        cur.where = "the tensor table"
        cur.fail(f"its {len(entries)} tensors claim {total} bytes but the data section holds "
                 f"{size - data_offset}: their offsets overlap")
    return tuple(out)


def read_header(path: str | Path, keep_string_arrays: Collection[str] = ()) -> GGUFHeader:
    """Read and validate a GGUF file's metadata and tensor table (no tensor data).

    String arrays named in ``keep_string_arrays`` (e.g. ``tokenizer.ggml.tokens``) are
    kept as bytes; all others are walked and counted only.
    """
    path = Path(path)
    size = _stat(path)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc
    with fh:
        try:
            head = fh.read(HEADER_BYTES)
        except OSError as exc:
            raise ModelFileError(f"cannot read model file {str(path)!r}: {exc}") from exc
        order, version, tensor_count, kv_count = _fixed_header(path, head, size)
        cur = _Cursor(fh, path, size, order)
        cur.pos = HEADER_BYTES
        walker = _Walker(cur, keep_string_arrays)
        fields = walker.fields(kv_count)
        alignment = _alignment(cur, fields)
        entries = walker.tensors(tensor_count)
        data_offset = -(-cur.pos // alignment) * alignment
        tensors = _place(cur, entries, alignment, data_offset)
    return GGUFHeader(path=path, file_bytes=size, version=version, byte_order=order,
                      alignment=alignment, data_offset=data_offset, fields=fields,
                      tensors=tensors)
