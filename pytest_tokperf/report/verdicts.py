"""Verdict tables of two versions: ``tokperf compare`` (stored results) and ``tokperf
compare-builds`` (sessions or the same-run A/B), as the terminal's lines and GitHub
markdown (``--markdown``, ``-o md``: compare-llama-bench's table with the verdict).
Every table is written by ``report.tables``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pytest_tokperf.report.tables import Cell, Table, markdown, md_cell, text
from pytest_tokperf.stats.metric import pct
from pytest_tokperf.versions.compare import Compared, SeriesComparison
from pytest_tokperf.versions.paired import PairedBuildComparison, PairedComparison
from pytest_tokperf.versions.sessions import BuildComparison


def compare_lines(result: Compared) -> list[str]:
    """``tokperf compare``'s table, then each series' verdict and reason."""
    rows = [(s.series_key[:12], s.label, s.verdict.verdict, s.verdict.metric,
             pct(s.verdict.relative_change)) for s in result.series]
    return [*text(Table.of(("series", "test", "verdict", "metric", "change"), rows)), "",
            *(f"{s.series_key[:12]} {s.verdict.verdict}: {s.verdict.reason}"
              for s in result.series)]


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _ms(seconds: float | None) -> str:
    return _num(None if seconds is None else seconds * 1e3, ".1f")


def _level(confidence: float) -> str:
    """``95%``, ``99.75%``: a confidence to the digits that tell Holm's levels apart."""
    return f"{confidence * 100:.6g}%"


def _series_rows(s: SeriesComparison, ttft: bool, one_level: bool) -> list[list[str | Cell]]:
    """A series' rows: the judged figure first (with the verdict), then decode or prefill
    where both sides have it."""
    shown = [s.metric.name] + [m for m in ("decode", "prefill")
                               if m != s.metric.name and s.baseline.median(m) is not None
                               and s.current.median(m) is not None]
    rows: list[list[str | Cell]] = []
    for i, name in enumerate(shown):
        base, cur = s.baseline.mean(name), s.current.mean(name)
        cells: list[str | Cell] = [s.label, s.tests.get(name, name), _num(base), _num(cur),
                                   _num(cur / base if base and cur is not None else None),
                                   _num(s.baseline.median(name)), _num(s.current.median(name))]
        if ttft:
            cells += ([_ms(s.baseline.median("ttft")), _ms(s.current.median("ttft"))]
                      if i == 0 else ["", ""])
        v = s.verdict
        at = "" if one_level or not math.isfinite(v.confidence) else f" at {_level(v.confidence)}"
        cells += ([Cell(v.verdict, strong=v.verdict == "regression"), v.brief() + at]
                  if i == 0 else ["", ""])
        rows.append(cells)
    return rows


MD_NOTE = ("t/s mean: llama-bench's avg_ts (each run's mean over its repetitions, averaged "
           "over the runs), as compare-llama-bench.py shows it, and B/A their ratio (its "
           "Speedup); t/s median: the median of every repetition, tokperf's figure elsewhere; "
           "TTFT: the median; verdict and change: the judge's (as `tokperf compare`), on one "
           "figure per series (decode; prefill for a prompt-only series).")


def compare_markdown(result: Compared) -> list[str]:
    """compare-llama-bench's table: per series a row per figure (tg: decode, pp: prefill),
    both sides' mean t/s (llama-bench's) and B/A, their medians, TTFT where measured; the
    verdict and its interval (the judged figure's row only) last."""
    ttft = any(s.baseline.median("ttft") is not None or s.current.median("ttft") is not None
               for s in result.series)
    levels = {s.verdict.confidence for s in result.series if math.isfinite(s.verdict.confidence)}
    one_level = len(levels) == 1
    interval = f"change [{_level(levels.pop())} interval]" if one_level else "change [interval]"
    header = ["Test id", "Test", "t/s A mean", "t/s B mean", "B/A", "t/s A median",
              "t/s B median", *(["TTFT ms A", "TTFT ms B"] if ttft else []), "verdict", interval]
    rows = [row for s in sorted(result.series, key=lambda s: (s.label, s.series_key))
            for row in _series_rows(s, ttft, one_level)]
    return [f"**A**: {md_cell(result.baseline_name)}, **B**: {md_cell(result.current_name)}. "
            + MD_NOTE, "", *markdown(Table.of(header, rows, numeric=range(2, len(header) - 2)))]


SESSIONS_HEADER = ("test", "metric", "median A", "median B", "B/A", "verdict",
                   "change [interval]", "p")
PAIRED_HEADER = ("test", "metric", "median A", "median B", "pairs", "verdict",
                 "B/A change [interval]")


def sessions_table(found: Sequence[BuildComparison]) -> Table:
    """``compare-builds --mode sessions``: per test and metric, both medians and the verdict."""
    rows = []
    for f in found:
        c, unit = f.comparison, "tok/s" if f.target.metric == "decode" else "s"
        rows.append((f.target.test_id, f.target.metric, f"{f.median_a:.4g} {unit}",
                     f"{f.median_b:.4g} {unit}", f"{f.ratio:.3f}", c.verdict, c.brief(),
                     f"{c.p_value:.2g}"))
    return Table.of(SESSIONS_HEADER, rows, numeric=(2, 3, 4, 7))


def paired_table(found: Sequence[PairedBuildComparison]) -> Table:
    """``compare-builds`` on the same-run A/B: per test and metric, medians, pairs, verdict."""
    rows = []
    for f in found:
        c, unit = f.comparison, "s" if f.metric == "ttft" else "tok/s"
        word = c.verdict + (" (measured busy)" if f.busy and c.flagged else "")
        rows.append((f.test_id, f.metric, f"{f.median_a:.4g} {unit}", f"{f.median_b:.4g} {unit}",
                     str(f.pairs), word, c.brief()))
    return Table.of(PAIRED_HEADER, rows, numeric=(2, 3, 4))


def titled_markdown(title: str, table: Table, notes: Sequence[str] = ()) -> str:
    """A titled verdict table for a job summary (``$GITHUB_STEP_SUMMARY``)."""
    return "\n".join([f"### {md_cell(title)}", "", *markdown(table), "",
                      *(md_cell(n) for n in notes)]) + "\n"


SESSIONS_NOTE = ("median = the median of the session medians, B/A their ratio (a session "
                 "stalled by a neighbour moves it by one session, not by its weight in a "
                 "mean); the verdict is the regression judge's, repetitions nested in "
                 "sessions (significant AND at least the minimum effect)")


def paired_notes(found: PairedComparison, sessions: int, start_sd_pct: float) -> list[str]:
    """What the same-run A/B's table means, and which sessions were measured busy."""
    lines = ["the change is the geometric mean of the per-pair ratios B/A; its interval "
             + (f"pools the {sessions} sessions (each a fresh start of both servers), each "
                f"allowed a level of its own of {start_sd_pct:g}% or the sessions' own spread "
                "where larger" if sessions > 1
                else "has the pair as its unit (one server start a side)")]
    if found.busy_first:
        lines.append(f"{len(found.busy_first)} session(s) measured busy, then again after a "
                     f"quiet window (the busy one: "
                     f"{', '.join(str(p) for p in found.busy_first)})")
    busy = next((f.busy for f in found.results if f.busy), "")
    if busy:
        lines.append(f"measured busy ({busy}): a verdict measured busy is a reading, not a "
                     "gate's; --busy judge lets it decide, --busy fail fails it; rerun on a "
                     "quiet machine")
    return lines


def paired_json(found: PairedComparison) -> dict[str, Any]:
    return {"a": found.a.label, "b": found.b.label, "changed": found.changed,
            "wall_s": round(found.wall_s, 1), "ab_json": [str(p) for p in found.documents],
            "busy_first": [str(p) for p in found.busy_first],
            "results": [asdict(f) for f in found.results]}
