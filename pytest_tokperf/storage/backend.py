"""What ``ResultStore`` asks of its database, implemented by ``sqlite_backend`` and
``postgres``: SQL is written once, in the dialect both read (``?``/``:name``, ``ON
CONFLICT``); what differs sits behind these methods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

Row = dict[str, Any]
Params = Sequence[object] | Mapping[str, object]


class Cursor(Protocol):
    """The DB-API cursor subset the store reads (sqlite3 and psycopg both have it)."""

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Backend(Protocol):
    kind: Literal["sqlite", "postgresql"]
    holds_run: bool
    """True: a run's rows (run, results, samples, verdicts) are written in one transaction
    that ``finish_run`` commits, so a writer killed mid-run leaves nothing of it."""
    errors: tuple[type[Exception], ...]
    """The driver's errors, which the store turns into ``StorageError``."""

    def execute(self, sql: str, params: Params = ()) -> Cursor: ...

    def insert(self, table: str, row: Row) -> int | None:
        """Insert ``row``; the new ``id`` for a table that has one, else None."""
        ...

    def insert_all(self, table: str, rows: Iterable[Row]) -> None: ...

    def insert_shared(self, table: str, row: Row) -> None:
        """Insert a content-addressed row (a series, an environment) unless it is there;
        visible to every writer at once (it is the same for all of them)."""
        ...

    def insert_ignore(self, table: str, row: Row) -> None:
        """Insert ``row`` unless its key is already there, in the current transaction."""
        ...

    def upsert_all(self, table: str, rows: Sequence[Row], pk: Sequence[str]) -> None: ...

    def columns(self, table: str) -> list[str]: ...

    def begin(self) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def busy(self, exc: BaseException) -> bool:
        """True when ``exc`` means another writer holds the database: retry."""
        ...

    def schema_version(self) -> int: ...

    def migrate_step(self, version: int) -> None:
        """Apply ``schema.MIGRATIONS[version]`` and record ``version + 1`` (in a
        transaction the caller holds)."""
        ...

    def foreign_tables(self) -> list[str]:
        """The tables and views of a database at schema 0 (not ours when any)."""
        ...

    def close(self) -> None: ...
