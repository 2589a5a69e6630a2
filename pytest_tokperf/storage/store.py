"""The results store: every measurement with its environment, in one SQLite file or
one PostgreSQL database a fleet shares.

Nothing here uses pytest, and no SQL dialect: the database is a ``backend.Backend``
(``sqlite_backend``: sqlite-utils, the default; ``postgres``: psycopg 3, opened for a
``postgresql://`` URL). On SQLite each ``record`` is one short ``BEGIN IMMEDIATE``
transaction committed before it returns, so a crash, Ctrl-C or SIGKILL later keeps it;
WAL and a busy timeout let pytest-xdist workers share one file. On PostgreSQL a run's
rows are held in one transaction from ``begin_run`` to ``finish_run`` (each write in a
savepoint of it), so concurrent writers never see a half-written run and a killed one
leaves none; the journal keeps the results meanwhile. The schema is in ``schema``,
value <-> row mapping and the series key in ``rows``, export/import/merge in ``exchange``.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlite_utils import Database

from pytest_tokperf.environment import utc_now
from pytest_tokperf.errors import StorageError
from pytest_tokperf.results import (
    BenchResult,
    Ceiling,
    HardwareInfo,
    MachineLoad,
    ModelInfo,
    RunInfo,
    Sample,
    Verdict,
)
from pytest_tokperf.storage.records import (  # re-exported: they were defined here
    Acceptance as Acceptance,
    GateVerdict as GateVerdict,
    HistoryRow as HistoryRow,
    SampleFigures as SampleFigures,
    Stored as Stored,
    StoredResult as StoredResult,
    StoredRun as StoredRun,
)
from pytest_tokperf.storage.rows import (
    Row,
    bench_result_from_rows,
    ceiling_from_row,
    environment_row,
    hardware_from_row,
    machine_loads_from_json,
    model_from_row,
    result_row,
    run_from_row,
    run_row,
    sample_from_row,
    sample_rows,
    series_of,
    series_row,
    split_environment,
    with_result_columns,
)
from pytest_tokperf.storage.backend import Backend
from pytest_tokperf.storage.location import DbLocation, PgUrl
from pytest_tokperf.storage.schema import SCHEMA_VERSION
from pytest_tokperf.storage.sqlite_backend import SqliteBackend

BUSY_TIMEOUT_S = 30.0
BULK_CACHE_KIB = 64 * 1024
"""Page cache while ``insert_rows`` runs: a results row touches four indexes."""
DB_ENV_VAR = "PYTEST_TOKPERF_DB"
_T = TypeVar("_T")


_HISTORY_FIGURES = """
WITH chosen AS (
  SELECT * FROM series_history
  WHERE series_key = :key
    AND (:since_accepted = 0
         OR NOT EXISTS (SELECT 1 FROM acceptances WHERE series_key = :key)
         OR (created_at, result_id) >= (
              SELECT r.created_at, r.id FROM acceptances a JOIN results r ON r.id = a.result_id
              WHERE a.series_key = :key ORDER BY a.accepted_at DESC, a.id DESC LIMIT 1))
    AND (:exclude_run_id IS NULL OR run_id != :exclude_run_id)
    AND (:engine_version IS NULL OR engine_version = :engine_version
         OR engine_build = :engine_version)
  ORDER BY created_at DESC, result_id DESC
  {limit}
)
SELECT chosen.*, s.ttft_s AS sample_ttft_s, s.prefill_tokens_per_s AS sample_prefill,
       s.decode_tokens_per_s AS sample_decode, s.engine_decode_tokens_per_s AS sample_engine,
       s.generated_tokens AS sample_generated, s.round_index AS sample_round,
       s.round_wall_s AS sample_round_wall
FROM chosen LEFT JOIN samples s ON s.result_id = chosen.result_id
ORDER BY chosen.created_at, chosen.result_id, s.repetition
"""
_SAMPLE_ALIASES = ("sample_ttft_s", "sample_prefill", "sample_decode", "sample_engine",
                   "sample_generated", "sample_round", "sample_round_wall")


def _unwritable(path: DbLocation, exc: BaseException) -> StorageError:
    return StorageError(
        f"cannot write the results database {str(path)!r}: {exc}. Point pytest --tokperf-db "
        f"or tokperf --db (or {DB_ENV_VAR}, or ini tokperf_db) at a writable file, or set it to 'off' "
        f"to run without storing results."
    )


def _locked(path: DbLocation, exc: BaseException) -> StorageError:
    if isinstance(path, PgUrl):
        return StorageError(
            f"the results DB {str(path)!r} kept refusing the write as it conflicted with "
            f"another writer ({exc}) for {BUSY_TIMEOUT_S:g} s; retry, or look for a "
            f"session holding locks there (pg_stat_activity)")
    return StorageError(
        f"the results database {str(path)!r} is locked by another process ({exc}) and "
        f"stayed locked for {BUSY_TIMEOUT_S:g} s: the file is fine, do not move it. Wait "
        f"for the other run (or `tokperf` command) to finish and retry, or use another "
        f"--tokperf-db for this run.")


def _not_a_database(path: DbLocation, exc: BaseException) -> StorageError:
    if isinstance(path, PgUrl):
        return StorageError(f"cannot read the results DB {str(path)!r}: {exc}. Check the server "
                            f"and the role's rights, or name another DB (pytest --tokperf-db, "
                            f"tokperf --db).")
    return StorageError(
        f"{str(path)!r} is not a readable SQLite results database ({exc}). Move it aside "
        f"(a new one is created) or name another file (pytest --tokperf-db, tokperf --db)."
    )


class ResultStore:
    """One open results database. Not thread-safe: one per process or thread."""

    def __init__(self, backend: Backend | Database, path: DbLocation) -> None:
        self.backend: Backend = SqliteBackend(backend) if isinstance(backend, Database) \
            else backend
        self.path = path
        self._held = False
        """A run's transaction is open (``Backend.holds_run``)."""
        self.run_lost = False
        """A held run's commit failed: none of it is stored (its journal keeps it)."""

    @property
    def db(self) -> Database:
        """The sqlite-utils ``Database`` of an SQLite store (the bulk path, tests)."""
        if isinstance(self.backend, SqliteBackend):
            return self.backend.db
        raise StorageError(f"{str(self.path)!r} is a PostgreSQL DB: this needs an SQLite file "
                           f"(tokperf merge {self.path} OUT.db copies it into one)")

    @property
    def kind(self) -> str:
        return self.backend.kind

    @classmethod
    def open(cls, path: DbLocation, *, check_writable: bool = False) -> ResultStore:
        """Open or create ``path``, creating parent folders and migrating the schema.

        ``check_writable``: prove now that a result can be written (a run about to measure
        asks for it), so a read-only file is refused before any work, not after it. An
        SQLite file that holds tables but is no tokperf DB is refused untouched. A
        ``PgUrl`` opens that PostgreSQL database (its tables are created when it has none).
        """
        if isinstance(path, PgUrl):
            return cls._open_postgres(path, check_writable=check_writable)
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S)
        except (OSError, sqlite3.Error) as exc:
            raise _unwritable(path, exc) from exc
        try:
            db = Database(conn, execute_plugins=False)
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            db.execute("PRAGMA foreign_keys = ON")
            store = cls(SqliteBackend(db), path)
            store._check_version(store._user_version())
            store._check_ours(allow_empty=True)
            store._enable_wal()
            store._migrate()
            if check_writable:
                store._check_writable()
        except StorageError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "locked" in str(exc) or "busy" in str(exc):
                raise _locked(path, exc) from exc
            if "readonly" in str(exc) or "unable to open" in str(exc):
                raise _unwritable(path, exc) from exc
            raise _not_a_database(path, exc) from exc
        return store

    @classmethod
    def _open_postgres(cls, url: PgUrl, *, check_writable: bool = False,
                       read_only: bool = False) -> ResultStore:
        from pytest_tokperf.storage.postgres import PostgresBackend

        backend = PostgresBackend(url, read_only=read_only)
        store = cls(backend, url)
        try:
            store._check_ours(allow_empty=not read_only)
            version = backend.schema_version()
            store._check_version(version)
            if read_only and version < SCHEMA_VERSION:
                raise StorageError(
                    f"the results DB {url.shown!r} has schema {version}, older than this "
                    f"pytest-tokperf's {SCHEMA_VERSION}: open it once to write (a pytest run "
                    f"or `tokperf import --db URL`) to migrate it")
            if not read_only:
                store._migrate()
            if check_writable:
                backend.check_writable()
        except StorageError:
            backend.close()
            raise
        except backend.errors as exc:
            backend.close()
            raise _not_a_database(url, exc) from exc
        return store

    @classmethod
    def open_read_only(cls, path: DbLocation) -> ResultStore:
        """Open an existing tokperf DB for reading only (SQLite ``mode=ro``, a PostgreSQL
        session in read-only transactions): nothing is written, whatever it holds.

        A file that is not a tokperf DB (another program's SQLite file, an empty one) is
        refused. One written by an older pytest-tokperf is copied into memory and migrated
        there, so it reads like a current one and stays as it is on disk.
        """
        if isinstance(path, PgUrl):
            return cls._open_postgres(path, read_only=True)
        path = Path(path)
        if not path.is_file():
            raise StorageError(f"results DB {str(path)!r} does not exist")
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error as exc:
            raise _not_a_database(path, exc) from exc
        try:
            db = Database(conn, execute_plugins=False)
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            store = cls(SqliteBackend(db), path)
            version = store._user_version()
            store._check_version(version)
            store._check_ours(allow_empty=False)
            if version < SCHEMA_VERSION:
                memory = sqlite3.connect(":memory:")
                conn.backup(memory)
                conn.close()
                conn = memory
                store = cls(SqliteBackend(Database(memory, execute_plugins=False)), path)
                store._migrate()
        except StorageError:
            conn.close()
            raise
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise _not_a_database(path, exc) from exc
        return store

    def _check_ours(self, *, allow_empty: bool) -> None:
        """Refuse a file that is not a tokperf DB: schema 0 (tokperf sets 1 and up at its
        first open) with tables of its own, or, when ``allow_empty`` is off, no tables."""
        # tables first, then the version: a concurrent opener's first migration commits
        # both at once, so tables seen here mean the version read next sees it too
        tables = self.backend.foreign_tables()
        if self._user_version() > 0:
            return
        if not tables and allow_empty:
            return
        held = (f"holds other tables ({', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''})"
                if tables else "is empty")
        raise StorageError(
            f"{str(self.path)!r} is not a tokperf results DB: it {held} and no tokperf schema; "
            f"it was left as it is. Name the results DB pytest or `tokperf bench` wrote "
            f"(default .tokperf/results.db)."
        )

    def _check_writable(self) -> None:
        """A write that is rolled back: SQLite opens a read-only file without complaint
        and fails only at the first write."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("CREATE TABLE _tokperf_write_check (x)")
        finally:
            self.db.rollback()

    def _enable_wal(self) -> None:
        """Switch to WAL; SQLite answers 'locked' at once (no busy wait) when another
        process opens a new file at the same moment, so retry within the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self.db.enable_wal()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _user_version(self) -> int:
        return self.backend.schema_version()

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"results.db was written by a newer pytest-tokperf (schema {version}, this "
                f"version knows {SCHEMA_VERSION}): upgrade pytest-tokperf or name another "
                f"file: pytest --tokperf-db, tokperf --db (the file is {str(self.path)!r})"
            )

    def _migrate(self) -> None:
        """Apply each missing step in its own transaction; safe against concurrent openers."""
        while True:
            with self._transaction():
                version = self._user_version()
                self._check_version(version)
                if version == SCHEMA_VERSION:
                    return
                self.backend.migrate_step(version)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.backend.begin()
        try:
            yield
            self.backend.commit()
        except BaseException:
            self.backend.rollback()
            raise

    def write(self, action: str, body: Callable[[], _T]) -> _T:
        """Run ``body`` in one immediate transaction, retrying while the file is locked.

        ``action`` completes the error message: "cannot {action} in PATH". Inside a held
        run (``Backend.holds_run``) it is a savepoint of the run's transaction instead.
        """
        if self._held:
            return self._savepoint(action, body)
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                with self._transaction():
                    return body()
            except self.backend.errors as exc:
                locked = self.backend.busy(exc)
                if locked and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                if locked:
                    raise _locked(self.path, exc) from exc
                raise StorageError(f"cannot {action} in {str(self.path)!r}: {exc}") from exc

    def _savepoint(self, action: str, body: Callable[[], _T]) -> _T:
        """``body`` in a savepoint of the held run: a failed write undoes only itself."""
        backend = self.backend
        try:
            backend.execute("SAVEPOINT tokperf_write")
            out = body()
            backend.execute("RELEASE SAVEPOINT tokperf_write")
        except backend.errors as exc:
            try:
                backend.execute("ROLLBACK TO SAVEPOINT tokperf_write")
            except backend.errors:
                pass  # the connection is gone: the run's transaction with it
            raise StorageError(f"cannot {action} in {str(self.path)!r}: {exc}") from exc
        return out

    def _read(self, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> list[Row]:
        try:
            cursor = self.backend.execute(sql, params)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
        except self.backend.errors as exc:
            if self.backend.busy(exc) or "locked" in str(exc) or "busy" in str(exc):
                raise _locked(self.path, exc) from exc
            raise _not_a_database(self.path, exc) from exc

    def query(self, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> list[Row]:
        """Rows of a read-only query (SQL both backends read: ``?``/``:name`` placeholders)."""
        return self._read(sql, params)

    def tuples(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """``query`` as tuples, in the select list's order."""
        return [tuple(r.values()) for r in self._read(sql, params)]

    def columns(self, table: str) -> list[str]:
        """The columns of ``table``, in schema order."""
        return self.backend.columns(table)

    def begin_run(self, run: RunInfo) -> None:
        """Store the run; calling it again with the same id (an xdist worker) is a no-op.

        On a backend that holds runs (PostgreSQL) this opens the run's transaction:
        nothing of it is visible to others until ``finish_run`` commits it."""
        if self.backend.holds_run and not self._held:
            try:
                self.backend.begin()
            except self.backend.errors as exc:
                raise StorageError(f"cannot store run in {str(self.path)!r}: {exc}") from exc
            self._held = True
        self.write("store run", lambda: self.backend.insert_ignore("runs", run_row(run)))

    def record(
        self,
        run_id: str,
        test_id: str,
        result: BenchResult,
        *,
        model: ModelInfo | None,
        hardware: HardwareInfo | None,
        ceiling: Ceiling | None,
        efficiency: float | None,
        verdict: Verdict,
        created_at: str | None = None,
    ) -> Stored:
        """Store one result with its environment and samples; committed on return (on
        PostgreSQL: with its run, at ``finish_run``).
        ``created_at`` (default: now) is the journal's, so an import of the journal
        after this succeeded adds nothing twice."""
        series = series_of(test_id, result, model)
        env = environment_row(result.engine, model, hardware)
        row = {
            "run_id": run_id,
            "series_key": series.key,
            "test_id": test_id,
            "created_at": created_at or utc_now(),
            **result_row(result, ceiling, efficiency, verdict),
        }

        def body() -> int:
            if not self.backend.execute("SELECT 1 FROM runs WHERE run_id = ?",
                                        [run_id]).fetchone():
                raise StorageError(
                    f"run {run_id!r} is not in {str(self.path)!r}: call begin_run() first"
                )
            return self.add_result(env, series_row(series), row, sample_rows(result.samples))

        return Stored(self.write("record a result", body), series.key)

    def add_result(self, env: Row, series: Row, result: Row, samples: Iterable[Row]) -> int:
        """Insert one result with its environment, series and samples; call inside ``write``.

        ``env`` may carry the per-result columns (``identity.PER_RESULT_COLUMNS``, as an
        ``environment_row`` or an older reference run does): they go on the result row,
        where the result has none of its own, and the environment is stored once.
        """
        self.backend.insert_shared("series", series)
        identity, per_result = split_environment(env)
        result = {**result, **{k: v for k, v in per_result.items() if result.get(k) is None},
                  "environment_id": self._environment_id(identity)}
        result_id = cast(int, self.backend.insert("results", result))
        self.backend.insert_all("samples", ({**s, "result_id": result_id} for s in samples))
        return result_id

    def insert_rows(self, table: str, rows: Iterable[Row]) -> int:
        """Insert many rows through prepared statements; returns how many.

        The bulk path (an import, a synthetic history): sqlite-utils' ``insert_all``
        converts and checks every value in Python, which was 80% of its time at 11k
        results/s. Here every row must have the first row's columns, with values SQLite
        takes as they are (str, int, float, bytes, None: JSON columns already text, as
        ``rows`` builds them). Call it inside ``write`` or ``db.atomic()``: one transaction.

        Columns that are None in the first row and have no default are left out of the
        statement while the rows keep them None (binding the ~40 empty ones of a result
        row was over half the insert's time); a row that fills one goes through the
        statement with every column, in its place, so ids follow the input order.
        """
        it = iter(rows)
        first = next(it, None)
        if first is None:
            return 0
        columns = list(first)
        no_default = {name for _, name, _, _, default, _ in
                      self.db.execute(f"PRAGMA table_info([{table}])").fetchall()
                      if default is None}
        empty = [c for c in columns if first[c] is None and c in no_default]
        if len(empty) == len(columns):
            empty = []  # a statement needs a column: a first row of NULLs goes in whole
        kept = [c for c in columns if c not in empty]
        statements = {False: self._insert_statement(table, kept)}
        if empty:
            statements[True] = self._insert_statement(table, columns)
            blanks = operator.itemgetter(*empty)
            fills: Callable[[Row], bool] = (
                (lambda r: blanks(r).count(None) != len(empty)) if len(empty) > 1
                else (lambda r: blanks(r) is not None))
        cache = self.db.execute("PRAGMA cache_size").fetchone()[0]
        self.db.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")  # the indexes stay in memory
        count = 0
        try:
            every = itertools.chain((first,), it)
            runs = itertools.groupby(every, fills) if empty else ((False, every),)
            for full, run in runs:
                sql, pick = statements[full]
                # values by itemgetter in C through map, no generator frame; the groupby
                # key (only when columns were left out) is the one Python call per row
                count += self.db.conn.executemany(sql, map(pick, run)).rowcount
        except KeyError as exc:
            raise StorageError(f"a row for {table!r} lacks column {exc}: every row needs the "
                               f"first row's columns") from exc
        finally:
            self.db.execute(f"PRAGMA cache_size = {int(cache)}")
        return count

    @staticmethod
    def _insert_statement(
        table: str, chosen: list[str]
    ) -> tuple[str, Callable[[Row], tuple[object, ...]]]:
        names = ", ".join(f"[{c}]" for c in chosen)
        sql = f"INSERT INTO [{table}] ({names}) VALUES ({', '.join('?' * len(chosen))})"
        if len(chosen) > 1:
            return sql, operator.itemgetter(*chosen)
        only = chosen[0]
        return sql, lambda r: (r[only],)

    def _environment_id(self, env: Row) -> int:
        self.backend.insert_shared("environments", env)
        found = self.backend.execute(
            "SELECT id FROM environments WHERE env_hash = ?", [env["env_hash"]]
        ).fetchone()
        return int(found[0])

    def finish_run(self, run_id: str) -> None:
        """Stamp the run's end; on a backend that holds runs, commit the run's transaction
        (``StorageError`` when the server refuses: the results are in the journal)."""
        try:
            self.write(
                "finish run",
                lambda: self.backend.execute(
                    "UPDATE runs SET finished_at = ? WHERE run_id = ?", [utc_now(), run_id]
                ),
            )
        finally:  # a missing end time loses nothing: the run is committed all the same
            self.commit_run(run_id)

    def commit_run(self, run_id: str) -> None:
        """Commit a held run's transaction (nothing to do on SQLite, or when none is held);
        ``StorageError`` when the server refuses it: none of the run is stored."""
        if not self._held:
            return
        self._held = False
        try:
            self.backend.commit()
        except self.backend.errors as exc:
            self.run_lost = True
            raise StorageError(f"cannot commit run {run_id!r} in {str(self.path)!r}: "
                               f"{exc}") from exc

    def history(self, series_key: str, limit: int | None = None) -> list[HistoryRow]:
        """A series' results, oldest first; ``limit`` keeps the newest ``limit``."""
        sql = (
            "SELECT * FROM series_history WHERE series_key = ?"
            " ORDER BY created_at DESC, result_id DESC"
        )
        params: tuple[object, ...] = (series_key,)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        return [HistoryRow(**row) for row in reversed(self._read(sql, params))]

    def history_samples(
        self, series_key: str, *, since_result_id: int | None = None, limit: int | None = None
    ) -> list[tuple[HistoryRow, tuple[Sample, ...]]]:
        """A series' results with their repetitions, oldest first, in two queries.

        ``since_result_id`` keeps that result and the later ones (an accepted level);
        ``limit`` keeps the newest ``limit``.
        """
        sql = "SELECT * FROM series_history WHERE series_key = ?"
        params: tuple[object, ...] = (series_key,)
        if since_result_id is not None:
            sql += (" AND (created_at, result_id) >= (SELECT created_at, id FROM results"
                    " WHERE id = ?)")
            params += (since_result_id,)
        sql += " ORDER BY created_at DESC, result_id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        rows = [HistoryRow(**row) for row in reversed(self._read(sql, params))]
        if not rows:
            return []
        marks = ",".join("?" * len(rows))
        found: dict[int, list[Sample]] = {row.result_id: [] for row in rows}
        for sample in self._read(f"SELECT * FROM samples WHERE result_id IN ({marks})"
                                 " ORDER BY result_id, repetition",
                                 tuple(row.result_id for row in rows)):
            found[sample["result_id"]].append(sample_from_row(sample))
        return [(row, tuple(found[row.result_id])) for row in rows]

    def history_figures(
        self,
        series_key: str,
        *,
        since_accepted: bool = True,
        exclude_run_id: str | None = None,
        engine_version: str | None = None,
        limit: int | None = None,
    ) -> list[tuple[HistoryRow, tuple[SampleFigures, ...]]]:
        """A series' results with their repetitions' figures, oldest first, in one query.

        ``since_accepted`` starts at the series' latest accepted level; ``exclude_run_id``
        leaves one run out; ``engine_version`` keeps results whose version or build is
        that; ``limit`` keeps the newest ``limit`` of what is left.
        """
        params: dict[str, object] = {
            "key": series_key, "since_accepted": int(since_accepted),
            "exclude_run_id": exclude_run_id, "engine_version": engine_version}
        if limit is not None:
            params["limit"] = limit
        rows = self._read(_HISTORY_FIGURES.format(
            limit="" if limit is None else "LIMIT :limit"), params)
        out: list[tuple[HistoryRow, list[SampleFigures]]] = []
        for row in rows:
            figures = [row.pop(name) for name in _SAMPLE_ALIASES]
            if not out or out[-1][0].result_id != row["result_id"]:
                out.append((HistoryRow(**row), []))
            if figures[0] is not None:  # a result stored without samples has none
                out[-1][1].append(SampleFigures(*figures))
        return [(row, tuple(figures)) for row, figures in out]

    def machine_loads(self, result_ids: Iterable[int]) -> dict[int, MachineLoad | None]:
        """Each result's machine load over its repetitions (None: not sampled, e.g. stored
        before schema v8)."""
        ids = sorted(set(result_ids))
        if not ids:
            return {}
        rows = self._read(f"SELECT id, machine_load FROM results WHERE id IN "
                          f"({', '.join('?' * len(ids))})", tuple(ids))
        return {row["id"]: machine_loads_from_json(row["machine_load"])[0] for row in rows}

    def set_verdict(self, result_id: int, verdict: Verdict) -> None:
        """Replace a result's verdict (a test's explicit assertion decided after recording)."""
        self.write("update a verdict", lambda: self.backend.execute(
            "UPDATE results SET verdict = ? WHERE id = ?", [verdict, result_id]))

    def save_gate_verdicts(self, verdicts: Iterable[GateVerdict]) -> None:
        """Store (or replace) the gate's final verdicts; committed on return (on
        PostgreSQL: with the run)."""
        rows = [asdict(v) for v in verdicts]
        if rows:
            self.write("store gate verdicts", lambda: self.backend.upsert_all(
                "gate_verdicts", rows, pk=("result_id", "metric")))

    def gate_verdicts(self, result_ids: Iterable[int]) -> dict[int, tuple[GateVerdict, ...]]:
        """The stored gate verdicts of these results, by result id (metric order)."""
        ids = list(result_ids)
        out: dict[int, list[GateVerdict]] = {i: [] for i in ids}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._read(f"SELECT * FROM gate_verdicts WHERE result_id IN ({marks})"
                                  " ORDER BY result_id, metric", tuple(chunk)):
                out[row["result_id"]].append(GateVerdict(**row))
        return {i: tuple(v) for i, v in out.items()}

    def accept(self, series_key: str, result_id: int, *, accepted_by: str | None,
               reason: str | None) -> Acceptance:
        """Record that ``result_id``'s level is the series' baseline from now on."""
        found = self._read("SELECT series_key FROM results WHERE id = ?", (result_id,))
        if not found or found[0]["series_key"] != series_key:
            raise StorageError(f"result {result_id!r} is not a result of series {series_key!r} "
                               f"in {str(self.path)!r}")
        at = utc_now()
        row = {"series_key": series_key, "result_id": result_id, "accepted_at": at,
               "accepted_by": accepted_by, "reason": reason}
        new_id = self.write("record an acceptance",
                            lambda: self.backend.insert("acceptances", row))
        return Acceptance(id=cast(int, new_id), series_key=series_key, result_id=result_id,
                          accepted_at=at, accepted_by=accepted_by, reason=reason)

    def acceptances(self, series_key: str | None = None) -> list[Acceptance]:
        """Accepted levels, oldest first; of one series when ``series_key`` is given."""
        sql = "SELECT * FROM acceptances"
        params: tuple[object, ...] = ()
        if series_key is not None:
            sql += " WHERE series_key = ?"
            params = (series_key,)
        return [Acceptance(**row) for row in self._read(sql + " ORDER BY accepted_at, id", params)]

    def accepted_from(self, series_key: str) -> int | None:
        """The result the series' latest accepted level starts at, or None."""
        found = self.acceptances(series_key)
        return found[-1].result_id if found else None

    def latest_per_series(self) -> list[HistoryRow]:
        rows = self._read("SELECT * FROM latest_results ORDER BY series_key")
        return [HistoryRow(**row) for row in rows]

    def runs(self) -> list[StoredRun]:
        rows = self._read(
            "SELECT runs.*, (SELECT count(*) FROM results WHERE results.run_id = runs.run_id)"
            " AS result_count FROM runs ORDER BY started_at, run_id"
        )
        return [StoredRun(run_from_row(r), r["finished_at"], r["result_count"]) for r in rows]

    def samples(self, result_id: int) -> tuple[Sample, ...]:
        rows = self._read(
            "SELECT * FROM samples WHERE result_id = ? ORDER BY repetition", (result_id,)
        )
        return tuple(sample_from_row(r) for r in rows)

    def result(self, result_id: int) -> StoredResult:
        """Everything ``record`` stored for ``result_id``, rebuilt as value types."""
        found = self._read("SELECT * FROM results WHERE id = ?", (result_id,))
        if not found:
            raise StorageError(f"no result {result_id!r} in {str(self.path)!r}")
        row = found[0]
        env = with_result_columns(
            self._read("SELECT * FROM environments WHERE id = ?", (row["environment_id"],))[0],
            row)
        run = self._read("SELECT * FROM runs WHERE run_id = ?", (row["run_id"],))[0]
        samples = self._read(
            "SELECT * FROM samples WHERE result_id = ? ORDER BY repetition", (result_id,)
        )
        return StoredResult(
            result_id=result_id,
            run=run_from_row(run),
            test_id=row["test_id"],
            series_key=row["series_key"],
            created_at=row["created_at"],
            result=bench_result_from_rows(row, env, samples),
            model=model_from_row(env),
            hardware=hardware_from_row(env),
            ceiling=ceiling_from_row(row),
            efficiency=row["efficiency"],
            verdict=row["verdict"],
        )

    def close(self) -> None:
        """Close the database; a run still held (never finished) is rolled back."""
        try:
            if self._held:
                self._held = False
                self.backend.rollback()
        except self.backend.errors:
            pass
        finally:
            self.backend.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
