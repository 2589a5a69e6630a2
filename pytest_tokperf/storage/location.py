"""Where results live: an SQLite file (a ``Path``) or a PostgreSQL server (``PgUrl``).

A ``postgresql://`` or ``postgres://`` URL is a DB everywhere a DB path is accepted
(``--tokperf-db``, ``tokperf --db``, the DB words of the verbs). The password, if the URL
carries one, is in ``PgUrl.dsn`` only: ``str()``, ``repr()`` and every message show the
URL without it (``transport.credentials.redact_url``), and nothing stores it. Prefer no
password in the URL at all: libpq reads ``PGPASSWORD`` or ``~/.pgpass``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.transport.credentials import redact_url

PG_SCHEMES = ("postgresql://", "postgres://")


@dataclass(frozen=True, slots=True)
class PgUrl:
    """A PostgreSQL results DB; ``dsn`` is the URL as given (maybe with a password)."""

    dsn: str = field(repr=False)

    @property
    def shown(self) -> str:
        """The URL without user info and with query values masked: safe to show."""
        return redact_url(self.dsn)

    @property
    def name(self) -> str:
        """The database name (what a report's subtitle names)."""
        return urlsplit(self.dsn).path.lstrip("/") or "postgresql"

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"PgUrl({self.shown!r})"


DbLocation = Path | PgUrl


def is_pg_url(text: object) -> bool:
    return isinstance(text, str) and text.strip().lower().startswith(PG_SCHEMES)


def parse_pg_url(text: str, where: str = "the results DB") -> PgUrl:
    """``text`` as a ``PgUrl``, or a one-line ``ConfigError`` that names it (redacted)."""
    text = text.strip()
    shown = redact_url(text)
    hint = ("write postgresql://USER@HOST[:PORT]/DBNAME (or postgresql:///DBNAME?host=/socket/dir); "
            "keep the password in PGPASSWORD or ~/.pgpass")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ConfigError(f"{where} {shown!r} is not a PostgreSQL URL ({exc}); {hint}") from exc
    if not parts.path.strip("/"):
        raise ConfigError(f"{where} {shown!r} names no database; {hint}")
    try:
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(text)
    except ImportError as exc:
        raise ConfigError(f"{where} {shown!r} needs psycopg (pip install 'psycopg[binary]')"
                          ) from exc
    except Exception as exc:  # psycopg.ProgrammingError: libpq's parser said no
        reason = str(exc).replace(text, shown).strip().splitlines()[0]
        if parts.password:
            reason = reason.replace(parts.password, "***")
        raise ConfigError(f"{where} {shown!r} is not a PostgreSQL URL ({reason}); {hint}"
                          ) from exc
    return PgUrl(text)


def db_location(value: str | Path | PgUrl, where: str = "the results DB") -> DbLocation:
    """A DB path or URL as the store opens it: ``PgUrl`` for a PostgreSQL URL, else a
    ``Path`` (``~`` expanded)."""
    if isinstance(value, (Path, PgUrl)):
        return value
    if is_pg_url(value):
        return parse_pg_url(value, where)
    return Path(value).expanduser()


def local_base(location: DbLocation) -> Path:
    """The file that files kept beside a DB (a run's journal, compare-builds' journal,
    logs) are named after: the SQLite file, or for a PostgreSQL DB
    ``.tokperf/postgresql-<dbname>`` in the current folder."""
    if isinstance(location, PgUrl):
        return Path.cwd() / ".tokperf" / f"postgresql-{location.name}"
    return location
