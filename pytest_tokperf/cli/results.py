"""``tokperf history``, ``compare``, ``changes`` and ``accept``: the verbs that read and
judge stored results (``report.history``, ``versions.compare``, ``storage.lookup``).

Every verb takes ``--db`` (default: the DB pytest writes): an SQLite file or a
``postgresql://`` URL; the verbs that only read open it read-only and refuse a DB that is
no tokperf DB, leaving it as it is.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from pytest_tokperf.cli.common import DB, JSON, chosen_db, db_location
from pytest_tokperf.cli.output import emit
from pytest_tokperf.errors import ConfigError


def _series_word(p: argparse.ArgumentParser, default: str = "every series") -> None:
    p.add_argument("series", nargs="?", metavar="SERIES",
                   help=f"series key prefix or part of a test id (default: {default})")


def history(args: argparse.Namespace) -> int:
    """Every series, or one series' runs with its noise and what it can detect."""
    from pytest_tokperf.report.history import history as shown_history
    from pytest_tokperf.storage.lookup import open_for_reading

    shown = shown_history(open_for_reading(chosen_db(args)), args.series)
    emit(args, shown.data, shown.lines)
    return 0


def changes(args: argparse.Namespace) -> int:
    """Detected level steps per series, with what changed there."""
    from pytest_tokperf.report.history import changes as shown_changes
    from pytest_tokperf.storage.lookup import open_for_reading

    shown = shown_changes(open_for_reading(chosen_db(args)), args.series)
    emit(args, shown.data, shown.lines)
    return 0


def compare(args: argparse.Namespace) -> int:
    """The verdict table (or ``--json``, or ``-o md``); ``--fail``: exit 1 on a regression."""
    from pytest_tokperf.report.verdicts import compare_lines, compare_markdown
    from pytest_tokperf.versions.compare import compare_stored

    if args.json and args.output == "md":
        raise ConfigError("--json and -o md both choose what compare prints; give one")
    result = compare_stored(chosen_db(args), args.other_db, args.baseline, args.current)
    if result.picked:
        print(f"tokperf compare: baseline {result.baseline_name}, current "
              f"{result.current_name} ({result.picked}; --baseline/--current name others)",
              file=sys.stderr)
    if args.output == "md":
        print("\n".join(compare_markdown(result)))
    else:
        emit(args, {s.series_key: asdict(s.verdict) for s in result.series},
             compare_lines(result))
    regressed = any(s.verdict.verdict == "regression" for s in result.series)
    return 1 if args.fail and regressed else 0


def accept(args: argparse.Namespace) -> int:
    """Record a deliberate new level: the gate's baseline starts at the accepted result."""
    from pytest_tokperf.storage.lookup import accept_levels, open_for_reading
    from pytest_tokperf.storage.store import ResultStore

    db = chosen_db(args)
    open_for_reading(db).close()  # a tokperf DB, or refused before anything is written
    with ResultStore.open(db_location(db)) as store:
        accepted = accept_levels(store, args.series, every=args.all, result_id=args.result,
                                 by=args.by, reason=args.reason)
    emit(args, [asdict(a) for _, a in accepted],
         [f"accepted {r.series_key[:12]} {r.test_id}: baseline from result {a.result_id} "
          f"({r.engine_build or r.engine_version or '?'}), by {a.accepted_by}: {a.reason}"
          for r, a in accepted])
    return 0


def add_history(verbs: Any) -> None:
    p = verbs.add_parser(
        "history", parents=[DB, JSON], help="stored series, or one series' runs and noise",
        description="Without SERIES: every stored series, sorted by test id, with its latest "
        "build, the figure it is judged on (decode; prefill for a prompt-only llama-bench row) "
        "and efficiency. With SERIES: that series' runs, its gate verdicts and "
        "its noise (the smallest change it can detect).",
        usage="tokperf history [--db PATH] [SERIES] [--json]")
    _series_word(p)
    p.set_defaults(func=history)


def add_compare(verbs: Any) -> None:
    p = verbs.add_parser(
        "compare", parents=[DB, JSON], help="tok/s of two engine versions, or two DBs "
        "(decode; prefill for a prompt-only series)",
        description="Per series, each stored run a session (its repetitions nested in it): "
        "significant AND at least 5% -> regression or improvement; too noisy or "
        "phase-dominated -> inconclusive. Holm across series. A version is written "
        "as install-engine takes it (9093, b9093, 9093.0.0) or as stored (b9093-pypi-sdist); "
        "one not named is the build measured last (without either: the two measured last, "
        "older release as baseline), as compare-llama-bench picks its commits, and stderr "
        "says which. -o md prints compare-llama-bench's table for a pull request: each "
        "series' tg (decode) and pp (prefill) rows with both sides' mean t/s (llama-bench's "
        "avg_ts, as compare-llama-bench shows it) and B/A, their median t/s, TTFT where "
        "measured, then the same verdict and its interval.",
        usage="tokperf compare [--db PATH] [OTHER_DB] [--baseline V --current V] "
        "[-o text|md] [--fail]")
    p.add_argument("other_db", nargs="?", metavar="OTHER_DB",
                   help="a second DB: its latest run per series is 'current'")
    p.add_argument("--baseline", help="baseline engine version or build (default: picked, "
                   "as said above)")
    p.add_argument("--current", help="current engine version or build (default: picked)")
    p.add_argument("--output", "-o", choices=["text", "md"], default="text",
                   help="text: the verdict table (default); md: a GitHub table to paste into "
                   "a pull request (as compare-llama-bench.py prints)")
    p.add_argument("--fail", action="store_true", help="exit 1 when a series regressed")
    p.set_defaults(func=compare)


def add_changes(verbs: Any) -> None:
    p = verbs.add_parser(
        "changes", parents=[DB, JSON], help="level steps and drifts in each series' history",
        description="Detected level steps per series (a step needs 2 runs on each side) and "
        "drifts (slides whose total reaches the minimum effect in steps each too small to "
        "flag), with the dimension that changed there: build, driver, hardware, model file.",
        usage="tokperf changes [--db PATH] [SERIES] [--json]")
    _series_word(p)
    p.set_defaults(func=changes)


def add_accept(verbs: Any) -> None:
    from pytest_tokperf.storage.lookup import UNKNOWN_USER

    p = verbs.add_parser(
        "accept", parents=[DB, JSON],
        help="accept a deliberate new level: the gate's baseline starts there",
        description="After a deliberate change (a new quant kernel, a driver), record that a "
        "series' new level is its baseline: the gate stops flagging it and judges later runs "
        "against results from the accepted one on (it wants 2 runs there before it judges). "
        "Stored with who, when and why. Name the series (or --result ID); --all accepts "
        "every series' latest result.",
        usage="tokperf accept [--db PATH] (SERIES | --all | --result ID) --reason TEXT "
        "[--by NAME]")
    p.add_argument("series", nargs="?", metavar="SERIES",
                   help="series key prefix or part of a test id")
    p.add_argument("--all", action="store_true", help="every series (its latest result)")
    p.add_argument("--result", type=int, help="the first result at the new level (default: "
                   "each matched series' latest result)")
    p.add_argument("--reason", required=True, help="why the new level is right")
    p.add_argument("--by", help=f"who accepts it (default: your login name, else "
                   f"{UNKNOWN_USER!r})")
    p.set_defaults(func=accept)
