"""Run files a stranger hands ``tokperf import``: read bounded, checked against the schema
before any database is opened.

A file is the reference-run text form (``.jsonl``) or a ``tokperf export --format json``
list: a regular UTF-8 file of at most ``MAX_FILE_BYTES``, each JSON document bounded. Every
row is checked against ``schema.current_columns``; a refusal is one ``StorageError`` line:
the file, the line, what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pytest_tokperf.errors import StorageError
from pytest_tokperf.jsontext import MAX_DEPTH, JSONTooDeep, loads
from pytest_tokperf.safe_files import MAX_TEXT_BYTES, FileRefused, read_regular, safe_name
from pytest_tokperf.storage.env_hash import dumps
from pytest_tokperf.storage.rows import JSON_COLUMNS, Row, Series, series_row
from pytest_tokperf.storage.schema import SCHEMA_VERSION, current_columns

RUN_FORMAT = "tokperf-run/1"
MAX_FILE_BYTES = MAX_TEXT_BYTES
MAX_VALUES = 1 << 21
"""JSON values (counted by ``[``, ``{`` and ``,``) one run line or JSON export may hold."""
FIX = ("import a file that `tokperf save-reference`, a run's journal or `tokperf export "
       "--format json` wrote")
DROPPED = {"results": frozenset({"id", "environment_id"}), "environments": frozenset({"id"}),
           "samples": frozenset({"result_id"}), "gate_verdicts": frozenset({"result_id"})}
"""Database ids a row may carry: the importer assigns its own."""
FILLED = {"results": frozenset({"run_id"}), "environments": frozenset({"env_hash"})}
"""Required columns the importer fills itself (the run's id, the environment's hash)."""
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "INTEGER": ((int,), "a whole number"), "REAL": ((int, float), "a number"),
    "TEXT": ((str,), "text")}
_INT64 = 1 << 63


@dataclass(frozen=True, slots=True)
class ResultBundle:
    """One result with everything it references, ids stripped."""

    series_text: str
    environment: Row
    result: Row
    samples: list[Row] = field(default_factory=list)
    gate_verdicts: list[Row] = field(default_factory=list)
    """What the gate said of the result, one row a metric (``result_id`` stripped)."""


@dataclass(frozen=True, slots=True)
class RunBundle:
    run: Row
    results: list[ResultBundle] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PlannedRun:
    """One checked run of a file; ``results()`` yields its results again each call (a run
    file's lines are parsed one at a time when added, never all at once)."""

    run: Row
    source: str
    results: Callable[[], Iterator[ResultBundle]]
    count: int


class _Bad(ValueError):
    """What is wrong with one row or line, completed with the file and line."""


def _show(value: object, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def encode(row: Row) -> Row:
    """A row with its JSON columns (JSON values in a file) as the text the database keeps."""
    return {k: dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in row.items()}


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


JSON_SHAPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "engine_settings": (lambda v: isinstance(v, dict) and all(
        isinstance(x, str) for x in v.values()), "an object of text values"),
    "model_quant_types": (_texts, "a list of text"),
    "footprint_warnings": (_texts, "a list of text"),
    "notes": (_texts, "a list of text"),
    "inter_token_s": (lambda v: isinstance(v, list) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in v), "a list of numbers"),
}
"""What each JSON column holds, as the readers of a stored row take it."""


def _problem(value: object, kind: str) -> str | None:
    types, words = _KINDS.get(kind, ((str, int, float), "a number or text"))
    if not isinstance(value, types):
        return f"is {_show(value)}, not {words}"
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        return f"is {_show(value)}, outside the 64-bit range a database column holds"
    if isinstance(value, str):
        if "\x00" in value:
            return "holds a NUL character, which PostgreSQL text refuses"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "holds a lone UTF-16 surrogate, which is no character"
    return None


def check_row(value: object, table: str, what: str) -> Row:
    """``value`` as a row of ``table``: an object of its known columns, each of the
    column's type, required ones filled; database ids dropped. ``_Bad`` otherwise."""
    if not isinstance(value, dict):
        raise _Bad(f"{what} is {_show(value)}, not an object of {table} columns")
    columns = current_columns()[table]
    dropped, filled = DROPPED.get(table, frozenset()), FILLED.get(table, frozenset())
    for key, (fits, words) in JSON_SHAPES.items():
        item = value.get(key)
        if item is not None and not fits(item):
            raise _Bad(f"{what} column {key!r} is {_show(item)}, not {words}")
    row = {k: v for k, v in encode(value).items() if k not in dropped}
    for key, item in row.items():
        column = columns.get(key)
        if column is None:
            raise _Bad(f"{what} has column {_show(key)}, which the {table} table (schema "
                       f"{SCHEMA_VERSION}) does not have; upgrade pytest-tokperf or drop it")
        kind, not_null, _ = column
        if item is None:
            if not_null and key not in filled:
                raise _Bad(f"{what} column {key!r} is null, but every {table} row has one")
            continue
        problem = _problem(item, kind)
        if problem:
            raise _Bad(f"{what} column {key!r} {problem}")
    missing = [k for k, (_, _, required) in columns.items()
               if required and k not in row and k not in filled and k not in dropped]
    if missing:
        raise _Bad(f"{what} lacks column {missing[0]!r}, which every {table} row has")
    return row


def check_run(value: object) -> Row:
    run = check_row(value, "runs", "the run")
    run_id = run["run_id"]
    if safe_name(run_id) != run_id:
        raise _Bad(f"run id {_show(run_id)} may hold only letters, digits, '.', '_' and "
                   f"'-' (at most 80, not starting with '.'): it names files (save-reference "
                   f"writes <run id>.jsonl); tokperf's own run ids are UUIDs")
    return run


def check_series(text: object) -> None:
    if not isinstance(text, str):
        raise _Bad(f"series is {_show(text)}, not the series text (a JSON object as text)")
    try:
        fields = loads(text)
        if not isinstance(fields, dict):
            raise _Bad(f"series text is {type(fields).__name__}, not a JSON object")
        series = Series(**fields)
    except TypeError as exc:  # a field Series does not have, or one missing
        reason = re.sub(r"^\S*__init__\(\) ", "", _line(exc))
        raise _Bad(f"series text: {reason}") from None
    except JSONTooDeep:
        raise _Bad("series text is JSON nested too deeply to read") from None
    except ValueError as exc:
        raise _Bad(f"series text is not JSON ({_line(exc)})") from None
    check_row(series_row(series), "series", "series")


def _line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160]


def _load(text: str) -> Any:
    values = text.count(",") + text.count("[") + text.count("{")
    if values > MAX_VALUES:
        raise _Bad(f"holds about {values} JSON values, more than the {MAX_VALUES} one "
                   f"run line or export may have")
    try:
        return loads(text)
    except JSONTooDeep:
        raise _Bad(f"JSON nested too deeply to read (more than {MAX_DEPTH} "
                   f"levels)") from None
    except (ValueError, RecursionError) as exc:
        raise _Bad(f"not JSON ({_line(exc)})") from None


def result_bundle(obj: object) -> ResultBundle:
    """One result line of the text form, checked."""
    if not isinstance(obj, dict):
        raise _Bad(f"a result line is {_show(obj)}, not an object")
    samples = obj.get("samples")
    gates = obj.get("gate_verdicts", [])
    if not isinstance(samples, list) or not isinstance(gates, list):
        raise _Bad("a result line needs 'samples' (a list of samples rows) and may have "
                   "'gate_verdicts' (a list)")
    check_series(obj.get("series"))
    return ResultBundle(
        series_text=obj["series"],
        environment=check_row(obj.get("environment"), "environments", "environment"),
        result=check_row(obj.get("result"), "results", "result"),
        samples=_keyed([check_row(s, "samples", f"sample {n}") for n, s in enumerate(samples)],
                       "repetition", "sample"),
        gate_verdicts=_keyed([check_row(g, "gate_verdicts", f"gate verdict {n}")
                              for n, g in enumerate(gates)], "metric", "gate verdict"),
    )


def _keyed(rows: list[Row], key: str, what: str) -> list[Row]:
    """``rows`` of one result, each named by a distinct ``key`` (their primary key)."""
    seen: set[object] = set()
    for number, row in enumerate(rows):
        value = row.get(key)
        if value is None:
            raise _Bad(f"{what} {number} has no {key!r}, which tells a result's {what}s apart")
        if value in seen:
            raise _Bad(f"{what} {number} repeats {key} {_show(value)}")
        seen.add(value)
    return rows


def _refused(source: str, where: str, exc: _Bad) -> StorageError:
    return StorageError(f"{source}{where}: not a tokperf run line: {exc}; {FIX}")


def _result_lines(lines: list[str], numbers: list[int], source: str) -> Iterator[ResultBundle]:
    for number in numbers:
        try:
            yield result_bundle(_load(lines[number - 1]))
        except _Bad as exc:
            raise _refused(source, f":{number}", exc) from None


def plan_lines(text: str, source: str) -> list[PlannedRun]:
    """The text form, every line checked; each run's results are parsed again when read."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    runs: list[tuple[Row, list[int]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = _load(line)
            if isinstance(obj, dict) and "format" in obj:
                if obj["format"] != RUN_FORMAT:
                    raise _Bad(f"unknown format {_show(obj['format'])}, expected {RUN_FORMAT!r}")
                runs.append((check_run(obj.get("run")), []))
            elif not runs:
                raise _Bad(f"a result before any {RUN_FORMAT!r} run line")
            else:
                result_bundle(obj)
                runs[-1][1].append(number)
        except _Bad as exc:
            raise _refused(source, f":{number}", exc) from None
    return [PlannedRun(run, source, partial(_result_lines, lines, numbers, source),
                       len(numbers)) for run, numbers in runs]


def plan_export(text: str, source: str) -> list[PlannedRun]:
    """A ``tokperf export --format json`` list (no samples), every row checked."""
    columns = current_columns()
    env_cols = [c for c in columns["environments"] if c != "id"]
    result_cols = [c for c in columns["results"] if c not in ("id", "run_id", "environment_id")]
    try:
        rows = _load(text)
        if not isinstance(rows, list):
            raise _Bad(f"it is {type(rows).__name__}, not a JSON list of result rows")
    except _Bad as exc:
        raise StorageError(f"{source!r} is not a `tokperf export --format json` file: "
                           f"{exc}; export it again with `tokperf export`") from None
    runs: dict[str, RunBundle] = {}
    for number, raw in enumerate(rows):
        try:
            if not isinstance(raw, dict):
                raise _Bad(f"it is {_show(raw)}, not an object of columns")
            row = raw
            run = check_run({c: row.get(c) for c in columns["runs"]})
            bundle = runs.setdefault(run["run_id"], RunBundle(run))
            check_series(row.get("series_text"))
            bundle.results.append(ResultBundle(
                series_text=row["series_text"],
                environment=check_row({c: row.get(c) for c in env_cols}, "environments",
                                      "environment"),
                result=check_row({c: row.get(c) for c in result_cols}, "results", "result")))
        except _Bad as exc:
            raise StorageError(f"{source}: row {number}: not a `tokperf export --format json` "
                               f"row: {exc}; export it again with `tokperf export`") from None
    return [PlannedRun(b.run, source, partial(iter, b.results), len(b.results))
            for b in runs.values()]


def read_run_file(path: Path) -> list[PlannedRun]:
    """A run text file (``.jsonl``) or a JSON export, read and checked (see the module)."""
    try:
        raw = read_regular(path, cap=MAX_FILE_BYTES)
    except FileRefused as exc:
        raise StorageError(f"{exc}: not a tokperf run file; {FIX}") from None
    except OSError as exc:
        raise StorageError(f"cannot read {str(path)!r} to import: "
                           f"{exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StorageError(f"{str(path)!r} is not UTF-8 text (byte {exc.start} is "
                           f"{raw[exc.start:exc.start + 1]!r}): not a tokperf run file; "
                           f"{FIX}") from None
    del raw
    if path.suffix == ".jsonl":
        return plan_lines(text, str(path))
    return plan_export(text, str(path))
