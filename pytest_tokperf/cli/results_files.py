"""``tokperf`` verbs that turn stored results into files, or files into stored results:
plot, report, export, import, merge, save-reference.

An output file follows one rule in every verb (``cli.output``): its missing folders are
made, a folder where a file is asked is refused, and ``-o -`` prints what is text (CSV,
JSON, markdown, HTML) on stdout, the verb's own summary line then going to stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import (
    DB,
    JSON,
    METRICS_HELP,
    chosen_db,
    db_location,
    is_db_word,
    readable_db,
    shown_db,
)
from pytest_tokperf.cli.output import (
    OUTPUT_RULE,
    STDOUT,
    emit,
    output_file,
    output_folder,
    print_output,
)
from pytest_tokperf.cli.results_verbs import find_series, open_db
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.storage.store import ResultStore


def _printed(path: Path) -> str:
    """A file's text as written (CSV keeps its ``\\r\\n``)."""
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


def export(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import export_results

    db = readable_db(chosen_db(args, args.path))
    out = output_file(args.output, stdout=True)
    if out is None:
        with tempfile.TemporaryDirectory(prefix="tokperf-export-") as tmp:
            written = Path(tmp) / f"results.{args.format}"
            n = export_results(db, args.format, written)
            print_output(_printed(written))
    else:
        n = export_results(db, args.format, out)
    emit(args, {"results": n, "output": args.output},
         [f"{n} results -> {'stdout' if out is None else args.output}"],
         file=sys.stderr if out is None else None)
    return 0


def import_(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import import_datasets

    files = list(args.files)
    positional = None
    if args.db is None and len(files) > 1 and is_db_word(files[0]):
        positional = files.pop(0)  # the old form: tokperf import DB FILES...
    db = db_location(chosen_db(args, positional))
    if isinstance(db, Path) and db.is_file():
        open_db(str(db)).close()  # a tokperf DB, or refused before anything is written
    added = import_datasets(db, [Path(source) for source in files])
    emit(args, {**asdict(added), "db": str(db)}, added.summary(db))
    return 0


def merge(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import merge as merge_dbs

    dbs = ([args.db] if args.db else []) + list(args.dbs)
    if len(dbs) not in (1, 2):
        raise ConfigError(f"merge takes one or two DBs (--db A B, or A B, or A alone to copy "
                          f"it), got {len(dbs)}: {', '.join(map(str, map(db_location, dbs)))}")
    if args.output == STDOUT:
        raise ConfigError("--output '-' (stdout) cannot take a DB; name an SQLite file or a "
                          "postgresql:// URL")
    out = db_location(args.output)
    if isinstance(out, Path) and out.is_file():
        open_db(str(out)).close()  # a tokperf DB, or refused before anything is written
    added = merge_dbs(readable_db(dbs[0]), readable_db(dbs[1]) if len(dbs) == 2 else None, out)
    emit(args, {"runs": added.runs, "results": added.results, "samples": added.samples,
                "output": str(out)},
         [f"{out}: {added.runs} runs, {added.results} results, {added.samples} samples"])
    return 0


def save_reference(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import write_reference_run

    db = chosen_db(args, args.path)
    store = open_db(db)
    run_id = args.run or (store.runs()[-1].run.run_id if store.runs() else None)
    if run_id is None:
        raise ConfigError(f"{shown_db(db)!r} holds no runs to save")
    folder = output_folder(args.directory, "--directory")
    path = write_reference_run(readable_db(db), run_id, folder)
    emit(args, {"run_id": run_id, "path": str(path)}, [str(path)])
    return 0


def _series_keys(store: ResultStore, patterns: list[str] | None) -> list[str] | None:
    if not patterns:
        return None
    return sorted({r.series_key for p in patterns for r in find_series(store, p)})


def plot(args: argparse.Namespace) -> int:
    """PNG figures: history per series with change points, efficiency vs depth, ..."""
    from pytest_tokperf.report.plots import plot_all
    from pytest_tokperf.report.report_data import (
        load_histories,
        metric_named,
        store_figures,
    )

    store = open_db(chosen_db(args, args.path))
    keys = _series_keys(store, args.series)
    metric = metric_named(args.metric) if args.metric else None
    folder = output_folder(args.output)
    plots = plot_all(store_figures(store, run_id=args.run, series_keys=keys),
                     load_histories(store, keys, metric=metric, limit=args.limit), folder)
    emit(args, [asdict(p) for p in plots],
         [f"{p.kind}: {p.path}" if p.path else f"{p.kind}: skipped ({p.note})" for p in plots])
    return 0


def report(args: argparse.Namespace) -> int:
    """One report of the DB: self-contained HTML, the JSON document or markdown, as the
    output's suffix says (``--format`` for ``-o -``)."""
    from pytest_tokperf.report.files import ReportKind, report_kind, store_report
    from pytest_tokperf.report.report_data import metric_named

    kind: ReportKind
    if args.output == STDOUT:
        kind = args.format or "html"
    else:
        kind = report_kind(args.output, "--output")
        if args.format and args.format != kind:
            raise ConfigError(f"--format {args.format} and --output {args.output!r} (a "
                              f"{kind} name) disagree; drop --format: the suffix names it")
    store = open_db(chosen_db(args, args.path))
    options: dict[str, Any] = {
        "run_id": args.run, "series_keys": _series_keys(store, args.series),
        "metric": metric_named(args.metric) if args.metric else None, "limit": args.limit}
    out = output_file(args.output, stdout=True)
    if out is None:
        with tempfile.TemporaryDirectory(prefix="tokperf-report-") as tmp:
            print_output(_printed(store_report(store, kind, Path(tmp) / f"report.{kind}",
                                               **options)))
        emit(args, {"path": STDOUT, "format": kind}, [f"{kind} report -> stdout"],
             file=sys.stderr)
        return 0
    path = store_report(store, kind, out, **options)
    emit(args, {"path": str(path), "format": kind}, [str(path)])
    return 0


def add_figure_parsers(verbs: Any) -> None:
    """Add ``plot`` and ``report`` to the ``tokperf`` parser."""
    for verb, func, what in (
            ("plot", plot, "PNG figures into a folder"),
            ("report", report, "a report: self-contained HTML, JSON or markdown")):
        p = verbs.add_parser(
            verb, parents=[DB, JSON], help=f"{what} (needs matplotlib: pytest-tokperf[plot])",
            description=f"{what[0].upper()}{what[1:]}: each series' history across engine "
            "builds with its change points, efficiency vs KV depth, TTFT vs prompt length "
            "and the concurrency curve." + (
                " The suffix of --output names the format, as --tokperf-report's does: "
                ".html/.htm (the figures inlined), .json (the session report's document), "
                ".md/.markdown (the step summary's table and changes)." if verb == "report"
                else ""))
        p.add_argument("path", nargs="?", metavar="DB", help=argparse.SUPPRESS)
        if verb == "plot":
            p.add_argument("--output", "-o", required=True,
                           help=f"folder for the PNGs ({OUTPUT_RULE})")
        else:
            p.add_argument("--output", "-o", required=True,
                           help=f"file to write, its format by suffix: .html, .htm, .json, "
                           f".md, .markdown ({OUTPUT_RULE}); - prints it")
            p.add_argument("--format", choices=["html", "json", "md"],
                           help="the format printed with -o - (default html); with a file, "
                           "its suffix names it")
        p.add_argument("--series", action="append", help="series key prefix or test id part "
                       "(repeatable; default: all)")
        p.add_argument("--run", help="only this run's results in the tables and curves")
        p.add_argument("--metric", choices=["decode", "prefill", "ttft"],
                       help=f"the history's figure: {METRICS_HELP} (default: the one each "
                       "series is judged on: decode, prefill for a prompt-only llama-bench "
                       "row)")
        p.add_argument("--limit", type=int, help="newest N results per history")
        p.set_defaults(func=func)


def add_parsers(verbs: Any) -> None:
    """Add export, import, merge and save-reference to the ``tokperf`` parser."""
    both = [DB, JSON]
    p = verbs.add_parser(
        "export", parents=both, help="results as CSV or JSON (one row per result)",
        description="Write every stored result, joined with its run, environment and series, "
        "as CSV or a JSON list (no per-repetition samples: save-reference keeps those). "
        "-o - prints it (the summary line then goes to stderr).")
    p.add_argument("path", nargs="?", metavar="DB", help=argparse.SUPPRESS)
    p.add_argument("--format", choices=["csv", "json"], default="csv",
                   help="csv (JSON columns as text) or json (default csv)")
    p.add_argument("--output", "-o", required=True,
                   help=f"file to write ({OUTPUT_RULE}); - prints it")
    p.set_defaults(func=export)

    p = verbs.add_parser(
        "import", parents=both, help="add runs from reference .jsonl files, a folder of them "
        "(e.g. db/runs) or a JSON export",
        description="Add runs to the results DB (created when missing) from reference-run "
        ".jsonl files, folders of them (the db/runs dataset) or `tokperf export --format "
        "json` files. Runs already there are skipped, so importing twice adds nothing.",
        usage="tokperf import [--db PATH] FILE_OR_FOLDER [...]")
    p.add_argument("files", nargs="+", metavar="FILE_OR_FOLDER",
                   help=".jsonl run files, folders of them, or JSON exports (the old form "
                   "DB FILES... still works)")
    p.set_defaults(func=import_)

    p = verbs.add_parser(
        "merge", parents=both, help="merge results DBs, deduplicated by run id",
        description="Write the runs of one or two results DBs into --output (created or "
        "added to), each run once. The inputs are only read. Any of them may be an SQLite "
        "file or a postgresql:// URL: `tokperf merge postgresql://HOST/fleet -o fleet.db` "
        "copies a fleet's store into a file Datasette browses; `tokperf merge runner.db -o "
        "postgresql://HOST/fleet` loads a runner's file into it.",
        usage="tokperf merge [--db A] [B] --output OUT, or tokperf merge A [B] --output OUT")
    p.add_argument("dbs", nargs="+", metavar="DB",
                   help="the DBs to merge (one or two in all, with --db)")
    p.add_argument("--output", "-o", required=True,
                   help=f"the merged DB: an SQLite file ({OUTPUT_RULE}) or a postgresql:// URL")
    p.set_defaults(func=merge)

    p = verbs.add_parser(
        "save-reference", parents=both,
        help="write a run as diff-friendly text (db/runs/)",
        description="Write one stored run as a diff-friendly JSON-lines file <run id>.jsonl, "
        "the form of the db/runs dataset; `tokperf import` reads it back.")
    p.add_argument("path", nargs="?", metavar="DB", help=argparse.SUPPRESS)
    p.add_argument("--run", help="run id (default: the latest)")
    p.add_argument("--directory", "-d", default="db/runs",
                   help=f"folder to write (db/runs; {OUTPUT_RULE})")
    p.set_defaults(func=save_reference)
