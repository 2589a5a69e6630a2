"""llama-bench's own output (``-o json``, ``jsonl``, ``csv``, ``sql``, ``md``) read as one
``LlamaBenchRecord`` per test row, under llama-bench's field names and types; unknown fields
kept as they came (the markdown table carries fewer: docs/expected-speed.md)."""

from __future__ import annotations

import csv
import io
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_tokperf.errors import StorageError
from pytest_tokperf.jsontext import loads
from pytest_tokperf.safe_files import MAX_TEXT_BYTES, FileRefused, read_regular

LlamaBenchForm = Literal["json", "jsonl", "csv", "sql", "md"]

INT_FIELDS = frozenset({
    "build_number", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads",
    "poll", "n_gpu_layers", "n_cpu_moe", "main_gpu", "n_prompt", "n_gen", "n_depth",
    "avg_ns", "stddev_ns", "no_op_offload", "fit_target", "fit_min_ctx", "n_gen_warmup",
    "mul_mat_q",
})
BOOL_FIELDS = frozenset({
    "cpu_strict", "no_kv_offload", "use_mmap", "use_direct_io", "embeddings", "no_host",
    "repack",
})
FLOAT_FIELDS = frozenset({"avg_ts", "stddev_ts"})
STRING_FIELDS = frozenset({
    "build_commit", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "cpu_mask", "type_k", "type_v", "split_mode", "devices", "tensor_split",
    "tensor_buft_overrides", "test_time", "load_mode", "lazy_mode", "moe_cache",
})
"""llama-bench's field types (``test::get_field_type``); ``flash_attn`` was a BOOL and is
an INT (-1 = auto) since 2025, so it is typed by its value."""

MD_COLUMNS: dict[str, str] = {
    "model": "model_type", "size": "model_size", "params": "model_n_params",
    "backend": "backends", "ngl": "n_gpu_layers", "threads": "n_threads",
    "sm": "split_mode", "nkvo": "no_kv_offload", "fa": "flash_attn", "mmap": "use_mmap",
    "embd": "embeddings", "nopo": "no_op_offload", "noh": "no_host", "dev": "devices",
    "ts": "tensor_split", "ot": "tensor_buft_overrides", "mmq": "mul_mat_q", "lm": "load_mode",
}
"""Markdown column -> field (``markdown_printer::get_field_display_name``); other
columns (n_batch, type_k, ...) carry the field's own name."""

_UNITS = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4,
          "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_TEST = re.compile(
    r"^(?:(?:pp ?(?P<pp>\d+))?(?:\+?tg ?(?P<tg>\d+))?|pg ?(?P<pgp>\d+) ?, ?(?P<pgg>\d+))"
    r"(?: @ d(?P<depth>\d+))?$"
)
_BUILD = re.compile(r"^build: (?P<commit>\S+) \((?P<number>\d+)\)")


@dataclass(frozen=True, slots=True)
class LlamaBenchRecord:
    """One llama-bench test row, its fields under llama-bench's names."""

    fields: dict[str, Any]
    form: LlamaBenchForm
    source: str
    """File and line (or item) it was read from, for messages."""

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    @property
    def test_name(self) -> str:
        """``tg128``, ``pp512``, ``pp512+tg128``, with `` @ d4096`` past depth 0."""
        prompt, gen = int(self.get("n_prompt") or 0), int(self.get("n_gen") or 0)
        name = (f"pp{prompt}" if not gen else f"tg{gen}" if not prompt
                else f"pp{prompt}+tg{gen}")
        depth = int(self.get("n_depth") or 0)
        return f"{name} @ d{depth}" if depth else name


def typed(name: str, value: Any) -> Any:
    """A field's value as llama-bench's JSON printer types it (CSV and SQL give text)."""
    if value is None or isinstance(value, (list, dict)):
        return value
    if name in STRING_FIELDS:
        return str(value)
    text = str(value).strip()
    if name in BOOL_FIELDS:
        if isinstance(value, bool):
            return value
        if text.lower() in ("1", "true"):
            return True
        if text.lower() in ("0", "false"):
            return False
        raise ValueError(f"{name} {value!r} is not a boolean (0/1/true/false)")
    if name in INT_FIELDS:
        return int(value) if isinstance(value, (int, float)) else int(text)
    if name in FLOAT_FIELDS:
        return float(value)
    if name == "flash_attn" and isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return str(value)


def detect_form(text: str, path: Path | None = None) -> LlamaBenchForm:
    """Which form ``text`` is, from its first characters (the suffix breaks ties)."""
    head = text.lstrip()
    if head.startswith("["):
        return "json"
    if head.startswith("{"):
        return "jsonl"
    if re.match(r"(?i)(CREATE TABLE|INSERT INTO)", head):
        return "sql"
    first = head.splitlines()[0] if head else ""
    if "," in first and ("avg_ts" in first or "build_commit" in first) and first[:1].isalpha():
        return "csv"
    if re.search(r"^\s*\|.*\|\s*$", head, re.MULTILINE):
        return "md"  # a table, maybe inside a pasted log
    suffix = path.suffix.lstrip(".").lower() if path else ""
    if suffix in ("json", "jsonl", "csv", "sql", "md"):
        return suffix  # type: ignore[return-value]
    where = str(path) if path else "the input"
    raise StorageError(
        f"{where!r} is not llama-bench output: expected `llama-bench -o json|jsonl|csv|sql|md` "
        f"(a JSON list, JSON lines, a CSV header with avg_ts, SQL INSERTs or a markdown "
        f"table), got {first[:60]!r}"
    )


def parse_llama_bench(text: str, source: str, form: LlamaBenchForm | None = None
                      ) -> tuple[LlamaBenchRecord, ...]:
    """Every test row of one llama-bench output; ``source`` names it in messages."""
    chosen = form or detect_form(text, Path(source))
    try:
        records = _PARSERS[chosen](text, source)
    except (ValueError, KeyError, TypeError, sqlite3.Error) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise StorageError(f"{source!r} is not readable llama-bench -o {chosen} output: "
                           f"{reason}") from exc
    if not records:
        raise StorageError(f"{source!r} holds no llama-bench test rows (-o {chosen})")
    return tuple(records)


def read_llama_bench(path: Path) -> tuple[LlamaBenchRecord, ...]:
    """One llama-bench output file: a regular file of at most 64 MiB of UTF-8 text."""
    try:
        raw = read_regular(path, cap=MAX_TEXT_BYTES)
    except FileRefused as exc:
        raise StorageError(f"{exc}: not llama-bench output; pass the file `llama-bench -o "
                           f"json` wrote") from None
    except OSError as exc:
        raise StorageError(f"cannot read llama-bench output {str(path)!r}: "
                           f"{exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StorageError(f"{str(path)!r} is not UTF-8 text (byte {exc.start}): not "
                           f"llama-bench output; pass the file `llama-bench -o json` "
                           f"wrote") from None
    return parse_llama_bench(text, str(path))


def _record(raw: dict[str, Any], form: LlamaBenchForm, source: str) -> LlamaBenchRecord:
    """JSON values are typed already; CSV and SQL text is typed by field."""
    if not isinstance(raw, dict):
        raise ValueError(f"{source}: expected an object of fields, got {type(raw).__name__}")
    if form in ("json", "jsonl"):
        return LlamaBenchRecord(dict(raw), form, source)
    return LlamaBenchRecord({k: typed(k, v) for k, v in raw.items()}, form, source)


def _json(text: str, source: str) -> list[LlamaBenchRecord]:
    rows = loads(text)
    if not isinstance(rows, list):
        raise ValueError("expected a JSON list of test objects (llama-bench -o json)")
    return [_record(row, "json", f"{source}[{i}]") for i, row in enumerate(rows)]


def _jsonl(text: str, source: str) -> list[LlamaBenchRecord]:
    return [_record(loads(line), "jsonl", f"{source}:{n}")
            for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _csv(text: str, source: str) -> list[LlamaBenchRecord]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    records = []
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ValueError(f"line {reader.line_num} has {len(row)} values for the "
                             f"{len(header)} header fields; is the file cut or mixed?")
        records.append(_record(dict(zip(header, row, strict=True)), "csv",
                               f"{source}:{reader.line_num}"))
    return records


_SQL_ALLOWED = {sqlite3.SQLITE_CREATE_TABLE, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_READ,
                sqlite3.SQLITE_SELECT, sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_UPDATE,
                sqlite3.SQLITE_FUNCTION}


def _sql(text: str, source: str) -> list[LlamaBenchRecord]:
    """Run the CREATE/INSERT statements (nothing else) in memory, then read ``llama_bench``
    (every table where there is none: the file may name its own)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.set_authorizer(
            lambda action, *_: sqlite3.SQLITE_OK if action in _SQL_ALLOWED
            else sqlite3.SQLITE_DENY)
        conn.executescript(text)
        conn.set_authorizer(None)
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")]
        tables = ["llama_bench"] if "llama_bench" in tables else tables
        records = []
        for table in tables:
            cursor = conn.execute(f"SELECT * FROM [{table}] ORDER BY rowid")
            names = [d[0] for d in cursor.description]
            for number, values in enumerate(cursor, start=1):
                raw = {k: v for k, v in zip(names, values, strict=True) if v is not None}
                records.append(_record(raw, "sql", f"{source}:{table}#{number}"))
        return records
    finally:
        conn.close()


_META = re.compile(r"^<!--\s*tokperf:\s*(?P<json>\{.*\})\s*-->$")
_DEVICE_LINES = (
    re.compile(r"^Device \d+: (?P<name>[^,]+), (?:compute capability|gfx)"),  # CUDA, ROCm
    re.compile(r"^ggml_vulkan: \d+ = (?P<name>.+?) \((?:[^)]*)\)(?: \(\w+\))? \|"),
    re.compile(r"^ggml_metal_init: found device: (?P<name>.+)$"),
    re.compile(r"^ggml_metal_device_init: GPU name:\s+\S+ \((?P<name>.+)\)$"),
)
_FOUND = re.compile(r"(?:found|Found) (?P<n>\d+) (?:CUDA|ROCm|Vulkan) devices")


def _md(text: str, source: str) -> list[LlamaBenchRecord]:
    """Every table row; a ``build: <commit> (<number>)`` footer applies to the rows above
    it that have no build yet. The device lines llama-bench prints before its table
    (``Device 0: NVIDIA ...``, ``ggml_vulkan: 0 = ...``) set ``gpu_info`` for the rows
    below; a ``<!-- tokperf: {"source_url": ...} -->`` line adds its fields to them."""
    rows: list[tuple[dict[str, Any], int]] = []
    header: list[str] | None = None
    meta: dict[str, Any] = {}
    devices: list[str] = []
    ahead: dict[str, Any] = {}  # a build line printed above its table (stderr first)
    after_table = devices_used = False
    guessed: set[int] = set()  # rows whose build came from a line above their table
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        build = _BUILD.match(stripped)
        if build:
            found = {"build_commit": build["commit"], "build_number": int(build["number"])}
            if after_table:  # the footer of the table just above: it wins over `ahead`
                for raw, number_ in rows:
                    if "build_commit" not in raw or number_ in guessed:
                        raw.update(found)
                        guessed.discard(number_)
            else:
                ahead = found
        if stripped and not stripped.startswith("|"):
            after_table = False
        found_meta = _META.match(stripped)
        if found_meta:
            meta = loads(found_meta["json"])
            devices, ahead = [], {}
            guessed.clear()
        if _FOUND.search(stripped):
            devices = []
        for pattern in _DEVICE_LINES:
            device = pattern.match(stripped)
            if device:
                if devices_used:  # a new log: its own device list and build
                    devices, devices_used, ahead = [], False, {}
                    guessed.clear()
                devices.append(device["name"].strip())
        if not stripped.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue
        if len(cells) != len(header):
            raise ValueError(f"line {number} has {len(cells)} cells for {len(header)} columns")
        raw = _md_row(header, cells, number)
        if devices:
            raw.setdefault("gpu_info", ", ".join(devices))
        if ahead and "build_commit" not in meta and "build_commit" not in raw:
            guessed.add(number)
        rows.append(({**ahead, **meta, **raw}, number))
        after_table = devices_used = True
    return [LlamaBenchRecord(raw, "md", f"{source}:{number}") for raw, number in rows]


def _md_row(header: Iterable[str], cells: Iterable[str], number: int) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for column, cell in zip(header, cells, strict=True):
        if column == "test":
            found = _TEST.match(cell)
            if not found or not (found["pp"] or found["tg"] or found["pgp"]):
                raise ValueError(f"line {number}: test {cell!r} is not pp/tg/pg N [@ dN]")
            raw["n_prompt"] = int(found["pp"] or found["pgp"] or 0)
            raw["n_gen"] = int(found["tg"] or found["pgg"] or 0)
            raw["n_depth"] = int(found["depth"] or 0)
        elif column == "t/s":
            mean, _, spread = cell.partition("±")
            raw["avg_ts"] = float(mean)
            raw["stddev_ts"] = float(spread) if spread.strip() else 0.0
        elif column in ("size", "params"):
            value, _, unit = cell.partition(" ")
            if unit not in _UNITS:
                raise ValueError(f"line {number}: {column} {cell!r} has no unit "
                                 f"({', '.join(_UNITS)})")
            name = MD_COLUMNS[column]
            raw[name] = round(float(value) * _UNITS[unit])
        else:
            name = MD_COLUMNS.get(column, column)
            raw[name] = typed(name, cell)
    return raw


_PARSERS = {"json": _json, "jsonl": _jsonl, "csv": _csv, "sql": _sql, "md": _md}
