"""The results store: ``ResultStore`` opens, migrates and writes through a
``backend.Backend``; its reads are ``reads.StoreReads``. On SQLite each ``record`` is one
short transaction; on PostgreSQL a run's rows are one transaction from ``begin_run`` to
``finish_run``, each write a savepoint of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar, cast

from sqlite_utils import Database

from pytest_tokperf.environment import utc_now
from pytest_tokperf.errors import StorageError
from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, ModelInfo, RunInfo, Verdict
from pytest_tokperf.storage.backend import Backend
from pytest_tokperf.storage.location import DbLocation, PgUrl
from pytest_tokperf.storage.reads import StoreReads
from pytest_tokperf.storage.records import (  # re-exported: they were defined here
    Acceptance, GateVerdict as GateVerdict, HistoryRow as HistoryRow, Stored as Stored,
    StoredResult as StoredResult,
)
from pytest_tokperf.storage.rows import (
    Row, environment_row, result_row, run_row, sample_rows, series_of, series_row,
    split_environment,
)
from pytest_tokperf.storage.schema import SCHEMA_VERSION
from pytest_tokperf.storage.sqlite_backend import SqliteBackend

BUSY_TIMEOUT_S = 30.0
DB_ENV_VAR = "PYTEST_TOKPERF_DB"
_T = TypeVar("_T")


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


_NO_ROOM = ("disk i/o error", "disk is full", "unable to open", "readonly", "read-only",
            "out of memory")
"""SQLite's words when the disk or folder, not the file, is at fault (no room, no write)."""


def _no_room(path: DbLocation, exc: BaseException) -> StorageError:
    return StorageError(
        f"cannot use the results database {str(path)!r}: its disk or folder is full or "
        f"read-only ({exc}); SQLite needs room beside the file for its -wal and -shm files. "
        f"The database itself is intact: do not move or delete it. Free space or make the "
        f"folder writable and retry, or name a DB elsewhere (pytest --tokperf-db, tokperf "
        f"--db).")


def _sqlite_failure(path: Path, exc: BaseException) -> StorageError:
    """The message for an SQLite error on ``path``: locked, no room, or not a database."""
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return _locked(path, exc)
    if any(words in text for words in _NO_ROOM):
        return _no_room(path, exc)
    return _not_a_database(path, exc)


def _not_a_database(path: DbLocation, exc: BaseException) -> StorageError:
    if isinstance(path, PgUrl):
        return StorageError(f"cannot read the results DB {str(path)!r}: {exc}. Check the server "
                            f"and the role's rights, or name another DB (pytest --tokperf-db, "
                            f"tokperf --db).")
    return StorageError(
        f"{str(path)!r} is not a readable SQLite results database ({exc}). Move it aside "
        f"(a new one is created) or name another file (pytest --tokperf-db, tokperf --db)."
    )


class ResultStore(StoreReads):
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
        """The sqlite-utils ``Database`` of an SQLite store (tests, benchmarks)."""
        return self._sqlite.db

    @property
    def _sqlite(self) -> SqliteBackend:
        if isinstance(self.backend, SqliteBackend):
            return self.backend
        raise StorageError(f"{str(self.path)!r} is a PostgreSQL DB: this needs an SQLite file "
                           f"(tokperf merge {self.path} OUT.db copies it into one)")

    @property
    def kind(self) -> str:
        return self.backend.kind

    @classmethod
    def open(cls, path: DbLocation, *, check_writable: bool = False) -> ResultStore:
        """Open or create ``path`` (a file, its folders made, or a ``PgUrl``) and migrate it;
        ``check_writable`` refuses a read-only DB before any work. A DB with foreign tables
        is refused untouched."""
        if isinstance(path, PgUrl):
            return cls._open_postgres(path, check_writable=check_writable)
        path = Path(path)
        try:
            backend = SqliteBackend.connect(path, BUSY_TIMEOUT_S)
        except SqliteBackend.connect_errors as exc:
            raise _unwritable(path, exc) from exc
        store = cls(backend, path)
        try:
            store._check_version(backend.schema_version())
            store._check_ours(allow_empty=True)
            backend.enable_wal(BUSY_TIMEOUT_S)
            store._migrate()
            if check_writable:
                backend.check_writable()
        except StorageError:
            backend.close()
            raise
        except SqliteBackend.errors as exc:
            backend.close()
            if "readonly" in str(exc) or "unable to open" in str(exc):
                raise _unwritable(path, exc) from exc
            raise _sqlite_failure(path, exc) from exc
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
        """Open an existing tokperf DB read-only (SQLite ``mode=ro``, PostgreSQL read-only
        transactions); a file that is no tokperf DB is refused, an older one is migrated in
        memory and stays as it is on disk."""
        if isinstance(path, PgUrl):
            return cls._open_postgres(path, read_only=True)
        path = Path(path)
        if not path.is_file():
            raise StorageError(f"results DB {str(path)!r} does not exist")
        try:
            backend = SqliteBackend.connect(path, BUSY_TIMEOUT_S, read_only=True)
        except SqliteBackend.errors as exc:
            raise _sqlite_failure(path, exc) from exc
        store = cls(backend, path)
        try:
            version = backend.schema_version()
            store._check_version(version)
            store._check_ours(allow_empty=False)
            if version < SCHEMA_VERSION:
                store = cls(backend.in_memory_copy(), path)
                store._migrate()
        except StorageError:
            store.backend.close()
            raise
        except SqliteBackend.errors as exc:
            store.backend.close()
            raise _sqlite_failure(path, exc) from exc
        return store

    def _check_ours(self, *, allow_empty: bool) -> None:
        """Refuse a file that is not a tokperf DB: schema 0 (tokperf sets 1 and up at its
        first open) with tables of its own, or, when ``allow_empty`` is off, no tables."""
        # tables first, then the version: a concurrent opener's first migration commits
        # both at once, so tables seen here mean the version read next sees it too
        tables = self.backend.foreign_tables()
        if self.backend.schema_version() > 0:
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
                version = self.backend.schema_version()
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
        """Run ``body`` in one transaction (a savepoint inside a held run), retrying while the
        DB is locked; ``action`` completes the message "cannot {action} in PATH"."""
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
                if not isinstance(self.path, PgUrl) and any(
                        words in str(exc).lower() for words in _NO_ROOM):
                    raise _no_room(self.path, exc) from exc
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
            if self.backend.busy(exc):
                raise _locked(self.path, exc) from exc
            if isinstance(self.path, PgUrl):
                raise _not_a_database(self.path, exc) from exc
            raise _sqlite_failure(self.path, exc) from exc

    def begin_run(self, run: RunInfo) -> None:
        """Store the run (again with the same id: a no-op); on PostgreSQL, open the run's
        transaction, which ``finish_run`` commits."""
        if self.backend.holds_run and not self._held:
            try:
                self.backend.begin()
            except self.backend.errors as exc:
                raise StorageError(f"cannot store run in {str(self.path)!r}: {exc}") from exc
            self._held = True
        self.write("store run", lambda: self.backend.insert_ignore("runs", run_row(run)))

    def record(self, run_id: str, test_id: str, result: BenchResult, *,
               model: ModelInfo | None, hardware: HardwareInfo | None, ceiling: Ceiling | None,
               efficiency: float | None, verdict: Verdict, created_at: str | None = None
               ) -> Stored:
        """Store one result with its environment and samples; committed on return (on
        PostgreSQL at ``finish_run``). ``created_at`` (default: now) is the journal's, so
        importing the journal afterwards adds nothing twice."""
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
        Per-result columns ``env`` carries go on the result where it has none of its own."""
        self.backend.insert_shared("series", series)
        identity, per_result = split_environment(env)
        result = {**result, **{k: v for k, v in per_result.items() if result.get(k) is None},
                  "environment_id": self._environment_id(identity)}
        result_id = cast(int, self.backend.insert("results", result))
        self.backend.insert_all("samples", ({**s, "result_id": result_id} for s in samples))
        return result_id

    def _environment_id(self, env: Row) -> int:
        self.backend.insert_shared("environments", env)
        found = self.backend.execute(
            "SELECT id FROM environments WHERE env_hash = ?", [env["env_hash"]]
        ).fetchone()
        return int(found[0])

    def finish_run(self, run_id: str) -> None:
        """Stamp the run's end and commit a held run (``StorageError`` when refused)."""
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

    def set_verdict(self, result_id: int, verdict: Verdict) -> None:
        """Replace a result's verdict (a test's explicit assertion decided after recording)."""
        self.write("update a verdict", lambda: self.backend.execute(
            "UPDATE results SET verdict = ? WHERE id = ?", [verdict, result_id]))

    def save_gate_verdicts(self, verdicts: Iterable[GateVerdict]) -> None:
        """Store (or replace) the gate's final verdicts (on PostgreSQL: with the run)."""
        rows = [asdict(v) for v in verdicts]
        if rows:
            self.write("store gate verdicts", lambda: self.backend.upsert_all(
                "gate_verdicts", rows, pk=("result_id", "metric")))

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
