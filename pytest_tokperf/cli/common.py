"""What every ``tokperf`` verb shares: the ``--json`` and ``--db`` options, the DB a verb
reads, the verbs' grouping in ``tokperf --help``.

A verb's parser takes ``parents=[JSON]`` (and ``DB``) instead of declaring the options
again, and names its handler with ``set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.storage import location
from pytest_tokperf.storage.location import (
    DEFAULT_DB_HELP,
    DbLocation,
    default_db,
    is_pg_url,
    project_root,
    redact_dsn,
)

SQLITE_HEADER = b"SQLite format 3\x00"

JSON = argparse.ArgumentParser(add_help=False)
JSON.add_argument("--json", action="store_true", help="print JSON instead of text")

DB_HELP = f"results DB: an SQLite file ({DEFAULT_DB_HELP}) or a postgresql:// URL"
DB = argparse.ArgumentParser(add_help=False)
DB.add_argument("--db", metavar="PATH", default=None, help=DB_HELP)

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("models", ("make-model", "predict")),
    ("engines and builds", ("install-engine", "compare-builds", "bisect", "watch")),
    ("measure", ("bench",)),
    ("results", ("history", "compare", "changes", "accept", "plot", "report", "export",
                 "import", "merge", "save-reference", "import-llama-bench", "outliers")),
)
"""The verbs as ``tokperf --help`` lists them; every verb is in exactly one group."""

EXIT_CODES = """exit status:
  0    done (a verdict table printed, even with regressions, unless --fail)
  1    a regression with --fail; bench: a workload failed or missed --min-efficiency
  2    usage or configuration error (the message names the value and the fix)
  130  interrupted (Ctrl-C)"""

METRICS_HELP = ("decode: generated tok/s (higher is better); prefill: prompt tok/s (higher is "
                "better); ttft: time to first token (lower is better)")


def is_sqlite_file(path: str) -> bool:
    """True when ``path`` is a file that starts with SQLite's header (read, never written)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def chosen_db(args: argparse.Namespace, positional: str | None = None) -> str:
    """The DB a verb works on: ``--db``, else the old positional form, else the default."""
    if args.db is not None and positional is not None:
        raise ConfigError(f"the results DB is given twice: --db {shown_db(args.db)!r} and "
                          f"{shown_db(positional)!r}; "
                          f"drop one")
    return args.db or positional or default_db_here()


def default_db_here() -> str:
    """The default DB (pytest's too) as seen from the current folder."""
    return os.path.relpath(default_db(project_root(Path.cwd())))


DB_SUFFIXES = (".db", ".sqlite", ".sqlite3")
"""File names that mean a database, never a series pattern."""


def db_then_pattern(args: argparse.Namespace, words: list[str],
                    what: str = "SERIES") -> tuple[str, str | None]:
    """``[DB] [SERIES]`` positionals: the DB first when there are two, or when the only one
    is an SQLite file or names one (``*.db``, ``*.sqlite``: a series pattern never does, and
    a missing ``nope.db`` is then refused as a missing DB, not searched for as a series),
    or is a ``postgresql://`` URL; the rest is the pattern."""
    if len(words) > 2:
        raise ConfigError(f"too many arguments {words!r}: give at most a DB and a {what} "
                          f"(or --db PATH and a {what})")
    if len(words) == 2:
        return chosen_db(args, words[0]), words[1]
    if len(words) == 1 and args.db is None and (
            is_sqlite_file(words[0]) or words[0].endswith(DB_SUFFIXES) or is_pg_url(words[0])):
        return words[0], None
    return chosen_db(args), words[0] if words else None


def shown_db(text: str) -> str:
    """A DB as given, safe to show: a URL or libpq keyword string without its secrets."""
    return redact_dsn(text) if is_pg_url(text) else text


def missing_db_hint(path: str) -> ConfigError:
    return ConfigError(f"results DB {path!r} does not exist; pytest and `tokperf bench` write "
                       f"one ({DEFAULT_DB_HELP}), or pass --db PATH")


def is_db_word(word: str) -> bool:
    """A word that can only mean a DB: an SQLite file, ``*.db``/``*.sqlite``, a URL."""
    return is_sqlite_file(word) or word.endswith(DB_SUFFIXES) or is_pg_url(word)


def db_location(path: str) -> DbLocation:
    """A DB a verb writes: a ``PgUrl`` for a ``postgresql://`` URL (checked), else a Path."""
    return location.db_location(path, "--db")


def readable_db(path: str) -> DbLocation:
    """``path`` as a DB to read: a checked ``PgUrl``, or a Path that exists (else the
    missing-file error that names ``--db``)."""
    db = db_location(path)
    if isinstance(db, Path) and not db.is_file():
        raise missing_db_hint(path)
    return db
