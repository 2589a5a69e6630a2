"""Where results live: an SQLite file (a ``Path``) or a PostgreSQL server (``PgUrl``).

The default DB, logs and journals are in ``.tokperf/`` under the project root, the folder
pytest takes as its rootdir (``project_root``): pytest and every verb, run from any folder
of the project, find the same DB. A ``postgresql://`` URL is a DB wherever a DB path is;
its password is in ``PgUrl.dsn`` only, and every message shows the URL without it.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.transport.credentials import redact_url

PG_SCHEMES = ("postgresql://", "postgres://")
TOKPERF_DIR = ".tokperf"
DEFAULT_DB_HELP = (f"default {TOKPERF_DIR}/results.db in the project root, found as pytest "
                   f"finds its rootdir")
NEEDS_PSYCOPG = "PostgreSQL support needs psycopg: pip install 'pytest-tokperf[postgres]'"
_PYTEST_FILES = {"pytest.toml": "", ".pytest.toml": "", "pytest.ini": "", ".pytest.ini": "",
                 "pyproject.toml": r"^\[tool\.pytest[.\]]", "tox.ini": r"^\[pytest\]",
                 "setup.cfg": r"^\[tool:pytest\]"}
"""pytest's config files, each with the section that makes it one ("": any such file)."""


def project_root(start: Path) -> Path:
    """The rootdir pytest takes when run from ``start`` with no arguments: the nearest
    folder with a pytest config file, else with a pyproject.toml, else with a setup.py,
    else ``start``."""
    start = Path(os.path.abspath(start))
    for files in (_PYTEST_FILES, {"pyproject.toml": ""}, {"setup.py": ""}):
        for folder in (start, *start.parents):
            if any(_holds(folder / name, section) for name, section in files.items()):
                return folder
    return start


def _holds(file: Path, section: str) -> bool:
    if not section:
        return file.is_file()
    try:
        return re.search(section, file.read_text(errors="replace"), re.MULTILINE) is not None
    except OSError:
        return False


def default_db(root: Path) -> Path:
    """The results DB pytest and the verbs use when none is named."""
    return root / TOKPERF_DIR / "results.db"


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
        raise ConfigError(f"{where} {shown!r}: {NEEDS_PSYCOPG}") from exc
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


def same_db(a: DbLocation, b: DbLocation) -> bool:
    """Two locations of one DB: the same PostgreSQL URL, or paths to one file."""
    if isinstance(a, PgUrl) or isinstance(b, PgUrl):
        return a == b
    return a.resolve() == b.resolve()


def local_base(location: DbLocation) -> Path:
    """The file that files kept beside a DB (a run's journal, compare-builds' journal,
    logs) are named after: the SQLite file, or for a PostgreSQL DB
    ``.tokperf/postgresql-<dbname>`` under the project root."""
    if isinstance(location, PgUrl):
        return project_root(Path.cwd()) / TOKPERF_DIR / f"postgresql-{file_name(location.name)}"
    return location


def file_name(text: str) -> str:
    """``text`` as one file name that stays in its folder: characters other than
    ``[A-Za-z0-9._-]`` and leading dots replaced, with a hash of ``text`` when changed."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip(".")
    if safe == text:
        return text
    return f"{safe[:64]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
