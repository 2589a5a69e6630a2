"""What ``tokperf history`` and ``tokperf changes`` print of a results DB: every series
with its latest figure; one series' runs with its noise, gate verdicts and level changes;
the level changes (steps and drifts). Each returns the JSON data and the text lines of one
view (``Shown``)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from pytest_tokperf.report.tables import Table, text
from pytest_tokperf.stats.calibration import format_noise, noise
from pytest_tokperf.stats.changepoints import ChangePoint, Point, change_points
from pytest_tokperf.stats.drift import drifts, resolution
from pytest_tokperf.stats.metric import Metric, fmt_p, interval_text, pct
from pytest_tokperf.stats.moved import HostExponents
from pytest_tokperf.storage.history import (
    JudgedEfficiency,
    efficiency_notes,
    entries_exponent,
    judged_efficiencies,
    series_history,
    series_metric,
    session_points,
    session_probes,
)
from pytest_tokperf.storage.lookup import find_series, series_labels
from pytest_tokperf.storage.store import HistoryRow, ResultStore


@dataclass(frozen=True, slots=True)
class Shown:
    """One view of stored results: ``data`` for ``--json``, ``lines`` for a person."""

    data: Any
    lines: list[str]


CLOCKS = {
    "decode": "engine timings where every repetition has them, else the client's",
    "prefill": "prompt tokens over the client's TTFT (an imported llama-bench pp row: its "
               "own t/s)",
    "aggregate": "all streams' output tokens per second of a round's wall time",
}
"""Whose clock a series' samples are read from, per metric (``metric_values``)."""


def _f(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _eff(judged: JudgedEfficiency, metric: Metric) -> str:
    """``57%``; ``106% !`` above the ceiling (the notes below the table say why); ``-``
    for a series judged on another figure than decode (a pp test: no decode ceiling)."""
    if metric.name != "decode":
        return "-"
    return _f(judged.value, ".0%") + (" !" if judged.above_ceiling else "")


def _figure(row: HistoryRow, metric: Metric) -> float | None:
    """A result's median of the metric its series is judged on (None: not in the row)."""
    return {"decode": row.decode_tokens_per_s,
            "prefill": row.prefill_tokens_per_s}.get(metric.name)


def history(store: ResultStore, pattern: str | None = None) -> Shown:
    """Every series ``pattern`` matches (all without one) with its latest build and
    figure; one series alone is shown with its runs (``series_runs``)."""
    latest = find_series(store, pattern)
    if pattern is not None and len(latest) == 1:
        return series_runs(store, latest[0])
    latest = sorted(latest, key=lambda r: (r.test_id, r.series_key))
    labels = series_labels(store, latest)
    judged = judged_efficiencies(store)
    metrics = {r.series_key: series_metric(r, r.test_id) for r in latest}
    rows = [(labels[r.series_key], r.series_key[:12], r.engine_build or "-",
             metrics[r.series_key].name, _f(_figure(r, metrics[r.series_key])),
             _eff(judged[r.result_id], metrics[r.series_key]), r.created_at[:19])
            for r in latest]
    data = [{**asdict(r), "label": labels[r.series_key], "metric": metrics[r.series_key].name,
             "judged_efficiency": asdict(judged[r.result_id])} for r in latest]
    return Shown(data, [*text(Table.of(("test", "series", "latest build", "metric", "tok/s",
                                        "eff", "at"), rows)),
                        *efficiency_notes([judged[r.result_id] for r in latest
                                           if metrics[r.series_key].name == "decode"])])


def _noise_line(points: list[Any], metric: Metric) -> str:
    reps = max((len(p.samples) for p in points), default=0)
    line = (format_noise(metric, noise([p.samples for p in points]), max(reps, 2))
            if reps > 1 else "noise: fewer than 2 repetitions per run, cannot estimate")
    phases = resolution(points, metric).note
    return f"{line}; {phases}" if phases else line


def series_runs(store: ResultStore, latest: HistoryRow) -> Shown:
    """One series' runs with their gate verdicts, its noise and what it can detect, and
    its level changes since its accepted level (as ``changes`` lists them)."""
    key, metric = latest.series_key, series_metric(latest, latest.test_id)
    moved = level_changes(store, key, metric)[1]
    entries = series_history(store, key, metric.name, since_accepted=False)
    line = _noise_line([e.point for e in entries], metric)
    gate = store.gate_verdicts(e.row.result_id for e in entries)
    accepted = {a.result_id: a for a in store.acceptances(key)}
    judged = judged_efficiencies(store)
    rows = []
    for e in entries:
        r, verdicts = e.row, {v.metric: v.verdict for v in gate[e.row.result_id]}
        rows.append((r.created_at[:19] + (" (accepted)" if r.result_id in accepted else ""),
                     e.point.version, r.hardware_name or "-",
                     _f(statistics.median(e.point.samples)),
                     _f(None if r.ttft_s is None else r.ttft_s * 1e3, ".0f"),
                     _eff(judged[r.result_id], metric), r.verdict, verdicts.get(metric.name, "-"),
                     verdicts.get("ttft", "-")))
    notes = [f"accepted level from {a.accepted_at[:19]}"
             + (f" by {a.accepted_by}" if a.accepted_by else "")
             + (f": {a.reason}" if a.reason else "") for a in accepted.values()]
    data = {"series_key": key, "metric": metric.name, "noise": line, "clock": CLOCKS[metric.name],
            "runs": [{**asdict(e.row), "samples": list(e.point.samples),
                      "judged_efficiency": asdict(judged[e.row.result_id]),
                      "gate": [asdict(v) for v in gate[e.row.result_id]]} for e in entries],
            "acceptances": [asdict(a) for a in accepted.values()],
            "changes": [asdict(cp) for cp in moved]}
    header = ("at", "build", "hardware", metric.name, "TTFT ms", "eff", "verdict",
              f"gate {metric.name}", "gate TTFT")
    return Shown(data, [f"series {key} ({latest.test_id})", *text(Table.of(header, rows)),
                        *notes, *efficiency_notes([judged[e.row.result_id] for e in entries
                                                   if metric.name == "decode"]),
                        *(f"{_where(cp)}: {cp.verdict} {pct(cp.relative_change)} "
                          f"{interval_text(cp.ci_low, cp.ci_high)}" for cp in moved), line])


NO_CHANGES = ("no change points: every series is level, or too short to tell (a step needs 2 "
              "runs on each side, a drift 6 runs; 5-10 runs of 3-5 repetitions resolve a 5% "
              "step at a few % noise)")


def level_changes(store: ResultStore, key: str, metric: Metric,
                  fits: dict[str | None, HostExponents] | None = None
                  ) -> tuple[list[Point], list[ChangePoint]]:
    """A series' runs since its accepted level, and its steps and drifts among them
    (``fits``: each host's exponents, ``entries_exponent``, shared by a command's series)."""
    entries = series_history(store, key, metric.name)
    points = session_points(entries)
    exponent = entries_exponent(store, entries, metric.name, {} if fits is None else fits)
    return points, [*change_points(points, metric, probes=session_probes(store, entries),
                                   exponent=exponent), *drifts(points, metric)]


def _where(cp: ChangePoint) -> str:
    return (f"drift {cp.version_before}..{cp.version_after}" if cp.kind == "drift"
            else f"step {cp.version_before} -> {cp.version_after}")


def changes(store: ResultStore, pattern: str | None = None) -> Shown:
    """Level steps and drifts (slides whose total reaches the minimum effect) per series,
    with the dimension that changed there, and the series whose runs sit in machine phases
    too far apart for a step to show."""
    found: list[tuple[HistoryRow, Metric, ChangePoint]] = []
    notes: list[str] = []
    fits: dict[str | None, HostExponents] = {}
    for row in find_series(store, pattern):
        metric = series_metric(row, row.test_id)
        points, moved = level_changes(store, row.series_key, metric, fits)
        found += [(row, metric, cp) for cp in moved]
        seen = resolution(points, metric)
        if seen.phase_dominated:
            notes.append(f"{row.series_key[:12]} {row.test_id}: {seen.note}")
    rows = [(r.series_key[:12], r.test_id, _where(cp), m.name, pct(cp.relative_change),
             fmt_p(cp.p_value),
             ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in cp.changed.items()) or "-")
            for r, m, cp in found]
    lines = (text(Table.of(("series", "test", "where", "metric", "change", "p",
                            "what changed"), rows)) if rows
             else [NO_CHANGES + (", or its runs sit in machine phases:" if notes else "")])
    return Shown([{"series_key": r.series_key, "metric": m.name, **asdict(cp)}
                  for r, m, cp in found], lines + notes)
