"""The results verbs' parsers, in the order ``tokperf --help`` documents them: history,
compare, changes, the file verbs and accept (their code: ``results_verbs``, ``compare``,
``results_files``)."""

from __future__ import annotations

import argparse
from typing import Any

from pytest_tokperf.cli import compare, results_files
from pytest_tokperf.cli.common import DB, JSON
from pytest_tokperf.cli.results_verbs import UNKNOWN_USER, accept, changes, history


def _series_words(p: argparse.ArgumentParser, default: str = "every series") -> None:
    p.add_argument("words", nargs="*", metavar="SERIES",
                   help=f"series key prefix or part of a test id (default: {default}); "
                   "the old form DB SERIES still works")


def add_parsers(verbs: Any) -> None:
    """Add the results verbs to the ``tokperf`` parser (compare and the file verbs from
    their own modules), in the order ``tokperf --help`` documents them."""
    both = [DB, JSON]
    p = verbs.add_parser(
        "history", parents=both, help="stored series, or one series' runs and noise",
        description="Without SERIES: every stored series, sorted by test id, with its latest "
        "build, the figure it is judged on (decode; prefill for a prompt-only llama-bench row) "
        "and efficiency. With SERIES: that series' runs, its gate verdicts and "
        "its noise (the smallest change it can detect).",
        usage="tokperf history [--db PATH] [SERIES] [--json]")
    _series_words(p)
    p.set_defaults(func=history)

    compare.add_parser(verbs)

    p = verbs.add_parser(
        "changes", parents=both, help="change points in each series' history",
        description="Detected level steps per series (a step needs 2 runs on each side), "
        "with the dimension that changed there: build, driver, hardware, model file.",
        usage="tokperf changes [--db PATH] [SERIES] [--json]")
    _series_words(p)
    p.set_defaults(func=changes)

    results_files.add_figure_parsers(verbs)

    p = verbs.add_parser(
        "accept", parents=both,
        help="accept a deliberate new level: the gate's baseline starts there",
        description="After a deliberate change (a new quant kernel, a driver), record that a "
        "series' new level is its baseline: the gate stops flagging it and judges later runs "
        "against results from the accepted one on (it wants 2 runs there before it judges). "
        "Stored with who, when and why. Name the series (or --result ID); --all accepts "
        "every series' latest result.",
        usage="tokperf accept [--db PATH] (SERIES | --all | --result ID) --reason TEXT "
        "[--by NAME]")
    p.add_argument("words", nargs="*", metavar="SERIES",
                   help="series key prefix or part of a test id (the old form DB SERIES "
                   "still works)")
    p.add_argument("--all", action="store_true", help="every series (its latest result)")
    p.add_argument("--result", type=int, help="the first result at the new level (default: "
                   "each matched series' latest result)")
    p.add_argument("--reason", required=True, help="why the new level is right")
    p.add_argument("--by", help=f"who accepts it (default: your login name, else "
                   f"{UNKNOWN_USER!r})")
    p.set_defaults(func=accept)

    results_files.add_parsers(verbs)
