"""The embedded default: one SQLite file through sqlite-utils (``backend.Backend``).

The backend opens its own connection (busy timeout, foreign keys, WAL). The schema
version is ``PRAGMA user_version``; writes are ``BEGIN IMMEDIATE`` transactions the store
retries while another process holds the file. Each result is committed as it is recorded
(``holds_run`` is False): pytest-xdist workers and a ``tokperf`` verb share the file.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal, cast

from sqlite_utils import Database

from pytest_tokperf.storage.backend import Cursor, Params, Row
from pytest_tokperf.storage.schema import MIGRATIONS


class SqliteBackend:
    kind: Literal["sqlite", "postgresql"] = "sqlite"
    holds_run = False
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    connect_errors: tuple[type[Exception], ...] = (OSError, sqlite3.Error)

    def __init__(self, db: Database) -> None:
        self.db = db

    @classmethod
    def connect(cls, path: Path, timeout_s: float, *, read_only: bool = False
                ) -> SqliteBackend:
        """Open ``path`` (created with its folders unless ``read_only``, which opens it
        ``mode=ro``) with a busy timeout; foreign keys on for writing. Raises one of
        ``connect_errors``."""
        if read_only:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                   timeout=timeout_s)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=timeout_s)
        try:
            db = Database(conn, execute_plugins=False)
            db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            if not read_only:
                db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error:
            conn.close()
            raise
        return cls(db)

    def in_memory_copy(self) -> SqliteBackend:
        """The database copied into memory (to migrate an old file opened read-only); this
        connection is closed."""
        memory = sqlite3.connect(":memory:")
        self.db.conn.backup(memory)
        self.db.conn.close()
        return SqliteBackend(Database(memory, execute_plugins=False))

    def enable_wal(self, timeout_s: float) -> None:
        """Switch to WAL; SQLite answers 'locked' at once (no busy wait) when another
        process opens a new file at the same moment, so retry within the busy timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.db.enable_wal()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def check_writable(self) -> None:
        """A write that is rolled back: SQLite opens a read-only file without complaint
        and fails only at the first write."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("CREATE TABLE _tokperf_write_check (x)")
        finally:
            self.db.rollback()

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        return cast(Cursor, self.db.execute(sql, params if isinstance(params, Sequence)
                                             else dict(params)))

    def insert(self, table: str, row: Row) -> int | None:
        return self.db.table(table).insert(row).last_rowid

    def insert_all(self, table: str, rows: Iterable[Row]) -> None:
        self.db.table(table).insert_all(rows)

    def insert_shared(self, table: str, row: Row) -> None:
        self.db.table(table).insert(row, ignore=True)

    def insert_ignore(self, table: str, row: Row) -> None:
        self.db.table(table).insert(row, ignore=True)

    def upsert_all(self, table: str, rows: Sequence[Row], pk: Sequence[str]) -> None:
        self.db.table(table).upsert_all(rows, pk=tuple(pk))

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.db.execute(f"PRAGMA table_info([{table}])").fetchall()]

    def begin(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.db.commit()

    def rollback(self) -> None:
        self.db.rollback()

    def busy(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and (
            "locked" in str(exc) or "busy" in str(exc))

    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def migrate_step(self, version: int) -> None:
        MIGRATIONS[version](self.db)
        self.db.execute(f"PRAGMA user_version = {version + 1}")

    def foreign_tables(self) -> list[str]:
        return [r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            " AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()]

    def close(self) -> None:
        self.db.close()
