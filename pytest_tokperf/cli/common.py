"""What every ``tokperf`` verb shares: the ``--json`` and ``--db`` options, the DB a verb
names, the verbs' grouping in ``tokperf --help``.

A verb's parser takes ``parents=[JSON]`` (and ``DB``) instead of declaring the options
again, and names its handler with ``set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pytest_tokperf.storage import location
from pytest_tokperf.storage.location import (
    DEFAULT_DB_HELP,
    DbLocation,
    default_db,
    project_root,
)

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


def chosen_db(args: argparse.Namespace) -> str:
    """The DB a verb works on: ``--db``, else the default DB as seen from here."""
    return args.db or os.path.relpath(default_db(project_root(Path.cwd())))


def db_location(path: str) -> DbLocation:
    """A DB a verb writes: a ``PgUrl`` for a ``postgresql://`` URL (checked), else a Path."""
    return location.db_location(path, "--db")
