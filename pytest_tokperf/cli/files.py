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

from pytest_tokperf.cli.common import DB, JSON, METRICS_HELP, chosen_db, db_location
from pytest_tokperf.cli.output import (
    OUTPUT_RULE,
    STDOUT,
    emit,
    output_file,
    output_folder,
    print_output,
)
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.storage.location import shown_db
from pytest_tokperf.storage.lookup import find_series, open_for_reading, readable, writable
from pytest_tokperf.storage.store import ResultStore


def _printed(path: Path) -> str:
    """A file's text as written (CSV keeps its ``\\r\\n``)."""
    with path.open(encoding="utf-8", newline="") as handle:
        return handle.read()


def export(args: argparse.Namespace) -> int:
    from pytest_tokperf.report.files import export_results, export_text

    db = readable(chosen_db(args))
    out = output_file(args.output, stdout=True)
    if out is None:
        n, written = export_text(db, args.format)
        print_output(written)
    else:
        n = export_results(db, args.format, out)
    emit(args, {"results": n, "output": args.output},
         [f"{n} results -> {'stdout' if out is None else args.output}"],
         file=sys.stderr if out is None else None)
    return 0


def import_(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import import_datasets

    db = writable(chosen_db(args))
    added = import_datasets(db, [Path(source) for source in args.files])
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
    out = writable(args.output)
    added = merge_dbs(readable(dbs[0]), readable(dbs[1]) if len(dbs) == 2 else None, out)
    emit(args, {"runs": added.runs, "results": added.results, "samples": added.samples,
                "output": str(out)},
         [f"{out}: {added.runs} runs, {added.results} results, {added.samples} samples"])
    return 0


def save_reference(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import write_reference_run

    db = chosen_db(args)
    store = open_for_reading(db)
    run_id = args.run or (store.runs()[-1].run.run_id if store.runs() else None)
    if run_id is None:
        raise ConfigError(f"{shown_db(db)!r} holds no runs to save")
    folder = output_folder(args.directory, "--directory")
    path = write_reference_run(readable(db), run_id, folder)
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

    store = open_for_reading(chosen_db(args))
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
    store = open_for_reading(chosen_db(args))
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


FIGURES = ("each series' history across engine builds with its change points, efficiency "
           "vs KV depth, TTFT vs prompt length and the concurrency curve")


def _figure_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--series", action="append", help="series key prefix or test id part "
                   "(repeatable; default: all)")
    p.add_argument("--run", help="only this run's results in the tables and curves")
    p.add_argument("--metric", choices=["decode", "prefill", "ttft"],
                   help=f"the history's figure: {METRICS_HELP} (default: the one each "
                   "series is judged on: decode, prefill for a prompt-only llama-bench row)")
    p.add_argument("--limit", type=int, help="newest N results per history")


def add_plot(verbs: Any) -> None:
    p = verbs.add_parser(
        "plot", parents=[DB, JSON],
        help="PNG figures into a folder (needs matplotlib: pytest-tokperf[plot])",
        description=f"PNG figures into a folder: {FIGURES}.")
    p.add_argument("--output", "-o", required=True, help=f"folder for the PNGs ({OUTPUT_RULE})")
    _figure_options(p)
    p.set_defaults(func=plot)


def add_report(verbs: Any) -> None:
    p = verbs.add_parser(
        "report", parents=[DB, JSON],
        help="a report: self-contained HTML, JSON or markdown (needs matplotlib: "
        "pytest-tokperf[plot])",
        description=f"A report: self-contained HTML, JSON or markdown: {FIGURES}; its changes "
        "are each series' steps and drifts and, for the two builds measured last, the verdict "
        "`tokperf compare` gives (a history of two builds has no step to find). The suffix "
        "of --output names the format, as --tokperf-report's does: .html/.htm (the figures "
        "inlined), .json (the session report's document), .md/.markdown (the step "
        "summary's table and changes).")
    p.add_argument("--output", "-o", required=True,
                   help=f"file to write, its format by suffix: .html, .htm, .json, .md, "
                   f".markdown ({OUTPUT_RULE}); - prints it")
    p.add_argument("--format", choices=["html", "json", "md"],
                   help="the format printed with -o - (default html); with a file, its "
                   "suffix names it")
    _figure_options(p)
    p.set_defaults(func=report)


def add_export(verbs: Any) -> None:
    p = verbs.add_parser(
        "export", parents=[DB, JSON], help="results as CSV or JSON (one row per result)",
        description="Write every stored result, joined with its run, environment and series, "
        "as CSV or a JSON list (no per-repetition samples: save-reference keeps those). "
        "-o - prints it (the summary line then goes to stderr).")
    p.add_argument("--format", choices=["csv", "json"], default="csv",
                   help="csv (JSON columns as text) or json (default csv)")
    p.add_argument("--output", "-o", required=True,
                   help=f"file to write ({OUTPUT_RULE}); - prints it")
    p.set_defaults(func=export)


def add_import(verbs: Any) -> None:
    p = verbs.add_parser(
        "import", parents=[DB, JSON], help="add runs from reference .jsonl files, a folder of them "
        "(e.g. db/runs) or a JSON export",
        description="Add runs to the results DB (created when missing) from reference-run "
        ".jsonl files, folders of them (the db/runs dataset) or `tokperf export --format "
        "json` files. Runs already there are skipped, so importing twice adds nothing.",
        usage="tokperf import [--db PATH] FILE_OR_FOLDER [...]")
    p.add_argument("files", nargs="+", metavar="FILE_OR_FOLDER",
                   help=".jsonl run files, folders of them, or JSON exports")
    p.set_defaults(func=import_)


def add_merge(verbs: Any) -> None:
    p = verbs.add_parser(
        "merge", parents=[DB, JSON], help="merge results DBs, deduplicated by run id",
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


def add_save_reference(verbs: Any) -> None:
    p = verbs.add_parser(
        "save-reference", parents=[DB, JSON],
        help="write a run as diff-friendly text (db/runs/)",
        description="Write one stored run as a diff-friendly JSON-lines file <run id>.jsonl, "
        "the form of the db/runs dataset; `tokperf import` reads it back.")
    p.add_argument("--run", help="run id (default: the latest)")
    p.add_argument("--directory", "-d", default="db/runs",
                   help=f"folder to write (db/runs; {OUTPUT_RULE})")
    p.set_defaults(func=save_reference)
