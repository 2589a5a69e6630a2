"""``tokperf`` verbs over stored results: history, compare, changes, export/import/merge.

Each handler reads the results DB through ``storage`` (``store``, ``exchange``) and judges with
``stats``/``changepoints``/``calibration``; plain text by default, ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.stats.calibration import format_noise, noise
from pytest_tokperf.stats.changepoints import change_points, settled_baseline
from pytest_tokperf.stats.drift import resolution
from pytest_tokperf.cli.output import emit, table
from pytest_tokperf.stats.metric import fmt_p, pct
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.storage.history import (
    HistoryEntry, history_points, series_history, session_points,
)
from pytest_tokperf.stats.comparing import DECODE, Comparison, compare_many
from pytest_tokperf.storage.store import HistoryRow, ResultStore


def _open(path: str) -> ResultStore:
    db = Path(path).expanduser()
    if not db.is_file():
        raise ConfigError(f"results DB {path!r} does not exist; pytest writes one to "
                          f".tokperf/results.db, or pass --tokperf-db PATH")
    return ResultStore.open(db)


def _f(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _find_series(store: ResultStore, pattern: str | None) -> list[HistoryRow]:
    rows = store.latest_per_series()
    if pattern:
        rows = [r for r in rows if r.series_key.startswith(pattern) or pattern in r.test_id]
        if not rows:
            raise ConfigError(f"no stored series matches {pattern!r} (a series key prefix or "
                              f"part of a test id); `tokperf history DB` lists them")
    return rows


def history(args: argparse.Namespace) -> int:
    """List series, or one series' runs with its noise and what it can detect."""
    store = _open(args.db)
    latest = _find_series(store, args.series)
    if args.series is None or len(latest) > 1:
        rows = [(r.series_key[:12], r.test_id, r.engine_build or "-", _f(r.decode_tokens_per_s),
                 _f(r.efficiency, ".0%"), r.created_at[:19]) for r in latest]
        emit(args, [asdict(r) for r in latest],
              table(("series", "test", "latest build", "decode tok/s", "eff", "at"), rows))
        return 0
    key = latest[0].series_key
    entries = series_history(store, key, DECODE.name, since_accepted=False)
    points = [e.point for e in entries]
    reps = max((len(p.samples) for p in points), default=0)
    line = (format_noise(DECODE, noise([p.samples for p in points]), max(reps, 2))
            if reps > 1 else "noise: fewer than 2 repetitions per run, cannot estimate")
    phases = resolution(points, DECODE).note
    if phases:
        line += f"; {phases}"
    gate = store.gate_verdicts(e.row.result_id for e in entries)
    accepted = {a.result_id: a for a in store.acceptances(key)}
    run_rows = []
    for e in entries:
        r, verdicts = e.row, {v.metric: v.verdict for v in gate[e.row.result_id]}
        mark = " (accepted)" if r.result_id in accepted else ""
        run_rows.append((r.created_at[:19] + mark, e.point.version, r.hardware_name or "-",
                         _f(statistics.median(e.point.samples)), _f(r.ttft_s * 1e3, ".0f"),
                         _f(r.efficiency, ".0%"), r.verdict,
                         verdicts.get("decode", "-"), verdicts.get("ttft", "-")))
    notes = [f"accepted level from {a.accepted_at[:19]}"
             + (f" by {a.accepted_by}" if a.accepted_by else "")
             + (f": {a.reason}" if a.reason else "") for a in accepted.values()]
    emit(args, {"series_key": key, "noise": line, "decode": "engine timings where every "
                "repetition has them, else the client's",
                "runs": [{**asdict(e.row), "decode_samples": list(e.point.samples),
                          "gate": [asdict(v) for v in gate[e.row.result_id]]} for e in entries],
                "acceptances": [asdict(a) for a in accepted.values()]},
         [f"series {key} ({latest[0].test_id})",
          *table(("at", "build", "hardware", "decode", "TTFT ms", "eff", "verdict",
                  "gate decode", "gate TTFT"), run_rows),
          *notes, line])
    return 0


def _samples_by_series(
    store: ResultStore, version: str | None, settled: bool = False
) -> dict[str, list[list[float]]]:
    """Per series, each stored run's decode samples; ``settled``: since the last step."""
    out: dict[str, list[list[float]]] = {}
    for row in store.latest_per_series():
        points = history_points(store, row.series_key, DECODE.name, engine_version=version)
        if settled and points:
            points = settled_baseline(points, DECODE)
        if points:
            out[row.series_key] = [list(p.samples) for p in points]
    return out


def _is(row: HistoryRow, version: str) -> bool:
    return version in (row.engine_version, row.engine_build)


def _sessions_of(
    store: ResultStore, baseline: str, current: str
) -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]],
           dict[str, list[list[list[float]]]]]:
    """Per series: the baseline's and the current version's runs (one session each), and
    the other builds' runs grouped by build (they inform the spread, not the levels)."""
    base: dict[str, list[list[float]]] = {}
    cur: dict[str, list[list[float]]] = {}
    spread: dict[str, list[list[list[float]]]] = {}
    for row in store.latest_per_series():
        entries = series_history(store, row.series_key, DECODE.name)
        b = _runs([e for e in entries if _is(e.row, baseline)])
        c = _runs([e for e in entries if _is(e.row, current)])
        if not (b and c):
            continue
        others: dict[str, list[list[float]]] = {}
        for point in session_points([e for e in entries if not (
                _is(e.row, baseline) or _is(e.row, current))]):
            others.setdefault(point.version, []).append(list(point.samples))
        base[row.series_key], cur[row.series_key] = b, c
        spread[row.series_key] = list(others.values())
    return base, cur, spread


def _runs(entries: list[HistoryEntry]) -> list[list[float]]:
    return [list(p.samples) for p in session_points(entries)]


def compare(args: argparse.Namespace) -> int:
    """Two engine versions in one DB, or the latest runs of a second DB vs the first.

    Each stored run is a session: the repetitions are nested in it, and the other builds'
    runs of the series inform the spread between sessions (``stats.compare``'s ``spread``).
    """
    base_store = _open(args.db)
    spread: dict[str, list[list[list[float]]]] = {}
    if args.other:
        current_store = _open(args.other)
        base = _samples_by_series(base_store, args.baseline, settled=True)
        current = {k: [v[-1]] for k, v in _samples_by_series(current_store, args.current).items()}
    else:
        if not (args.baseline and args.current):
            raise ConfigError("compare needs --baseline VERSION and --current VERSION, or a second DB")
        base, current, spread = _sessions_of(base_store, args.baseline, args.current)
    common = sorted(set(base) & set(current))
    if not common:
        raise ConfigError("no series has results on both sides; check the versions with "
                          "`tokperf history DB`")
    tests = {r.series_key: r.test_id for r in base_store.latest_per_series()}
    verdicts: dict[str, Comparison] = compare_many(
        {k: base[k] for k in common}, {k: current[k] for k in common}, DECODE,
        spread={k: spread.get(k, []) for k in common})
    rows = [(k[:12], tests.get(k, "?"), v.verdict, pct(v.relative_change), v.reason)
            for k, v in verdicts.items()]
    emit(args, {k: asdict(v) for k, v in verdicts.items()},
          table(("series", "test", "verdict", "decode", "why"), rows))
    return 1 if args.fail and any(v.verdict == "regression" for v in verdicts.values()) else 0


def changes(args: argparse.Namespace) -> int:
    """Detected level steps per series, with the dimension that changed there, and the
    series whose runs sit in machine phases too far apart for a step to show."""
    store = _open(args.db)
    found = []
    notes = []
    for row in _find_series(store, args.series):
        points = session_points(series_history(store, row.series_key, DECODE.name))
        for cp in change_points(points, DECODE):
            found.append((row, cp))
        seen = resolution(points, DECODE)
        if seen.phase_dominated:
            notes.append(f"{row.series_key[:12]} {row.test_id}: {seen.note}")
    rows = [(r.series_key[:12], r.test_id, f"{cp.version_before} -> {cp.version_after}",
             pct(cp.relative_change), fmt_p(cp.p_value),
             ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in cp.changed.items()) or "-")
            for r, cp in found]
    emit(args, [{"series_key": r.series_key, **asdict(cp)} for r, cp in found],
          (table(("series", "test", "step", "change", "p", "what changed"), rows)
           if rows else ["no change points: every series is level, or too short to tell (a "
                         "step needs 2 runs on each side; 5-10 runs of 3-5 repetitions "
                         "resolve a 5% step at a few % noise)"
                         + (", or its runs sit in machine phases:" if notes else "")])
          + notes)
    return 0


def accept(args: argparse.Namespace) -> int:
    """Record a deliberate new level: the gate's baseline starts at the accepted result."""
    store = _open(args.db)
    if not args.reason.strip():
        raise ConfigError("--reason is empty: say why the new level is accepted (it is stored "
                          "with who and when)")
    by = args.by or os.environ.get("USER") or os.environ.get("USERNAME")
    rows = _find_series(store, args.series)
    accepted = []
    for row in rows:
        result_id = row.result_id
        if args.result is not None:
            ids = [h.result_id for h in store.history(row.series_key)]
            if args.result not in ids:
                continue
            result_id = args.result
        accepted.append((row, store.accept(row.series_key, result_id, accepted_by=by,
                                           reason=args.reason)))
    if not accepted:
        raise ConfigError(f"result {args.result!r} belongs to none of the series matched by "
                          f"{args.series!r}; `tokperf history DB SERIES` lists result times")
    emit(args, [asdict(a) for _, a in accepted],
         [f"accepted {r.series_key[:12]} {r.test_id}: baseline from result {a.result_id} "
          f"({r.engine_build or r.engine_version or '?'}), by {a.accepted_by or '?'}: {a.reason}"
          for r, a in accepted])
    return 0


def export(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import export_results

    n = export_results(Path(args.db), args.format, Path(args.output))
    emit(args, {"results": n, "output": args.output}, [f"{n} results -> {args.output}"])
    return 0


def import_(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import Added, import_dataset, load_reference_runs

    added = Added()
    for source in args.files:
        path = Path(source)
        added = added + (load_reference_runs(path, Path(args.db)) if path.is_dir()
                         else import_dataset(Path(args.db), path))
    emit(args, {**asdict(added), "db": args.db},
          [f"added {added.runs} runs, {added.results} results, {added.samples} samples to {args.db}"])
    return 0


def merge(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import merge as merge_dbs

    added = merge_dbs(Path(args.a), Path(args.b), Path(args.output))
    emit(args, {**asdict(added), "output": args.output},
          [f"{args.output}: {added.runs} runs, {added.results} results, {added.samples} samples"])
    return 0


def save_reference(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import write_reference_run

    store = _open(args.db)
    run_id = args.run or (store.runs()[-1].run.run_id if store.runs() else None)
    if run_id is None:
        raise ConfigError(f"{args.db!r} holds no runs to save")
    path = write_reference_run(Path(args.db), run_id, Path(args.directory))
    emit(args, {"run_id": run_id, "path": str(path)}, [str(path)])
    return 0


def _series_keys(store: ResultStore, patterns: list[str] | None) -> list[str] | None:
    if not patterns:
        return None
    return sorted({r.series_key for p in patterns for r in _find_series(store, p)})


def plot(args: argparse.Namespace) -> int:
    """PNG figures: history per series with change points, efficiency vs depth, ..."""
    from pytest_tokperf.report.plots import plot_all
    from pytest_tokperf.report.data import load_histories, metric_named, store_figures

    store = _open(args.db)
    keys = _series_keys(store, args.series)
    plots = plot_all(store_figures(store, run_id=args.run, series_keys=keys),
                     load_histories(store, keys, metric=metric_named(args.metric), limit=args.limit),
                     Path(args.output))
    emit(args, [asdict(p) for p in plots],
          [f"{p.kind}: {p.path}" if p.path else f"{p.kind}: skipped ({p.note})" for p in plots])
    return 0


def report(args: argparse.Namespace) -> int:
    """One self-contained HTML page: table, regressions, change points, figures."""
    from pytest_tokperf.report.html import build_html_report
    from pytest_tokperf.report.data import metric_named

    store = _open(args.db)
    path = build_html_report(store, Path(args.output), run_id=args.run,
                             series_keys=_series_keys(store, args.series),
                             metric=metric_named(args.metric), limit=args.limit)
    emit(args, {"path": str(path)}, [str(path)])
    return 0


def add_parsers(verbs: Any, register: Callable[[str, Callable[[argparse.Namespace], int]], None]) -> None:
    """Add this module's verbs to the ``tokperf`` parser."""
    p = verbs.add_parser("history", help="stored series, or one series' runs and noise")
    p.add_argument("db", help="results DB")
    p.add_argument("series", nargs="?", help="series key prefix or part of a test id")
    p.add_argument("--json", action="store_true", help="print JSON")
    register("history", history)

    p = verbs.add_parser("compare", help="decode tok/s of two engine versions, or two DBs",
                         description="Per series, each stored run a session (its repetitions "
                         "nested in it; the other builds' runs inform the spread between "
                         "sessions): significant AND at least 5%% -> regression or improvement; "
                         "too noisy or phase-dominated -> inconclusive. Holm across series.")
    p.add_argument("db", help="results DB (the baseline side for two DBs)")
    p.add_argument("other", nargs="?", help="second DB: its latest run per series is 'current'")
    p.add_argument("--baseline", help="baseline engine version or build")
    p.add_argument("--current", help="current engine version or build")
    p.add_argument("--fail", action="store_true", help="exit 1 when a series regressed")
    p.add_argument("--json", action="store_true", help="print JSON")
    register("compare", compare)

    p = verbs.add_parser("changes", help="change points in each series' history")
    p.add_argument("db", help="results DB")
    p.add_argument("series", nargs="?", help="series key prefix or part of a test id")
    p.add_argument("--json", action="store_true", help="print JSON")
    register("changes", changes)

    for verb, func, what in (("plot", plot, "PNG figures into a folder"),
                             ("report", report, "a self-contained HTML report")):
        p = verbs.add_parser(verb, help=f"{what} (needs matplotlib: pytest-tokperf[plot])",
                             description=f"{what}: each series' history across engine builds with "
                             "its change points, efficiency vs KV depth, TTFT vs prompt length "
                             "and the concurrency curve.")
        p.add_argument("db", help="results DB")
        p.add_argument("--output", "-o", required=True,
                       help="folder for the PNGs" if verb == "plot" else "HTML file to write")
        p.add_argument("--series", action="append", help="series key prefix or test id part "
                       "(repeatable; default: all)")
        p.add_argument("--run", help="only this run's results in the tables and curves")
        p.add_argument("--metric", default="decode", choices=["decode", "prefill", "ttft"])
        p.add_argument("--limit", type=int, help="newest N results per history")
        p.add_argument("--json", action="store_true", help="print JSON")
        register(verb, func)

    p = verbs.add_parser(
        "accept", help="accept a deliberate new level: the gate's baseline starts there",
        description="After a deliberate change (a new quant kernel, a driver), record that a "
        "series' new level is its baseline: the gate stops flagging it and judges later runs "
        "against results from the accepted one on (it wants 2 runs there before it judges). "
        "Stored with who, when and why.")
    p.add_argument("db", help="results DB")
    p.add_argument("series", nargs="?", help="series key prefix or part of a test id "
                   "(default: every series)")
    p.add_argument("--result", type=int, help="the first result at the new level (default: "
                   "each series' latest result)")
    p.add_argument("--reason", required=True, help="why the new level is right")
    p.add_argument("--by", help="who accepts it (default: $USER)")
    p.add_argument("--json", action="store_true", help="print JSON")
    register("accept", accept)

    p = verbs.add_parser("export", help="results as CSV or JSON (one row per result)")
    p.add_argument("db")
    p.add_argument("--format", choices=["csv", "json"], default="csv")
    p.add_argument("--output", "-o", required=True)
    p.add_argument("--json", action="store_true", help="print JSON")
    register("export", export)

    p = verbs.add_parser("import", help="add runs from reference .jsonl files, a folder of them "
                         "(e.g. db/runs) or a JSON export")
    p.add_argument("db")
    p.add_argument("files", nargs="+")
    p.add_argument("--json", action="store_true", help="print JSON")
    register("import", import_)

    p = verbs.add_parser("merge", help="merge two results DBs, deduplicated by run id")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--output", "-o", required=True)
    p.add_argument("--json", action="store_true", help="print JSON")
    register("merge", merge)

    p = verbs.add_parser("save-reference", help="write a run as diff-friendly text (db/runs/)")
    p.add_argument("db")
    p.add_argument("--run", help="run id (default: the latest)")
    p.add_argument("--directory", "-d", default="db/runs")
    p.add_argument("--json", action="store_true", help="print JSON")
    register("save-reference", save_reference)
