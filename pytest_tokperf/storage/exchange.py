"""Moving results between databases and text: export, import, merge, reference runs.

The reference-run text form (``db/runs/*.jsonl``) is JSON lines with sorted keys: a
``{"format": "tokperf-run/1", "run": ...}`` line starts each run, then one line per
result with its environment, result, samples and series. Importing and merging dedupe
by run id and, inside a run, by (test id, series key, created at).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_tokperf.errors import StorageError
from pytest_tokperf.safe_files import FileRefused, inside, regular_size
from pytest_tokperf.storage.env_hash import PER_RESULT_COLUMNS, environment_hash
from pytest_tokperf.storage.location import DbLocation, named_file, same_db
from pytest_tokperf.storage.rows import (
    JSON_COLUMNS,
    Row,
    Series,
    series_row,
)
from pytest_tokperf.storage.run_files import (  # the bundles were defined here
    MAX_FILE_BYTES,
    RUN_FORMAT,
    PlannedRun,
    ResultBundle,
    RunBundle,
    read_run_file,
)
from pytest_tokperf.storage.schema import SUMMARY_PARTS
from pytest_tokperf.storage.store import ResultStore

_RESULT_IDS = ("id", "run_id", "environment_id")
NOT_MEASURED_BY = {"llama-bench": (("ttft_s", "chars_per_s"), ("ttft_s", "text_chars"))}
"""Per engine name, what its imported rows cannot have measured (summaries, sample
columns): llama-bench sends no request and shows no text; older files' figures read NULL."""
SHOWN_SKIPS = 10
"""Skipped files and runs a message lists by name; the rest are counted."""


def without_invented(item: ResultBundle) -> ResultBundle:
    """``item`` with the figures its engine cannot have measured set to NULL."""
    unmeasured = NOT_MEASURED_BY.get(str(item.environment.get("engine_name")))
    if unmeasured is None:
        return item
    summaries, columns = unmeasured
    cleared = {f"{figure}_{part}" for figure in summaries for part in SUMMARY_PARTS}
    result = {k: (None if k in cleared else v) for k, v in item.result.items()}
    samples = [{k: (None if k in columns else v) for k, v in s.items()} for s in item.samples]
    return replace(item, result=result, samples=samples)


@dataclass(frozen=True, slots=True)
class Added:
    """What an import or merge added (existing rows are not counted)."""

    runs: int = 0
    results: int = 0
    samples: int = 0
    skipped: tuple[str, ...] = field(default=(), compare=False)
    """What was left out and why, one line each (a run already in the DB, a file that is
    no run file); not compared: two imports that add the same rows are equal."""

    def __add__(self, other: Added) -> Added:
        return Added(
            self.runs + other.runs, self.results + other.results,
            self.samples + other.samples, self.skipped + other.skipped,
        )

    def summary(self, target: object) -> list[str]:
        """The lines a verb prints: the counts, then what was skipped and why."""
        lines = [(f"added {self.runs} runs, {self.results} results, {self.samples} "
                  f"samples to {target}")]
        lines += [f"  skipped {note}" for note in self.skipped[:SHOWN_SKIPS]]
        if len(self.skipped) > SHOWN_SKIPS:
            lines.append(f"  ... and {len(self.skipped) - SHOWN_SKIPS} more skipped")
        return lines


def _decode(row: Row) -> Row:
    return {k: json.loads(v) if k in JSON_COLUMNS and v is not None else v for k, v in row.items()}


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


def add_run(store: ResultStore, bundle: RunBundle, source: str = "") -> Added:
    """Insert one run bundle in one transaction, skipping what is already there."""
    return add_results(store, bundle.run, lambda: iter(bundle.results), source)


def add_results(store: ResultStore, run: Row, results: Callable[[], Iterable[ResultBundle]],
                source: str = "") -> Added:
    """Insert ``run`` and the results ``results()`` yields (called again when a locked
    DB makes the transaction start over) in one transaction, skipping what is there."""
    run_id = run["run_id"]

    def body() -> Added:
        known = store.query("SELECT 1 AS found FROM runs WHERE run_id = ?", (run_id,))
        if not known:
            store.backend.insert("runs", run)
        added, present = Added(runs=0 if known else 1), 0
        for item in map(without_invented, results()):
            key = (run_id, *(item.result[k] for k in ("test_id", "series_key", "created_at")))
            if store.query("SELECT 1 AS found FROM results WHERE run_id = ? AND test_id = ?"
                           " AND series_key = ? AND created_at = ?", key):
                present += 1
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
        origin = f" from {source}" if source else ""
        if known and not added.results:
            note = f"run {run_id!r}{origin}: already in the DB ({present} results)"
        elif present:
            note = f"run {run_id!r}{origin}: {present} results already in the DB"
        else:
            return added
        return added + Added(skipped=(note,))

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


def reference_path(directory: Path, run_id: str) -> Path:
    """Where ``save-reference`` writes a run: ``<run id>.jsonl`` in ``directory``, the id
    made a file name (``location.named_file``) whatever it holds."""
    return named_file(directory, run_id, suffix=".jsonl")


def write_reference_run(db: DbLocation, run_id: str, directory: Path) -> Path:
    """Write one run into ``directory`` as ``<run_id>.jsonl`` (the ``db/runs`` dataset);
    never anywhere else: not through a link planted under that name either."""
    text = dump_run(db, run_id)
    target = reference_path(directory, run_id)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or not inside(directory, target):
            raise StorageError(f"{str(target)!r} is a symbolic link: save-reference writes "
                               f"only inside {str(directory)!r}; remove the link or pick "
                               f"another folder (-d)")
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot write {str(target)!r}: {exc.strerror or exc}; pick "
                           f"another folder (-d)") from exc
    return target


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


def exported(db: DbLocation, decode: bool = False) -> tuple[list[str], list[Row]]:
    """Every result's row, joined with its run, environment and series text, and the
    column names in order; ``decode``: JSON columns as JSON values, not their text.
    Samples are not exported (``dump_run`` keeps them)."""
    with ResultStore.open_read_only(db) as store:
        rows = list(export_rows(store))
        header = [c.split(".", 1)[1] for c in _export_columns(store)]
    header[header.index("id")] = "result_id"
    return header, [_decode(r) for r in rows] if decode else rows


def import_files(paths: Iterable[Path]) -> tuple[list[Path], tuple[str, ...]]:
    """The files an import reads: each file as named, each folder's ``*.jsonl`` files;
    and what a folder holds that is not imported, with why (one line a folder and reason)."""
    files: list[Path] = []
    skipped: list[str] = []
    for path in paths:
        if not path.is_dir():
            files.append(path)
            continue
        left: dict[str, list[str]] = {}
        found = len(files)
        try:
            entries = sorted(path.iterdir())
        except OSError as exc:
            raise StorageError(f"cannot list {str(path)!r} to import: "
                               f"{exc.strerror or exc}") from exc
        for entry in entries:
            if entry.is_dir():
                left.setdefault("folders, not searched (import each by name)",
                                []).append(entry.name)
            elif entry.suffix != ".jsonl":
                left.setdefault("files, not .jsonl run files", []).append(entry.name)
            else:
                try:
                    regular_size(entry)
                except FileRefused as exc:
                    skipped.append(str(exc))
                    continue
                except OSError as exc:
                    skipped.append(f"{str(entry)!r}: {exc.strerror or exc}")
                    continue
                files.append(entry)
        skipped += [f"{str(path)!r}: {len(names)} {why}: {', '.join(names[:3])}"
                    + (", ..." if len(names) > 3 else "") for why, names in left.items()]
        if len(files) == found:
            skipped.append(f"{str(path)!r}: holds no .jsonl run file")
    return files, tuple(skipped)


@contextmanager
def adding_to(db: DbLocation) -> Iterator[ResultStore]:
    """``db`` opened (or created) to add runs to; a file it created, and the folders made
    for it, are removed again when the adding fails: a refused import leaves no DB."""
    path, new = Path(str(db)), isinstance(db, Path) and not Path(db).exists()
    folders = [p for p in path.parents if not p.exists()] if new else []
    try:
        with ResultStore.open(db) as store:
            yield store
    except BaseException:
        with suppress(OSError):
            for suffix in ("", "-wal", "-shm", "-journal") if new else ():
                path.with_name(path.name + suffix).unlink(missing_ok=True)
            for folder in folders:  # the innermost first
                folder.rmdir()
        raise


def import_datasets(db: DbLocation, paths: Sequence[Path]) -> Added:
    """Load run text files (``.jsonl``), folders of them or JSON exports into ``db``; every
    file is checked before the DB is opened (or created, only to hold runs)."""
    files, skipped = import_files(paths)
    plans: list[list[PlannedRun] | None] = []
    kept = 0
    empty: list[str] = []
    for file in files:
        planned = read_run_file(file)
        if not planned:
            empty.append(f"{str(file)!r}: holds no runs")
        kept += file.stat().st_size
        plans.append(planned if kept <= MAX_FILE_BYTES else None)  # else read again later
    total = Added(skipped=skipped + tuple(empty))
    if len(empty) == len(files):
        return total  # nothing to add: no DB opened, none created
    with adding_to(db) as store:
        for file, kept_runs in zip(files, plans, strict=True):
            for run in kept_runs if kept_runs is not None else read_run_file(file):
                total += add_results(store, run.run, run.results, run.source)
    return total


def merge(a: DbLocation, b: DbLocation | None, out: DbLocation) -> Added:
    """Merge result databases (SQLite files or PostgreSQL) into ``out`` (created or added
    to), deduping by run id."""
    sources = [s for s in (a, b) if s is not None]
    for source in sources:
        if isinstance(source, Path) and not source.is_file():
            raise StorageError(f"merge input {str(source)!r} does not exist")
        if same_db(source, out):
            raise StorageError(f"merge output {str(out)!r} is also an input; name a new file")
    for source in sources:  # all are tokperf DBs before the output is created
        ResultStore.open_read_only(source).close()
    added = Added()
    with adding_to(out) as target:
        for source in sources:
            with ResultStore.open_read_only(source) as store:
                for bundle in read_runs(store):
                    added += add_run(target, bundle)
    return added
