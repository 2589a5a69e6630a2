"""The shared store: one PostgreSQL database a fleet of runners writes (``backend.Backend``).

psycopg 3 only, imported when a ``postgresql://`` DB is opened; the SQLite store's
migrations run through ``_Migrator`` (text collates as ``"C"``, booleans are 0/1). A
run's writes are held in one transaction that ``finish_run`` commits; the rows every
writer shares (series, environments) are committed at once on a second connection, so
one runner's open run never makes another wait.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from pytest_tokperf.errors import StorageError
from pytest_tokperf.storage.backend import Cursor, Params, Row
from pytest_tokperf.storage.location import NEEDS_PSYCOPG, PgUrl, dsn_secrets
from pytest_tokperf.storage.schema import MIGRATIONS

if TYPE_CHECKING:
    import psycopg

_TYPES: dict[type, str] = {str: 'TEXT COLLATE "C"', int: "BIGINT", float: "DOUBLE PRECISION",
                           bool: "BIGINT"}
_ID_TABLES = frozenset({"environments", "results", "acceptances"})
"""Tables whose primary key is an ``id`` the database assigns."""
_MIGRATION_LOCK = 0x746F6B70  # 'tokp': the advisory lock migrators queue on
_TOKEN = re.compile(r"'(?:[^']|'')*'|\?|(?<![:\w]):([A-Za-z_]\w*)|%")


def pg_sql(sql: str) -> str:
    """``?`` and ``:name`` placeholders as psycopg's ``%s`` and ``%(name)s``; ``%`` doubled."""
    def sub(match: re.Match[str]) -> str:
        token = match.group(0)
        if token.startswith("'"):
            return token.replace("%", "%%")
        if token == "?":
            return "%s"
        if token == "%":
            return "%%"
        return f"%({match.group(1)})s"

    return _TOKEN.sub(sub, sql)


def _plain(value: object) -> object:
    return int(value) if isinstance(value, bool) else value


def _params(params: Params) -> Sequence[object] | Mapping[str, object]:
    if isinstance(params, Mapping):
        return {k: _plain(v) for k, v in params.items()}
    return [_plain(v) for v in params]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def connect(url: PgUrl, *, read_only: bool = False) -> psycopg.Connection[Any]:
    """An autocommit connection with client-side binding (NULL and 0/1 parameters read
    as SQLite reads them); ``StorageError`` naming the redacted URL when it fails."""
    import psycopg

    try:
        conn = psycopg.connect(url.dsn, autocommit=True, cursor_factory=psycopg.ClientCursor,
                               options="-c default_transaction_read_only=on" if read_only
                               else None, connect_timeout=30)
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot connect to the results DB {url.shown!r}: {_scrub(str(exc), url)}. Check "
            f"the server is up and the role may log in (password in PGPASSWORD or ~/.pgpass), "
            f"or name another DB (pytest --tokperf-db, tokperf --db)") from exc
    return conn


def _scrub(text: str, url: PgUrl) -> str:
    text = text.replace(url.dsn, url.shown).strip().replace("\n", " ")
    for secret in dsn_secrets(url.dsn):
        text = text.replace(secret, "***")
    return text


class PostgresBackend:
    kind: Literal["sqlite", "postgresql"] = "postgresql"
    holds_run = True

    def __init__(self, url: PgUrl, *, read_only: bool = False) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise StorageError(f"the results DB {url.shown!r}: {NEEDS_PSYCOPG}") from exc

        self.url = url
        self.errors: tuple[type[Exception], ...] = (psycopg.Error,)
        self.conn = connect(url, read_only=read_only)
        self._side: psycopg.Connection[Any] | None = None
        self._in_transaction = False

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        if not params:
            return cast(Cursor, self.conn.execute(cast(Any, sql)))
        return cast(Cursor, self.conn.execute(cast(Any, pg_sql(sql)), _params(params)))

    @staticmethod
    def _insert_sql(table: str, columns: Sequence[str]) -> str:
        names = ", ".join(_quote(c) for c in columns)
        return f"INSERT INTO {_quote(table)} ({names}) VALUES ({', '.join('?' * len(columns))})"

    def insert(self, table: str, row: Row) -> int | None:
        sql = self._insert_sql(table, list(row))
        if table not in _ID_TABLES:
            self.execute(sql, list(row.values()))
            return None
        return int(self.execute(sql + " RETURNING id", list(row.values())).fetchone()[0])

    def insert_all(self, table: str, rows: Iterable[Row]) -> None:
        for row in rows:
            self.insert(table, row)

    def insert_ignore(self, table: str, row: Row) -> None:
        self.execute(self._insert_sql(table, list(row)) + " ON CONFLICT DO NOTHING",
                     list(row.values()))

    def insert_shared(self, table: str, row: Row) -> None:
        if not self._in_transaction:
            self.insert_ignore(table, row)
            return
        if self._side is None:
            self._side = connect(self.url)
        self._side.execute(cast(Any, pg_sql(self._insert_sql(table, list(row))
                                             + " ON CONFLICT DO NOTHING")),
                           _params(list(row.values())))

    def upsert_all(self, table: str, rows: Sequence[Row], pk: Sequence[str]) -> None:
        for row in rows:
            others = [c for c in row if c not in pk]
            updates = ", ".join(f"{_quote(c)} = EXCLUDED.{_quote(c)}" for c in others)
            conflict = f" ON CONFLICT ({', '.join(_quote(c) for c in pk)}) DO " + (
                f"UPDATE SET {updates}" if others else "NOTHING")
            self.execute(self._insert_sql(table, list(row)) + conflict, list(row.values()))

    def columns(self, table: str) -> list[str]:
        return [r[0] for r in self.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema ="
            " current_schema() AND table_name = ? ORDER BY ordinal_position", [table]
        ).fetchall()]

    def begin(self) -> None:
        self.conn.execute("BEGIN")
        self._in_transaction = True

    def commit(self) -> None:
        self._in_transaction = False
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        self._in_transaction = False
        self.conn.execute("ROLLBACK")

    def busy(self, exc: BaseException) -> bool:
        import psycopg.errors as e

        return isinstance(exc, (e.SerializationFailure, e.DeadlockDetected,
                                e.LockNotAvailable))

    def schema_version(self) -> int:
        if self._in_transaction:  # a migrator: the others wait here until it commits
            self.conn.execute(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        # pg_class read through this statement's snapshot, not to_regclass: a name lookup
        # goes through the backend's catalog cache, which keeps "no such table" from before
        # the wait and so reran a migration the other opener had just committed
        found = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relname = 'tokperf_schema'"
            " AND relnamespace = current_schema()::regnamespace)").fetchone()
        if found is None or not found[0]:
            return 0
        row = self.conn.execute("SELECT max(version) FROM tokperf_schema").fetchone()
        return int(row[0] or 0) if row else 0

    def migrate_step(self, version: int) -> None:
        from sqlite_utils import Database

        MIGRATIONS[version](cast(Database, _Migrator(self)))
        self.conn.execute("CREATE TABLE IF NOT EXISTS tokperf_schema (version BIGINT NOT NULL)")
        self.conn.execute("DELETE FROM tokperf_schema")
        self.execute("INSERT INTO tokperf_schema (version) VALUES (?)", [version + 1])

    def foreign_tables(self) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema ="
            " current_schema() ORDER BY table_name").fetchall()]

    def check_writable(self) -> None:
        """Refuse a read-only server or a role that may not insert results, before work."""
        found = self.conn.execute(
            "SELECT current_setting('transaction_read_only'),"
            " has_table_privilege('results', 'INSERT')").fetchone()
        if found is None or found[0] == "on" or not found[1]:
            raise StorageError(
                f"cannot write the results database {self.url.shown!r}: the server is read-"
                f"only or the role may not insert into it. Grant the role INSERT and UPDATE "
                f"on the tokperf tables, or point pytest --tokperf-db or tokperf --db "
                f"elsewhere ('off' runs without storing results)")

    def close(self) -> None:
        for conn in (self._side, self.conn):
            if conn is not None:
                conn.close()
        self._side = None

    def __del__(self) -> None:
        """A store a verb never closed: its connections close with it, not as a warning."""
        try:
            self.close()
        except Exception:  # interpreter shutdown, a connection already broken
            pass


class _Table:
    """The sqlite-utils ``Table`` calls the migrations make, as PostgreSQL DDL."""

    def __init__(self, backend: PostgresBackend, name: str) -> None:
        self.backend, self.name = backend, name

    def create(self, columns: Mapping[str, type], pk: str | Sequence[str],
               not_null: Iterable[str] = (),
               foreign_keys: Iterable[tuple[str, str, str]] = ()) -> None:
        required = set(not_null)
        parts = []
        for name, kind in columns.items():
            if pk == name and kind is int:
                parts.append(f"{_quote(name)} BIGINT GENERATED BY DEFAULT AS IDENTITY")
            else:
                parts.append(f"{_quote(name)} {_TYPES[kind]}"
                             + (" NOT NULL" if name in required else ""))
        keys = [pk] if isinstance(pk, str) else list(pk)
        parts.append(f"PRIMARY KEY ({', '.join(_quote(k) for k in keys)})")
        parts += [f"FOREIGN KEY ({_quote(c)}) REFERENCES {_quote(t)} ({_quote(o)})"
                  for c, t, o in foreign_keys]
        self.backend.execute(f"CREATE TABLE {_quote(self.name)} ({', '.join(parts)})")

    def create_index(self, columns: Sequence[str], unique: bool = False) -> None:
        index = _quote(f"idx_{self.name}_{'_'.join(columns)}")
        self.backend.execute(f"CREATE {'UNIQUE ' if unique else ''}INDEX {index} ON "
                             f"{_quote(self.name)} ({', '.join(_quote(c) for c in columns)})")

    def add_column(self, name: str, kind: type, not_null_default: object = None) -> None:
        sql = f"ALTER TABLE {_quote(self.name)} ADD COLUMN {_quote(name)} {_TYPES[kind]}"
        if not_null_default is not None:
            sql += f" NOT NULL DEFAULT {int(cast(int, not_null_default))}"
        self.backend.execute(sql)


class _Migrator:
    """Stands in for the sqlite-utils ``Database`` a migration step is given."""

    def __init__(self, backend: PostgresBackend) -> None:
        self.backend = backend

    def table(self, name: str) -> _Table:
        return _Table(self.backend, name)

    def create_view(self, name: str, sql: str) -> None:
        self.backend.execute(f"CREATE VIEW {_quote(name)} AS {sql}")

    def execute(self, sql: str, params: Params = ()) -> Cursor:
        return self.backend.execute(sql, params)
