"""``tokperf`` verbs over stored results: history, compare, changes, export/import/merge.

Each handler reads the results DB through ``storage`` (``store``, ``exchange``) and judges with
``stats``/``changepoints``/``calibration``; plain text by default, ``--json`` for scripts.
Every verb takes ``--db`` (default: the DB pytest writes): an SQLite file or a
``postgresql://`` URL, the same verbs and output on either; the verbs that only read
open it read-only and refuse a DB that is no tokperf DB, leaving it as it is.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import (
    DB,
    JSON,
    METRICS_HELP,
    chosen_db,
    db_location,
    db_then_pattern,
    is_db_word,
    readable_db,
    shown_db,
)
from pytest_tokperf.cli.output import emit, table
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.calibration import format_noise, noise
from pytest_tokperf.stats.changepoints import ChangePoint, change_points, settled_baseline
from pytest_tokperf.stats.drift import resolution
from pytest_tokperf.stats.comparing import Comparison, compare_many
from pytest_tokperf.stats.metric import Metric, fmt_p, pct
from pytest_tokperf.storage.history import (
    HistoryEntry,
    JudgedEfficiency,
    efficiency_notes,
    history_points,
    judged_efficiencies,
    series_history,
    series_metric,
    session_points,
)
from pytest_tokperf.storage.location import same_db
from pytest_tokperf.storage.store import HistoryRow, ResultStore


def _open(path: str) -> ResultStore:
    """A DB a reading verb opens: read-only, a tokperf DB or refused untouched."""
    return ResultStore.open_read_only(readable_db(path))


def _f(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _eff(judged: JudgedEfficiency) -> str:
    """``57%``; ``106% !`` above the ceiling (the notes below the table say why)."""
    return _f(judged.value, ".0%") + (" !" if judged.above_ceiling else "")


def _find_series(store: ResultStore, pattern: str | None) -> list[HistoryRow]:
    rows = store.latest_per_series()
    if pattern:
        rows = [r for r in rows if r.series_key.startswith(pattern) or pattern in r.test_id]
        if not rows:
            raise ConfigError(f"no stored series matches {pattern!r} (a series key prefix or "
                              f"part of a test id); `tokperf history` lists them")
    return rows


def series_labels(store: ResultStore, rows: list[HistoryRow]) -> dict[str, str]:
    """Per series key, its test id, with what tells it apart from the other series of the
    same test (``+draft``, ``depth=4096``...): two rows never read alike."""
    from pytest_tokperf.storage.rows import Series

    texts = dict(store.tuples("SELECT series_key, series_text FROM series"))
    by_test: dict[str, list[str]] = {}
    for r in rows:
        by_test.setdefault(r.test_id, []).append(r.series_key)
    labels: dict[str, str] = {}
    for test_id, keys in by_test.items():
        if len(keys) == 1:
            labels[keys[0]] = test_id
            continue
        fields = {k: asdict(Series.from_text(texts[k])) for k in keys}
        differ = sorted({name for f in fields.values() for name, value in f.items()
                         if any(o.get(name) != value for o in fields.values())})
        for key in keys:
            f = fields[key]
            parts = ["+draft" if name == "speculative" else ""
                     for name in differ if name == "speculative" and f[name]]
            parts += [f"{name}={_short(f[name])}" for name in differ
                      if name not in ("speculative", "draft_model") and f[name] is not None]
            labels[key] = " ".join([test_id, *(p for p in parts if p)]) or test_id
        if len(set(labels[k] for k in keys)) < len(keys):  # alike still: name the key
            for key in keys:
                labels[key] += f" [{key[:8]}]"
    return labels


def _short(value: object, width: int = 24) -> str:
    text = str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


_CLOCKS = {
    "decode": "engine timings where every repetition has them, else the client's",
    "prefill": "prompt tokens over the client's TTFT (an imported llama-bench pp row: its "
               "own t/s)",
    "aggregate": "all streams' output tokens per second of a round's wall time",
}
"""Whose clock a series' samples are read from, per metric (``metric_values``)."""


def _figure(row: HistoryRow, metric: Metric) -> float | None:
    """A result's median of the metric its series is judged on (None: not in the row)."""
    return {"decode": row.decode_tokens_per_s,
            "prefill": row.prefill_tokens_per_s}.get(metric.name)


def history(args: argparse.Namespace) -> int:
    """List series, or one series' runs with its noise and what it can detect."""
    db, pattern = db_then_pattern(args, args.words)
    store = _open(db)
    latest = _find_series(store, pattern)
    if pattern is None or len(latest) > 1:
        latest = sorted(latest, key=lambda r: (r.test_id, r.series_key))
        labels = series_labels(store, latest)
        judged = judged_efficiencies(store)
        metrics = {r.series_key: series_metric(r) for r in latest}
        rows = [(labels[r.series_key], r.series_key[:12], r.engine_build or "-",
                 metrics[r.series_key].name, _f(_figure(r, metrics[r.series_key])),
                 _eff(judged[r.result_id]), r.created_at[:19])
                for r in latest]
        emit(args, [{**asdict(r), "label": labels[r.series_key],
                     "metric": metrics[r.series_key].name,
                     "judged_efficiency": asdict(judged[r.result_id])} for r in latest],
             [*table(("test", "series", "latest build", "metric", "tok/s", "eff", "at"),
                     rows),
              *efficiency_notes([judged[r.result_id] for r in latest])])
        return 0
    key = latest[0].series_key
    metric = series_metric(latest[0])
    entries = series_history(store, key, metric.name, since_accepted=False)
    points = [e.point for e in entries]
    reps = max((len(p.samples) for p in points), default=0)
    line = (format_noise(metric, noise([p.samples for p in points]), max(reps, 2))
            if reps > 1 else "noise: fewer than 2 repetitions per run, cannot estimate")
    phases = resolution(points, metric).note
    if phases:
        line += f"; {phases}"
    gate = store.gate_verdicts(e.row.result_id for e in entries)
    accepted = {a.result_id: a for a in store.acceptances(key)}
    judged = judged_efficiencies(store)
    run_rows = []
    for e in entries:
        r, verdicts = e.row, {v.metric: v.verdict for v in gate[e.row.result_id]}
        mark = " (accepted)" if r.result_id in accepted else ""
        run_rows.append((r.created_at[:19] + mark, e.point.version, r.hardware_name or "-",
                         _f(statistics.median(e.point.samples)),
                         _f(None if r.ttft_s is None else r.ttft_s * 1e3, ".0f"),
                         _eff(judged[r.result_id]), r.verdict,
                         verdicts.get(metric.name, "-"), verdicts.get("ttft", "-")))
    notes = [f"accepted level from {a.accepted_at[:19]}"
             + (f" by {a.accepted_by}" if a.accepted_by else "")
             + (f": {a.reason}" if a.reason else "") for a in accepted.values()]
    emit(args, {"series_key": key, "metric": metric.name, "noise": line,
                "clock": _CLOCKS[metric.name],
                "runs": [{**asdict(e.row), "samples": list(e.point.samples),
                          "judged_efficiency": asdict(judged[e.row.result_id]),
                          "gate": [asdict(v) for v in gate[e.row.result_id]]} for e in entries],
                "acceptances": [asdict(a) for a in accepted.values()]},
         [f"series {key} ({latest[0].test_id})",
          *table(("at", "build", "hardware", metric.name, "TTFT ms", "eff", "verdict",
                  f"gate {metric.name}", "gate TTFT"), run_rows),
          *notes, *efficiency_notes([judged[e.row.result_id] for e in entries]), line])
    return 0


def series_metrics(*stores: ResultStore) -> dict[str, Metric]:
    """Per series key, the metric it is judged on (``series_metric`` of its latest
    result); a series in several stores takes the first store's."""
    out: dict[str, Metric] = {}
    for store in reversed(stores):
        out.update({r.series_key: series_metric(r) for r in store.latest_per_series()})
    return out


def _samples_by_series(
    store: ResultStore, version: str | None, metrics: dict[str, Metric], settled: bool = False
) -> dict[str, list[list[float]]]:
    """Per series, each stored run's samples of its metric; ``settled``: since the last
    step."""
    out: dict[str, list[list[float]]] = {}
    for row in store.latest_per_series():
        metric = metrics[row.series_key]
        points = history_points(store, row.series_key, metric.name, engine_version=version)
        if settled and points:
            points = settled_baseline(points, metric)
        if points:
            out[row.series_key] = [list(p.samples) for p in points]
    return out


def _stored_version(store: ResultStore, label: str | None) -> str | None:
    """The stored engine version a user's label names: as stored (``b9093`` or
    ``b9093-pypi-sdist``), or in any form ``install-engine --version`` takes (``9093``,
    ``9093.0.0``); None stays None (every version)."""
    from pytest_tokperf.builds.releases import release_number

    if label is None:
        return None
    stored = store.tuples("SELECT DISTINCT engine_version, engine_build FROM environments")
    if any(label in pair for pair in stored):
        return label

    def number(text: str | None) -> int | None:
        try:
            return release_number(text.split("-", 1)[0]) if text else None
        except ConfigError:
            return None

    wanted = number(label)
    matches: list[str] = sorted({str(v) for v, b in stored if wanted is not None and v
                      and wanted in (number(v), number(b))})
    if len(matches) == 1:
        return matches[0]
    known = sorted({v or b or "?" for v, b in stored})
    raise ConfigError(f"no stored results of engine version {label!r}"
                      + (f" (it matches {matches!r}: name one)" if matches else "")
                      + f"; the DB holds {', '.join(known) or 'no results'}: "
                      f"`tokperf history` shows each series' build")


def _is(row: HistoryRow, version: str) -> bool:
    return version in (row.engine_version, row.engine_build)


def _sessions_of(
    store: ResultStore, baseline: str, current: str, metrics: dict[str, Metric]
) -> tuple[dict[str, list[list[float]]], dict[str, list[list[float]]],
           dict[str, list[list[list[float]]]]]:
    """Per series: the baseline's and the current version's runs (one session each), and
    the other builds' runs grouped by build (they inform the spread, not the levels)."""
    base: dict[str, list[list[float]]] = {}
    cur: dict[str, list[list[float]]] = {}
    spread: dict[str, list[list[list[float]]]] = {}
    for row in store.latest_per_series():
        entries = series_history(store, row.series_key, metrics[row.series_key].name)
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
    dbs = ([args.db] if args.db else []) + list(args.dbs)
    if len(dbs) > 2:
        raise ConfigError(f"compare takes at most two DBs, got {[shown_db(d) for d in dbs]!r}: "
                          f"the baseline DB (--db "
                          f"or the first) and a second one whose latest runs are 'current'")
    if len(dbs) == 2 and same_db(db_location(dbs[0]), db_location(dbs[1])):
        raise ConfigError(f"compare {shown_db(dbs[0])!r} with {shown_db(dbs[1])!r}: that is "
                          f"one DB twice, so its "
                          "latest run would sit on both sides; give a second DB, or one DB "
                          "with --baseline VERSION --current VERSION")
    base_store = _open(dbs[0] if dbs else chosen_db(args))
    other = dbs[1] if len(dbs) == 2 else None
    spread: dict[str, list[list[list[float]]]] = {}
    if other:
        current_store = _open(other)
        metrics = series_metrics(base_store, current_store)
        base = _samples_by_series(base_store, _stored_version(base_store, args.baseline),
                                  metrics, settled=True)
        current = {k: [v[-1]] for k, v in _samples_by_series(
            current_store, _stored_version(current_store, args.current), metrics).items()}
    else:
        if not (args.baseline and args.current):
            raise ConfigError("compare needs --baseline VERSION and --current VERSION, or a second DB")
        baseline = _stored_version(base_store, args.baseline)
        current_version = _stored_version(base_store, args.current)
        assert baseline is not None and current_version is not None
        if baseline == current_version:
            raise ConfigError(f"--baseline {args.baseline!r} and --current {args.current!r} "
                              f"are both {baseline}: a build compared with itself has no "
                              "change to judge; name two versions `tokperf history` lists")
        metrics = series_metrics(base_store)
        base, current, spread = _sessions_of(base_store, baseline, current_version, metrics)
    common = sorted(set(base) & set(current))
    if not common:
        raise ConfigError("no series has results on both sides; check the versions with "
                          "`tokperf history`")
    tests = {r.series_key: r.test_id for r in base_store.latest_per_series()}
    verdicts: dict[str, Comparison] = compare_many(
        {k: base[k] for k in common}, {k: current[k] for k in common},
        {k: metrics[k] for k in common}, spread={k: spread.get(k, []) for k in common})
    rows = [(k[:12], tests.get(k, "?"), v.verdict, v.metric, pct(v.relative_change))
            for k, v in verdicts.items()]
    emit(args, {k: asdict(v) for k, v in verdicts.items()},
         [*table(("series", "test", "verdict", "metric", "change"), rows), "",
          *(f"{k[:12]} {v.verdict}: {v.reason}" for k, v in verdicts.items())])
    return 1 if args.fail and any(v.verdict == "regression" for v in verdicts.values()) else 0


def changes(args: argparse.Namespace) -> int:
    """Detected level steps per series, with the dimension that changed there, and the
    series whose runs sit in machine phases too far apart for a step to show."""
    db, pattern = db_then_pattern(args, args.words)
    store = _open(db)
    found: list[tuple[HistoryRow, Metric, ChangePoint]] = []
    notes = []
    for row in _find_series(store, pattern):
        metric = series_metric(row)
        points = session_points(series_history(store, row.series_key, metric.name))
        for cp in change_points(points, metric):
            found.append((row, metric, cp))
        seen = resolution(points, metric)
        if seen.phase_dominated:
            notes.append(f"{row.series_key[:12]} {row.test_id}: {seen.note}")
    rows = [(r.series_key[:12], r.test_id, f"{cp.version_before} -> {cp.version_after}",
             m.name, pct(cp.relative_change), fmt_p(cp.p_value),
             ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in cp.changed.items()) or "-")
            for r, m, cp in found]
    emit(args, [{"series_key": r.series_key, "metric": m.name, **asdict(cp)}
                for r, m, cp in found],
          (table(("series", "test", "step", "metric", "change", "p", "what changed"), rows)
           if rows else ["no change points: every series is level, or too short to tell (a "
                         "step needs 2 runs on each side; 5-10 runs of 3-5 repetitions "
                         "resolve a 5% step at a few % noise)"
                         + (", or its runs sit in machine phases:" if notes else "")])
          + notes)
    return 0


def accept(args: argparse.Namespace) -> int:
    """Record a deliberate new level: the gate's baseline starts at the accepted result."""
    db, pattern = db_then_pattern(args, args.words)
    _open(db).close()  # a tokperf DB, or refused before anything is written
    store = ResultStore.open(db_location(db))
    if not args.reason.strip():
        raise ConfigError("--reason is empty: say why the new level is accepted (it is stored "
                          "with who and when)")
    by = args.by or os.environ.get("USER") or os.environ.get("USERNAME")
    rows = _find_series(store, pattern)
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
                          f"{pattern!r}; `tokperf history SERIES` lists result times")
    emit(args, [asdict(a) for _, a in accepted],
         [f"accepted {r.series_key[:12]} {r.test_id}: baseline from result {a.result_id} "
          f"({r.engine_build or r.engine_version or '?'}), by {a.accepted_by or '?'}: {a.reason}"
          for r, a in accepted])
    return 0


def export(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import export_results

    n = export_results(readable_db(chosen_db(args, args.path)), args.format, Path(args.output))
    emit(args, {"results": n, "output": args.output}, [f"{n} results -> {args.output}"])
    return 0


def import_(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import import_datasets

    files = list(args.files)
    positional = None
    if args.db is None and len(files) > 1 and is_db_word(files[0]):
        positional = files.pop(0)  # the old form: tokperf import DB FILES...
    db = db_location(chosen_db(args, positional))
    if isinstance(db, Path) and db.is_file():
        _open(str(db)).close()  # a tokperf DB, or refused before anything is written
    added = import_datasets(db, [Path(source) for source in files])
    emit(args, {**asdict(added), "db": str(db)}, added.summary(db))
    return 0


def merge(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import merge as merge_dbs

    dbs = ([args.db] if args.db else []) + list(args.dbs)
    if len(dbs) not in (1, 2):
        raise ConfigError(f"merge takes one or two DBs (--db A B, or A B, or A alone to copy "
                          f"it), got {len(dbs)}: {', '.join(map(str, map(db_location, dbs)))}")
    out = db_location(args.output)
    if isinstance(out, Path) and out.is_file():
        _open(str(out)).close()  # a tokperf DB, or refused before anything is written
    added = merge_dbs(readable_db(dbs[0]), readable_db(dbs[1]) if len(dbs) == 2 else None, out)
    emit(args, {"runs": added.runs, "results": added.results, "samples": added.samples,
                "output": str(out)},
          [f"{out}: {added.runs} runs, {added.results} results, {added.samples} samples"])
    return 0


def save_reference(args: argparse.Namespace) -> int:
    from pytest_tokperf.storage.exchange import write_reference_run

    db = chosen_db(args, args.path)
    store = _open(db)
    run_id = args.run or (store.runs()[-1].run.run_id if store.runs() else None)
    if run_id is None:
        raise ConfigError(f"{shown_db(db)!r} holds no runs to save")
    path = write_reference_run(readable_db(db), run_id, Path(args.directory))
    emit(args, {"run_id": run_id, "path": str(path)}, [str(path)])
    return 0


def _series_keys(store: ResultStore, patterns: list[str] | None) -> list[str] | None:
    if not patterns:
        return None
    return sorted({r.series_key for p in patterns for r in _find_series(store, p)})


def plot(args: argparse.Namespace) -> int:
    """PNG figures: history per series with change points, efficiency vs depth, ..."""
    from pytest_tokperf.report.plots import plot_all
    from pytest_tokperf.report.report_data import load_histories, metric_named, store_figures

    store = _open(chosen_db(args, args.path))
    keys = _series_keys(store, args.series)
    plots = plot_all(store_figures(store, run_id=args.run, series_keys=keys),
                     load_histories(store, keys,
                                    metric=metric_named(args.metric) if args.metric else None,
                                    limit=args.limit),
                     Path(args.output))
    emit(args, [asdict(p) for p in plots],
          [f"{p.kind}: {p.path}" if p.path else f"{p.kind}: skipped ({p.note})" for p in plots])
    return 0


def report(args: argparse.Namespace) -> int:
    """One self-contained HTML page: table, regressions, change points, figures."""
    from pytest_tokperf.report.html import build_html_report
    from pytest_tokperf.report.report_data import metric_named

    store = _open(chosen_db(args, args.path))
    path = build_html_report(store, Path(args.output), run_id=args.run,
                             series_keys=_series_keys(store, args.series),
                             metric=metric_named(args.metric) if args.metric else None,
                             limit=args.limit)
    emit(args, {"path": str(path)}, [str(path)])
    return 0


def _series_words(p: argparse.ArgumentParser, default: str = "every series") -> None:
    p.add_argument("words", nargs="*", metavar="SERIES",
                   help=f"series key prefix or part of a test id (default: {default}); "
                   "the old form DB SERIES still works")


def add_parsers(verbs: Any) -> None:
    """Add this module's verbs to the ``tokperf`` parser."""
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

    p = verbs.add_parser(
        "compare", parents=both, help="tok/s of two engine versions, or two DBs (decode; "
        "prefill for a prompt-only series)",
        description="Per series, each stored run a session (its repetitions nested in it): "
        "significant AND at least 5% -> regression or improvement; too noisy or "
        "phase-dominated -> inconclusive. Holm across series. A version is written "
        "as install-engine takes it (9093, b9093, 9093.0.0) or as stored (b9093-pypi-sdist).",
        usage="tokperf compare [--db PATH] [OTHER_DB] [--baseline V --current V] [--fail]")
    p.add_argument("dbs", nargs="*", metavar="OTHER_DB",
                   help="a second DB: its latest run per series is 'current' (the old form "
                   "DB OTHER_DB still works)")
    p.add_argument("--baseline", help="baseline engine version or build")
    p.add_argument("--current", help="current engine version or build")
    p.add_argument("--fail", action="store_true", help="exit 1 when a series regressed")
    p.set_defaults(func=compare)

    p = verbs.add_parser(
        "changes", parents=both, help="change points in each series' history",
        description="Detected level steps per series (a step needs 2 runs on each side), "
        "with the dimension that changed there: build, driver, hardware, model file.",
        usage="tokperf changes [--db PATH] [SERIES] [--json]")
    _series_words(p)
    p.set_defaults(func=changes)

    for verb, func, what, kind in (
            ("plot", plot, "PNG figures into a folder", "PNG"),
            ("report", report, "a self-contained HTML report", "HTML")):
        p = verbs.add_parser(
            verb, parents=both, help=f"{what} (needs matplotlib: pytest-tokperf[plot])",
            description=f"{what[0].upper()}{what[1:]}: each series' history across engine "
            "builds with its change points, efficiency vs KV depth, TTFT vs prompt length "
            "and the concurrency curve.")
        p.add_argument("path", nargs="?", metavar="DB", help=argparse.SUPPRESS)
        p.add_argument("--output", "-o", required=True,
                       help="folder for the PNGs" if kind == "PNG" else "HTML file to write")
        p.add_argument("--series", action="append", help="series key prefix or test id part "
                       "(repeatable; default: all)")
        p.add_argument("--run", help="only this run's results in the tables and curves")
        p.add_argument("--metric", choices=["decode", "prefill", "ttft"],
                       help=f"the history's figure: {METRICS_HELP} (default: the one each "
                       "series is judged on: decode, prefill for a prompt-only llama-bench "
                       "row)")
        p.add_argument("--limit", type=int, help="newest N results per history")
        p.set_defaults(func=func)

    p = verbs.add_parser(
        "accept", parents=both,
        help="accept a deliberate new level: the gate's baseline starts there",
        description="After a deliberate change (a new quant kernel, a driver), record that a "
        "series' new level is its baseline: the gate stops flagging it and judges later runs "
        "against results from the accepted one on (it wants 2 runs there before it judges). "
        "Stored with who, when and why.",
        usage="tokperf accept [--db PATH] [SERIES] --reason TEXT [--result ID] [--by NAME]")
    _series_words(p, "every series")
    p.add_argument("--result", type=int, help="the first result at the new level (default: "
                   "each series' latest result)")
    p.add_argument("--reason", required=True, help="why the new level is right")
    p.add_argument("--by", help="who accepts it (default: $USER)")
    p.set_defaults(func=accept)

    p = verbs.add_parser(
        "export", parents=both, help="results as CSV or JSON (one row per result)",
        description="Write every stored result, joined with its run, environment and series, "
        "as CSV or a JSON list (no per-repetition samples: save-reference keeps those).")
    p.add_argument("path", nargs="?", metavar="DB", help=argparse.SUPPRESS)
    p.add_argument("--format", choices=["csv", "json"], default="csv",
                   help="csv (JSON columns as text) or json (default csv)")
    p.add_argument("--output", "-o", required=True, help="file to write")
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
                   help="the merged DB (an SQLite file or a postgresql:// URL)")
    p.set_defaults(func=merge)

    p = verbs.add_parser(
        "save-reference", parents=both,
        help="write a run as diff-friendly text (db/runs/)",
        description="Write one stored run as a diff-friendly JSON-lines file <run id>.jsonl, "
        "the form of the db/runs dataset; `tokperf import` reads it back.")
    p.add_argument("path", nargs="?", metavar="DB", help=argparse.SUPPRESS)
    p.add_argument("--run", help="run id (default: the latest)")
    p.add_argument("--directory", "-d", default="db/runs", help="folder to write (db/runs)")
    p.set_defaults(func=save_reference)
