"""The embedded default: one SQLite file through sqlite-utils (``backend.Backend``).

The schema version is ``PRAGMA user_version``; writes are ``BEGIN IMMEDIATE``
transactions the store retries while another process holds the file. Each result is
committed as it is recorded (``holds_run`` is False): pytest-xdist workers and a
``tokperf`` verb share the file, and a transaction held for a whole session would lock
them all out; a writer killed mid-result leaves nothing of that result.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Literal, cast

from sqlite_utils import Database

from pytest_tokperf.storage.backend import Cursor, Params, Row
from pytest_tokperf.storage.schema import MIGRATIONS


class SqliteBackend:
    kind: Literal["sqlite", "postgresql"] = "sqlite"
    holds_run = False
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(self, db: Database) -> None:
        self.db = db

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        return cast(Cursor, self.db.execute(sql, params if isinstance(params, Sequence)
                                             else dict(params)))

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> int:
        return int(self.db.conn.executemany(sql, rows).rowcount)

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
