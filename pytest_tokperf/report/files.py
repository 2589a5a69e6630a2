"""The files a session leaves behind: markdown (and the GitHub step summary), JSON, HTML.

Built from what the session measured (its rows and gate findings); the HTML report
also reads the results DB for each series' history and change points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.bench.gate import GateFinding
from pytest_tokperf.report.table import Row
from pytest_tokperf.report.data import ResultFigures, SeriesChange, figures_from_row
from pytest_tokperf.report.formats import (
    dumps_report,
    markdown_summary,
    report_json,
    write_markdown,
    write_step_summary,
)
from pytest_tokperf.results import RunInfo


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
    db: Path | None = None,
    run: RunInfo | None = None,
) -> list[Path]:
    """Write every requested report; returns the paths written."""
    figures: list[ResultFigures] = [figures_from_row(row) for row in rows]
    changes = gate_changes(findings)
    written: list[Path] = []
    markdown = markdown_summary(figures, changes)
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
        written.append(_html(figures, changes, paths.html, db, run))
    return written


def _html(figures: list[ResultFigures], changes: list[SeriesChange], path: Path,
          db: Path | None, run: RunInfo | None) -> Path:
    from pytest_tokperf.report.html import build_html_report, render_html, write_html

    if db is not None and run is not None:
        from pytest_tokperf.storage.store import ResultStore

        store = ResultStore.open(db)
        try:
            return build_html_report(store, path, run_id=run.run_id, extra_changes=changes)
        finally:
            store.close()
    return write_html(render_html(figures, changes, (), subtitle="results not stored"), path)
