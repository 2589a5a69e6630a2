"""``tokperf`` verbs over stored results: history, changes, accept, and what the other
results verbs share (``open_db``, ``find_series``, ``series_labels``); ``compare`` and the
file verbs (plot, report, export, import, merge, save-reference) have their own modules.

Each handler reads the results DB through ``storage`` and judges with
``stats``/``changepoints``/``calibration``; plain text by default, ``--json`` for scripts.
Every verb takes ``--db`` (default: the DB pytest writes): an SQLite file or a
``postgresql://`` URL, the same verbs and output on either; the verbs that only read
open it read-only and refuse a DB that is no tokperf DB, leaving it as it is.
"""

from __future__ import annotations

import argparse
import getpass
import statistics
from dataclasses import asdict

from pytest_tokperf.cli.common import (
    db_location,
    db_then_pattern,
    readable_db,
)
from pytest_tokperf.cli.output import emit, table
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.calibration import format_noise, noise
from pytest_tokperf.stats.changepoints import ChangePoint, change_points
from pytest_tokperf.stats.drift import resolution
from pytest_tokperf.stats.metric import Metric, fmt_p, pct
from pytest_tokperf.storage.history import (
    JudgedEfficiency,
    efficiency_notes,
    judged_efficiencies,
    series_history,
    series_metric,
    session_points,
    session_probes,
)
from pytest_tokperf.storage.store import HistoryRow, ResultStore


def open_db(path: str) -> ResultStore:
    """A DB a reading verb opens: read-only, a tokperf DB or refused untouched."""
    return ResultStore.open_read_only(readable_db(path))


def _f(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _eff(judged: JudgedEfficiency) -> str:
    """``57%``; ``106% !`` above the ceiling (the notes below the table say why)."""
    return _f(judged.value, ".0%") + (" !" if judged.above_ceiling else "")


def find_series(store: ResultStore, pattern: str | None) -> list[HistoryRow]:
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
    store = open_db(db)
    latest = find_series(store, pattern)
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


def changes(args: argparse.Namespace) -> int:
    """Detected level steps per series, with the dimension that changed there, and the
    series whose runs sit in machine phases too far apart for a step to show."""
    db, pattern = db_then_pattern(args, args.words)
    store = open_db(db)
    found: list[tuple[HistoryRow, Metric, ChangePoint]] = []
    notes = []
    for row in find_series(store, pattern):
        metric = series_metric(row)
        entries = series_history(store, row.series_key, metric.name)
        points = session_points(entries)
        for cp in change_points(points, metric, probes=session_probes(store, entries)):
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


def accepted_by(given: str | None) -> str:
    """Who accepts a level: ``--by``, else the login name (``getpass.getuser``: $LOGNAME,
    $USER, ... then the account), else ``unknown user``."""
    if given is not None:
        if not given.strip():
            raise ConfigError("--by is empty: name who accepts the new level, or leave --by "
                              "out for your login name")
        return given.strip()
    try:
        return getpass.getuser() or UNKNOWN_USER
    except (KeyError, OSError, ImportError):  # no such variable and no account entry
        return UNKNOWN_USER


UNKNOWN_USER = "unknown user"


def accept(args: argparse.Namespace) -> int:
    """Record a deliberate new level: the gate's baseline starts at the accepted result."""
    db, pattern = db_then_pattern(args, args.words)
    open_db(db).close()  # a tokperf DB, or refused before anything is written
    store = ResultStore.open(db_location(db))
    if not args.reason.strip():
        raise ConfigError("--reason is empty: say why the new level is accepted (it is stored "
                          "with who and when)")
    if args.all and pattern:
        raise ConfigError(f"--all and SERIES {pattern!r} both choose the series; give one")
    rows = find_series(store, pattern)
    if not (pattern or args.all or args.result is not None):
        raise ConfigError(f"accept moves a series' baseline: name the series (a key prefix "
                          f"or part of a test id; `tokperf history` lists them), or --result "
                          f"ID, or --all for every one of the {len(rows)} series")
    by = accepted_by(args.by)
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
          f"({r.engine_build or r.engine_version or '?'}), by {a.accepted_by}: {a.reason}"
          for r, a in accepted])
    return 0
