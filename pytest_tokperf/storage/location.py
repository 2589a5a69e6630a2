"""Where results live: an SQLite file (a ``Path``) or a PostgreSQL server (``PgUrl``).

The default DB, logs and journals are in ``.tokperf/`` under pytest's rootdir
(``project_root``). A ``postgresql://`` URL or a libpq keyword string is a DB wherever a
path is; its password is in ``PgUrl.dsn`` only, never in a message. Every file named after
an identifier (a DB name, a run id) is named by ``named_file``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.transport.credentials import MASK, redact_url

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
        return redact_dsn(self.dsn)

    @property
    def name(self) -> str:
        """The database name (what a report's subtitle names)."""
        return unquote(urlsplit(self.dsn).path.lstrip("/")) or "postgresql"

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"PgUrl({self.shown!r})"


DbLocation = Path | PgUrl


LIBPQ_KEYWORDS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
    "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "requiressl", "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword",
    "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
})
"""The connection keywords libpq knows (``host=... dbname=...`` strings)."""
_SHOWN_KEYWORDS = frozenset({"host", "hostaddr", "port", "dbname"})
_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)\s*")


def keyword_pairs(text: str) -> list[tuple[str, str]] | None:
    """A libpq keyword string as (keyword, value) pairs; None when ``text`` is not one
    (every keyword must be libpq's: a file named ``a=b.db`` stays a file)."""
    pairs: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        found = _PAIR.match(text, position)
        if found is None or found.end() == position or found[1] not in LIBPQ_KEYWORDS:
            return None
        value = found[2]
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs.append((found[1], value))
        position = found.end()
    return pairs or None


def redact_dsn(text: str) -> str:
    """A DSN safe to show: a URL without user info, a keyword string or a URL's query
    with every value but host, hostaddr, port and dbname masked (a URL without a host
    too: ``redact_url`` shows those whole)."""
    stripped = text.strip()
    if not stripped.lower().startswith(PG_SCHEMES):
        pairs = keyword_pairs(stripped)
        if pairs is None:
            return redact_url(text)
        return " ".join(f"{k}={v if k in _SHOWN_KEYWORDS else MASK}" for k, v in pairs)
    scheme, _, rest = stripped.partition("://")
    location, _, query = rest.rpartition("@")[2].partition("?")  # a password may hold / ? #
    pairs = parse_qsl(query.split("#")[0], keep_blank_values=True)
    query = "&".join(f"{quote(k, safe='')}="
                     f"{quote(v, safe='/') if k in _SHOWN_KEYWORDS else MASK}"
                     for k, v in pairs) if pairs else (MASK if query else "")
    return f"{scheme}://{location.split('#')[0]}" + (f"?{query}" if query else "")


def dsn_secrets(dsn: str) -> list[str]:
    """What a message must never hold of ``dsn``: its password (as written and decoded)
    and every query value but host, hostaddr, port and dbname; longest first."""
    rest = dsn.partition("://")[2]
    userinfo, _, tail = rest.rpartition("@")
    password = userinfo.partition(":")[2]
    query = tail.partition("?")[2].split("#")[0]
    found = [password, unquote(password)]
    found += [v for k, v in parse_qsl(query) if k not in _SHOWN_KEYWORDS]
    return sorted({v for v in found if v}, key=len, reverse=True)


def is_pg_url(text: object) -> bool:
    """A ``postgresql://`` URL or a libpq keyword string: a PostgreSQL DB, never a file."""
    if not isinstance(text, str):
        return False
    return text.strip().lower().startswith(PG_SCHEMES) or keyword_pairs(text) is not None


def shown_db(text: str) -> str:
    """A DB as the user gave it, safe to show: a URL or libpq keyword string without its
    secrets, a path as it is."""
    return redact_dsn(text) if is_pg_url(text) else text


def _keyword_url(pairs: list[tuple[str, str]]) -> str:
    """A keyword string as the URL libpq reads the same: the DB name in the path, every
    other keyword a query parameter (whose values every message masks)."""
    values = dict(pairs)
    dbname = values.pop("dbname", "")
    query = urlencode(list(values.items()))
    return f"postgresql:///{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def parse_pg_url(text: str, where: str = "the results DB") -> PgUrl:
    """``text`` as a ``PgUrl``, or a one-line ``ConfigError`` that names it (redacted)."""
    text = text.strip()
    pairs = None if text.lower().startswith(PG_SCHEMES) else keyword_pairs(text)
    if pairs is not None:
        text = _keyword_url(pairs)
    shown = redact_dsn(text)
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
        reason = (str(exc).replace(text, shown).strip().splitlines() or ["refused"])[0]
        for secret in dsn_secrets(text):
            reason = reason.replace(secret, MASK)
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
        return named_file(project_root(Path.cwd()) / TOKPERF_DIR, f"postgresql-{location.name}")
    return location


def file_name(text: str) -> str:
    """``text`` as one file name that stays in its folder (``safe_files.safe_name``)."""
    from pytest_tokperf.safe_files import safe_name  # late: not needed at pytest's start-up

    return safe_name(text)


def named_file(folder: Path, *identifiers: object, suffix: str = "") -> Path:
    """The one place identifiers become a file name: ``folder/<id>.<id>...<suffix>``, in
    ``folder`` whatever they hold (a writer still opens it without following links)."""
    return folder / (".".join(file_name(str(part)) for part in identifiers) + suffix)
