"""Moving results between databases and text: export, import, merge, reference runs.

The reference-run text form (``db/runs/*.jsonl``) is JSON lines with sorted keys: a
``{"format": "tokperf-run/1", "run": ...}`` line starts each run, then one line per
result with its environment, result, samples and series. Importing and merging dedupe
by run id and, inside a run, by (test id, series key, created at).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pytest_tokperf.errors import StorageError
from pytest_tokperf.jsontext import dumps as strict_dumps
from pytest_tokperf.storage.location import DbLocation, same_db
from pytest_tokperf.storage.store import ResultStore
from pytest_tokperf.storage.env_hash import PER_RESULT_COLUMNS, dumps, environment_hash
from pytest_tokperf.storage.rows import (
    JSON_COLUMNS,
    Row,
    Series,
    series_row,
)

RUN_FORMAT = "tokperf-run/1"
_RESULT_IDS = ("id", "run_id", "environment_id")


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
class Added:
    """What an import or merge added (existing rows are not counted)."""

    runs: int = 0
    results: int = 0
    samples: int = 0

    def __add__(self, other: Added) -> Added:
        return Added(
            self.runs + other.runs, self.results + other.results, self.samples + other.samples
        )


def _decode(row: Row) -> Row:
    return {k: json.loads(v) if k in JSON_COLUMNS and v is not None else v for k, v in row.items()}


def _encode(row: Row) -> Row:
    return {k: dumps(v) if k in JSON_COLUMNS and v is not None else v for k, v in row.items()}


def read_runs(store: ResultStore, run_ids: Iterable[str] | None = None) -> Iterator[RunBundle]:
    """Every run in ``store`` (or those named) as bundles, in start order."""
    wanted = None if run_ids is None else set(run_ids)
    for run in store.query("SELECT * FROM runs ORDER BY started_at, run_id"):
        if wanted is not None and run["run_id"] not in wanted:
            continue
        bundles = []
        for result in store.query(
            "SELECT results.*, series.series_text FROM results JOIN series USING (series_key)"
            " WHERE run_id = ? ORDER BY results.id",
            (run["run_id"],),
        ):
            env = store.query("SELECT * FROM environments WHERE id = ?",
                              (result["environment_id"],))[0]
            samples = store.query("SELECT * FROM samples WHERE result_id = ? ORDER BY repetition",
                                  (result["id"],))
            gate = store.query("SELECT * FROM gate_verdicts WHERE result_id = ? ORDER BY metric",
                               (result["id"],))
            bundles.append(
                ResultBundle(
                    series_text=result.pop("series_text"),
                    environment={k: v for k, v in env.items() if k != "id"},
                    result={k: v for k, v in result.items() if k not in _RESULT_IDS},
                    samples=[{k: v for k, v in s.items() if k != "result_id"} for s in samples],
                    gate_verdicts=[{k: v for k, v in g.items() if k != "result_id"}
                                   for g in gate],
                )
            )
        yield RunBundle(run, bundles)


def add_run(store: ResultStore, bundle: RunBundle) -> Added:
    """Insert one run bundle in one transaction, skipping what is already there."""
    run_id = bundle.run["run_id"]

    def body() -> Added:
        known = store.query("SELECT 1 AS found FROM runs WHERE run_id = ?", (run_id,))
        if not known:
            store.backend.insert("runs", bundle.run)
        added = Added(runs=0 if known else 1)
        for item in bundle.results:
            key = (
                run_id,
                item.result["test_id"],
                item.result["series_key"],
                item.result["created_at"],
            )
            if store.query(
                "SELECT 1 AS found FROM results WHERE run_id = ? AND test_id = ?"
                " AND series_key = ? AND created_at = ?",
                key,
            ):
                continue
            env = {**item.environment, "env_hash": environment_hash(item.environment)}
            series = series_row(Series.from_text(item.series_text))
            series["series_key"] = item.result["series_key"]
            result_id = store.add_result(env, series, {**item.result, "run_id": run_id},
                                         item.samples)
            if item.gate_verdicts:
                store.backend.insert_all("gate_verdicts", (
                    {**g, "result_id": result_id} for g in item.gate_verdicts))
            added += Added(results=1, samples=len(item.samples))
        return added

    return store.write(f"import run {run_id!r}", body)


def dump_run(db: DbLocation, run_id: str) -> str:
    """The text form of one stored run (see the module docstring)."""
    with ResultStore.open_read_only(db) as store:
        found = list(read_runs(store, [run_id]))
    if not found:
        raise StorageError(f"no run {run_id!r} in {str(db)!r}; `tokperf runs` lists them")
    return _run_text(found[0])


def _run_text(bundle: RunBundle) -> str:
    lines = [json.dumps({"format": RUN_FORMAT, "run": bundle.run}, sort_keys=True)]
    for item in bundle.results:
        line = {
            "environment": _decode(item.environment),
            "result": _decode(item.result),
            "samples": [_decode(s) for s in item.samples],
            "series": item.series_text,
        }
        if item.gate_verdicts:
            line["gate_verdicts"] = item.gate_verdicts
        lines.append(json.dumps(line, sort_keys=True))
    return "\n".join(lines) + "\n"


def write_reference_run(db: DbLocation, run_id: str, directory: Path) -> Path:
    """Write one run into ``directory`` as ``<run_id>.jsonl`` (the ``db/runs`` dataset)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{run_id}.jsonl"
    target.write_text(dump_run(db, run_id), encoding="utf-8")
    return target


def parse_runs(text: str, source: str) -> list[RunBundle]:
    """Read the text form; ``source`` names the file in error messages."""
    runs: list[RunBundle] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            if "format" in obj:
                if obj["format"] != RUN_FORMAT:
                    raise ValueError(f"unknown format {obj['format']!r}, expected {RUN_FORMAT!r}")
                runs.append(RunBundle(obj["run"]))
            elif not runs:
                raise ValueError(f"a result before any {RUN_FORMAT!r} run line")
            else:
                runs[-1].results.append(
                    ResultBundle(
                        series_text=obj["series"],
                        environment=_encode(obj["environment"]),
                        result=_encode(obj["result"]),
                        samples=[_encode(s) for s in obj["samples"]],
                        gate_verdicts=[dict(g) for g in obj.get("gate_verdicts", [])],
                    )
                )
        except RecursionError as exc:
            raise StorageError(f"{source}:{number}: not a tokperf run line: JSON nested too "
                               f"deeply to read; import a file `tokperf save-reference` or the "
                               f"journal wrote") from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(f"{source}:{number}: not a tokperf run line: {exc}") from exc
    return runs


def _export_columns(store: ResultStore) -> list[str]:
    columns = [f"results.{c}" for c in store.columns("results") if c != "environment_id"]
    columns += [f"runs.{c}" for c in store.columns("runs") if c != "run_id"]
    columns += [f"environments.{c}" for c in store.columns("environments")
                if c != "id" and c not in PER_RESULT_COLUMNS]  # those are on the result
    return [*columns, "series.series_text"]


def export_rows(store: ResultStore) -> Iterator[Row]:
    """One row per result, joined with its run, environment and series text."""
    sql = (
        f"SELECT {', '.join(_export_columns(store))} FROM results"
        " JOIN runs USING (run_id) JOIN environments ON environments.id = results.environment_id"
        " JOIN series USING (series_key) ORDER BY results.created_at, results.id"
    )
    for row in store.query(sql):
        row["result_id"] = row.pop("id")
        yield row


def export_results(db: DbLocation, fmt: Literal["csv", "json"], out: Path) -> int:
    """Write every result as CSV or a JSON list; returns the number of rows.

    JSON columns are JSON values in the JSON export and JSON text in the CSV. Samples
    are not exported (``dump_run`` keeps them).
    """
    with ResultStore.open_read_only(db) as store:
        rows = list(export_rows(store))
        header = [c.split(".", 1)[1] for c in _export_columns(store)]
    header[header.index("id")] = "result_id"
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        out.write_text(strict_dumps([_decode(r) for r in rows], indent=1) + "\n", encoding="utf-8")
    else:
        with out.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
    return len(rows)


def _runs_from_export(store: ResultStore, rows: list[Row]) -> list[RunBundle]:
    run_cols, env_cols = store.columns("runs"), store.columns("environments")
    result_cols = set(store.columns("results")) - set(_RESULT_IDS)
    runs: dict[str, RunBundle] = {}
    for raw in rows:
        row = _encode(raw)
        run_id = row["run_id"]
        bundle = runs.setdefault(run_id, RunBundle({c: row.get(c) for c in run_cols}))
        bundle.results.append(
            ResultBundle(
                series_text=row["series_text"],
                environment={c: row.get(c) for c in env_cols if c != "id"},
                result={c: row.get(c) for c in result_cols},
            )
        )
    return list(runs.values())


def import_dataset(db: DbLocation, path: Path) -> Added:
    """Load a run text file (``.jsonl``) or a JSON export (no samples) into ``db``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot read {str(path)!r} to import: {exc}") from exc
    with ResultStore.open(db) as store:
        if path.suffix == ".jsonl":
            bundles = parse_runs(text, str(path))
        else:
            try:
                rows = json.loads(text)
                if not isinstance(rows, list):
                    raise ValueError("expected a JSON list of result rows")
                bundles = _runs_from_export(store, rows)
            except RecursionError as exc:
                raise StorageError(
                    f"{str(path)!r} is not a `tokperf export --format json` file: its JSON "
                    f"is nested too deeply to read; export it again with `tokperf export`"
                ) from exc
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise StorageError(
                    f"{str(path)!r} is not a `tokperf export --format json` file: {exc}"
                ) from exc
        return sum((add_run(store, b) for b in bundles), Added())


def load_reference_runs(directory: Path, db: DbLocation) -> Added:
    """Load every ``*.jsonl`` in ``directory`` (the ``db/runs`` dataset) into ``db``."""
    return sum((import_dataset(db, p) for p in sorted(directory.glob("*.jsonl"))), Added())


def merge(a: DbLocation, b: DbLocation | None, out: DbLocation) -> Added:
    """Merge result databases into ``out`` (created or added to), deduping by run id.

    Any of them may be an SQLite file or a PostgreSQL database: ``merge(PG, None,
    fleet.db)`` copies a fleet's store into one file Datasette reads, ``merge(a.db, None,
    PG)`` loads a runner's file into the fleet's.
    """
    sources = [s for s in (a, b) if s is not None]
    for source in sources:
        if isinstance(source, Path) and not source.is_file():
            raise StorageError(f"merge input {str(source)!r} does not exist")
        if same_db(source, out):
            raise StorageError(f"merge output {str(out)!r} is also an input; name a new file")
    for source in sources:  # all are tokperf DBs before the output is created
        ResultStore.open_read_only(source).close()
    added = Added()
    with ResultStore.open(out) as target:
        for source in sources:
            with ResultStore.open_read_only(source) as store:
                for bundle in read_runs(store):
                    added += add_run(target, bundle)
    return added
