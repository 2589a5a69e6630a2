"""The files a session leaves behind: markdown (and the GitHub step summary), JSON, HTML.

Built from what the session measured (its rows and gate findings); the HTML report
also reads the results DB for each series' history and change points. ``tokperf report``
writes the same three from a results DB; the suffix names the format in both
(``report_kind``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

from pytest_tokperf.bench.gate import GateFinding
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.report.formats import (
    dumps_report,
    markdown_summary,
    report_json,
    write_markdown,
    write_step_summary,
)
from pytest_tokperf.report.report_data import (
    ResultFigures,
    SeriesChange,
    figures_from_row,
)
from pytest_tokperf.report.table import Row
from pytest_tokperf.report.tables import csv_text
from pytest_tokperf.results import RunInfo
from pytest_tokperf.storage.location import DbLocation

if TYPE_CHECKING:
    from pytest_tokperf.bench.ab import ABResult
    from pytest_tokperf.stats.metric import Metric
    from pytest_tokperf.storage.store import ResultStore

ReportKind = Literal["md", "json", "html"]


def report_kind(path: str, flag: str) -> ReportKind:
    """The format a report path's suffix names, by the rule ``--tokperf-report`` follows
    (``settings.REPORT_FORMATS``), or a ``ConfigError`` naming the suffixes written here."""
    from pytest_tokperf.settings import REPORT_FORMATS

    suffix = Path(path).suffix.lower()
    kinds = {s: cast(ReportKind, k) for s, k in REPORT_FORMATS.items()
             if k in ("md", "json", "html")}
    if suffix not in kinds:
        raise ConfigError(f"{flag} {path!r}: the suffix names the format, and "
                          f"{suffix or 'no suffix'!r} is none of {', '.join(kinds)}; "
                          f"e.g. {flag} report.html")
    return kinds[suffix]


@dataclass(frozen=True, slots=True)
class ReportPaths:
    markdown: Path | None = None
    json: Path | None = None
    html: Path | None = None


def gate_changes(findings: Sequence[GateFinding]) -> list[SeriesChange]:
    """The gate's verdicts as report entries; a first run (no baseline) is not one."""
    return [
        SeriesChange.from_comparison(f.test_id, f.comparison, baseline=f.baseline,
                                     current=f.current, series_key=f.series_key)
        for f in findings
        if f.comparison.n_baseline > 0
    ]


def write_session_reports(
    rows: Sequence[Row],
    findings: Sequence[GateFinding],
    paths: ReportPaths,
    env: Mapping[str, str],
    *,
    db: DbLocation | None = None,
    run: RunInfo | None = None,
    store: ResultStore | None = None,
    table_columns: Sequence[str] | None = None,
) -> list[Path]:
    """Write every requested report; returns the paths written. ``store``: the run's
    open store (on PostgreSQL only its connection sees the run before it is committed);
    ``table_columns``: the markdown table's (``tokperf_table_columns``)."""
    figures: list[ResultFigures] = [figures_from_row(row) for row in rows]
    changes = gate_changes(findings)
    written: list[Path] = []
    markdown = markdown_summary(figures, changes, columns=table_columns)
    step = write_step_summary(markdown, env)
    if step is not None:
        written.append(step)
    if paths.markdown is not None:
        written.append(write_markdown(markdown, paths.markdown))
    if paths.json is not None:
        paths.json.parent.mkdir(parents=True, exist_ok=True)
        paths.json.write_text(dumps_report(report_json(figures, changes, run=run)), encoding="utf-8")
        written.append(paths.json)
    if paths.html is not None:
        written.append(_html(figures, changes, paths.html, db, run, store))
    return written


def _html(figures: list[ResultFigures], changes: list[SeriesChange], path: Path,
          db: DbLocation | None, run: RunInfo | None, open_store: ResultStore | None) -> Path:
    from pytest_tokperf.report.html import build_html_report, render_html, write_html

    if open_store is not None and run is not None:
        return build_html_report(open_store, path, run_id=run.run_id, extra_changes=changes)
    if db is not None and run is not None:
        from pytest_tokperf.storage.store import ResultStore

        store = ResultStore.open(db)
        try:
            return build_html_report(store, path, run_id=run.run_id, extra_changes=changes)
        finally:
            store.close()
    return write_html(render_html(figures, changes, (), subtitle="results not stored"), path)


def store_report(
    store: ResultStore, kind: ReportKind, path: Path, *, run_id: str | None = None,
    series_keys: Sequence[str] | None = None, metric: Metric | None = None,
    limit: int | None = None,
) -> Path:
    """A report of a results DB, as the session's: its latest result per series (or
    ``run_id``'s results), and every series' change points. HTML draws the figures too."""
    from pytest_tokperf.report.html import build_html_report
    from pytest_tokperf.report.report_data import load_histories, report_changes, store_figures

    if kind == "html":
        return build_html_report(store, path, run_id=run_id, series_keys=series_keys,
                                 metric=metric, limit=limit)
    figures = store_figures(store, run_id=run_id, series_keys=series_keys)
    keys = series_keys if run_id is None else sorted({f.series_key for f in figures
                                                       if f.series_key is not None})
    changes = report_changes(store, load_histories(store, keys, metric=metric, limit=limit))
    if kind == "md":
        return write_markdown(markdown_summary(figures, changes), path,
                              source="tokperf report -o")
    run = next((r.run for r in store.runs() if r.run.run_id == run_id), None)
    path.write_text(dumps_report(report_json(figures, changes, run=run)), encoding="utf-8")
    return path


def export_text(db: DbLocation, fmt: Literal["csv", "json"]) -> tuple[int, str]:
    """Every stored result (``storage.exchange.exported``) as CSV, its JSON columns as
    text, or a JSON list; and how many results."""
    from pytest_tokperf.storage.exchange import exported

    header, rows = exported(db, decode=fmt == "json")
    if fmt == "json":
        return len(rows), dumps(rows, indent=1) + "\n"
    return len(rows), csv_text(header, rows)


def export_results(db: DbLocation, fmt: Literal["csv", "json"], out: Path) -> int:
    """``export_text`` written to ``out`` (its folder made); how many results."""
    count, written = export_text(db, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="") as handle:
        handle.write(written)
    return count


def write_ab_json(results: Sequence[tuple[str, ABResult]], path: Path) -> Path:
    """The session's same-run A/Bs (``report.formats.ab_document``) as strict JSON."""
    from pytest_tokperf.report.formats import ab_document

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(ab_document(results)), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"the A/B report {str(path)!r} (--tokperf-ab-json) cannot be "
                          f"written: {exc.strerror or exc}; name a writable path") from exc
    return path
