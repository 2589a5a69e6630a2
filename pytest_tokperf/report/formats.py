"""CI formats: a markdown summary for one screen, a JSON document, JUnit properties.

JSON keys are stable with units in their names; NaN becomes ``null``.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.report.table import Row
from pytest_tokperf.report.report_data import (
    ResultFigures,
    SeriesChange,
    figures_from_row,
    workload_label,
)
from pytest_tokperf.results import MachineLoad, RunInfo
from pytest_tokperf.stats.metric import fmt_p, interval_text, pct

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
JSON_SCHEMA = "pytest-tokperf/report/1"
SUMMARY_HEADER = (
    "test", "workload", "TTFT ms", "prefill tok/s", "decode tok/s", "ceiling tok/s",
    "efficiency", "chars/s", "all streams tok/s", "build", "verdict", "gate",
)
_VERDICT = SUMMARY_HEADER.index("verdict")
VERDICT_ORDER = ("fail", "error", "suspect", "unstable", "busy", "pass", "unchecked")
_SECTIONS = (
    ("regression", "Regressions"),
    ("improvement", "Improvements"),
    ("inconclusive", "Too noisy to decide"),
)


def rate(value: float | None, stdev: float | None = None) -> str:
    """Tokens per second to a useful precision: ``102.4 ±1.9``, ``5230``."""
    if value is None:
        return "-"
    text = f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    if stdev:
        text += f" ±{stdev:.1f}" if stdev < 1000 else f" ±{stdev:.0f}"
    return text


def summary_cells(fig: ResultFigures) -> tuple[str, ...]:
    """One row of the summary table as text, in ``SUMMARY_HEADER`` order."""
    return (
        fig.test_id,
        workload_label(fig.workload) + (f", draft {fig.draft_model}" if fig.draft_model else ""),
        "-" if fig.ttft_s is None else f"{fig.ttft_s * 1e3:.1f}",
        rate(fig.prefill_tokens_per_s),
        rate(fig.decode_tokens_per_s, fig.decode_tokens_per_s_stdev),
        rate(fig.ceiling_decode_tokens_per_s),
        f"{fig.efficiency:.1%}" if fig.efficiency is not None else "-",
        rate(fig.chars_per_s),
        rate(fig.aggregate_tokens_per_s) if fig.concurrency > 1 else "-",
        fig.build_label,
        fig.verdict,
        fig.gate or "-",
    )


def change_line(change: SeriesChange) -> str:
    """``decode −12.0% [−14.1%, −9.8%], p=0.0005, b6000 → b6100``: figures and builds."""
    interval = ""
    if not math.isnan(change.ci_low):
        interval = f" {interval_text(change.ci_low, change.ci_high)}"
    return (f"{change.metric} {pct(change.relative_change)}{interval}, "
            f"p={fmt_p(change.p_value)}, {change.baseline} → {change.current}")


def headline(figures: Sequence[ResultFigures], changes: Sequence[SeriesChange]) -> str:
    """``5 results: 3 pass, 1 fail, 1 unchecked · 1 regression`` (verdicts worst first)."""
    counts = Counter(f.verdict for f in figures)
    order = [*VERDICT_ORDER, *sorted(v for v in counts if v not in VERDICT_ORDER)]
    text = f"{len(figures)} result{'s' * (len(figures) != 1)}"
    parts = [f"{counts[v]} {v}" for v in order if counts[v]]
    if parts:
        text += ": " + ", ".join(parts)
    warned = sum(1 for f in figures if f.warnings)
    if warned:
        text += f" · {warned} with warnings"
    steps = Counter(c.verdict for c in changes)
    found = [f"{steps[v]} {v}{'s' * (steps[v] != 1)}" for v in ("regression", "improvement")
             if steps[v]]
    if changes:
        text += " · " + (", ".join(found) if found else "no regressions")
    return text


def _md_cell(text: str) -> str:
    """Text safe in a GitHub table cell: HTML, pipes and backslashes escaped, one line."""
    text = html.escape(text, quote=False)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown_summary(
    figures: Sequence[ResultFigures],
    changes: Sequence[SeriesChange] = (),
    *,
    title: str = "pytest-tokperf",
) -> str:
    """One screen of GitHub-flavoured markdown: the results table, then the changes. Flags
    and inconclusive changes get a section each; unchanged ones only a count."""
    lines = [f"### {title}: {headline(figures, changes)}", ""]
    setups = sorted({f.setup_label for f in figures})
    if setups:
        lines += [f"Setup: {_md_cell('; '.join(setups))}", ""]
    if figures:
        lines.append("| " + " | ".join(SUMMARY_HEADER) + " |")
        lines.append("|" + "|".join(["---", "---", *["---:"] * 7, "---", "---", "---"]) + "|")
        for fig in figures:
            cells = [_md_cell(c) for c in summary_cells(fig)]
            if fig.verdict in ("fail", "error", "suspect"):
                cells[_VERDICT] = f"**{cells[_VERDICT]}**"
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    else:
        lines += ["No results.", ""]
    warned = [f for f in figures if f.warnings]
    if warned:
        lines += ["#### Warnings", ""]
        for fig in warned:
            for warning in fig.warnings:
                lines.append(f"- **{_md_cell(fig.test_id)}**: {_md_cell(warning)}")
        lines.append("")
    for verdict, heading in _SECTIONS:
        picked = [c for c in changes if c.verdict == verdict]
        if not picked:
            continue
        lines += [f"#### {heading}", ""]
        for change in picked:
            lines.append(f"- **{_md_cell(change.test_id)}** {verdict}: "
                         f"{_md_cell(change_line(change))}")
        lines.append("")
    return "\n".join(lines)


def write_step_summary(markdown: str, env: Mapping[str, str]) -> Path | None:
    """Append ``markdown`` to the file ``$GITHUB_STEP_SUMMARY`` names; ``None`` when unset."""
    target = env.get(STEP_SUMMARY_ENV)
    if not target:
        return None
    return write_markdown(markdown, Path(target), append=True, source=STEP_SUMMARY_ENV)


def write_markdown(
    markdown: str, path: Path, *, append: bool = False, source: str = "the markdown path"
) -> Path:
    """Write (or append) ``markdown`` with a trailing newline; ``ConfigError`` if unwritable."""
    try:
        with Path(path).open("a" if append else "w", encoding="utf-8") as out:
            out.write(markdown.rstrip("\n") + ("\n\n" if append else "\n"))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the markdown summary to {str(path)!r} (from {source}): {exc}"
        ) from exc
    return Path(path)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def result_json(fig: ResultFigures) -> dict[str, Any]:
    """One result with stable, unit-named keys."""
    return {
        "test_id": fig.test_id,
        "series_key": fig.series_key,
        "run_id": fig.run_id,
        "created_at": fig.created_at,
        "engine_name": fig.engine_name,
        "engine_version": fig.engine_version,
        "engine_build": fig.engine_build,
        "hardware_name": fig.hardware_name,
        "model_file_name": fig.model_file_name,
        "prompt_tokens": fig.prompt_tokens,
        "generate_tokens": fig.generate_tokens,
        "depth_tokens": fig.depth_tokens,
        "cached_prefix_tokens": fig.cached_prefix_tokens,
        "chat": fig.chat,
        "draft_model": fig.draft_model,
        "mean_decode_depth_tokens": fig.mean_decode_depth_tokens,
        "concurrency": fig.concurrency,
        "repetitions": fig.repetitions,
        "ttft_s": _finite(fig.ttft_s),
        "prefill_tokens_per_s": _finite(fig.prefill_tokens_per_s),
        "decode_tokens_per_s": _finite(fig.decode_tokens_per_s),
        "decode_tokens_per_s_stdev": _finite(fig.decode_tokens_per_s_stdev),
        "decode_source": fig.decode_source,
        "ceiling_decode_tokens_per_s": _finite(fig.ceiling_decode_tokens_per_s),
        "efficiency": _finite(fig.efficiency),
        "chars_per_s": _finite(fig.chars_per_s),
        "aggregate_tokens_per_s": _finite(fig.aggregate_tokens_per_s),
        "requests_per_s": _finite(fig.requests_per_s),
        "ttft_bound_s": _finite(fig.ttft_bound_s),
        "verdict": fig.verdict,
        "gate": fig.gate or None,
        "warnings": list(fig.warnings),
        "machine_load": load_json(fig.machine_load),
    }


def load_json(load: MachineLoad | None) -> dict[str, Any] | str | None:
    """The machine's load; "unknown" without /proc, None where nothing was sampled."""
    if load is None:
        return None
    if not load.known:
        return "unknown"
    return {**{k: _finite(v) for k, v in asdict(load).items()},
            "others_cpus": load.others_cpus, "loaded": load.loaded}


def change_json(change: SeriesChange) -> dict[str, Any]:
    return {
        "test_id": change.test_id,
        "series_key": change.series_key,
        "metric": change.metric,
        "verdict": change.verdict,
        "relative_change": _finite(change.relative_change),
        "ci_low": _finite(change.ci_low),
        "ci_high": _finite(change.ci_high),
        "p_value": _finite(change.p_value),
        "baseline": change.baseline,
        "current": change.current,
        "reason": change.reason,
    }


def report_json(
    figures: Sequence[ResultFigures],
    changes: Sequence[SeriesChange] = (),
    *,
    run: RunInfo | None = None,
) -> dict[str, Any]:
    """The session document: ``schema``, ``run``, ``counts``, ``results``, ``changes``."""
    counts = Counter(f.verdict for f in figures)
    return {
        "schema": JSON_SCHEMA,
        "run": None if run is None else {
            "run_id": run.run_id, "started_at": run.started_at, "host": run.host,
            "os": run.os, "python": run.python, "plugin_version": run.plugin_version,
            "pytest_version": run.pytest_version, "project_commit": run.project_commit,
            "ci_provider": run.ci_provider, "ci_job": run.ci_job,
        },
        "counts": {v: counts[v] for v in sorted(counts)},
        "results_with_warnings": sum(1 for f in figures if f.warnings),
        "results": [result_json(f) for f in figures],
        "changes": [change_json(c) for c in changes],
    }


def dumps_report(document: Mapping[str, Any]) -> str:
    """Indented, key-order-stable strict JSON (NaN and infinities as null)."""
    return dumps(document) + "\n"


def _load_properties(load: MachineLoad | None) -> list[tuple[str, str | float | None]]:
    if load is None or not load.known:
        return [("tokperf_machine_load", "unknown")] if load is not None else []
    return [("tokperf_machine_busy_cpus", load.busy_cpus),
            ("tokperf_machine_others_cpus", load.others_cpus),
            ("tokperf_machine_run_queue", load.run_queue),
            ("tokperf_machine_steal", load.steal),
            ("tokperf_machine_loaded", "yes" if load.loaded else "no")]


def junit_properties(row: ResultFigures | Row) -> list[tuple[str, str | float]]:
    """``record_property`` pairs: ``tokperf_<figure>`` with SI units, unknowns left out."""
    fig = row if isinstance(row, ResultFigures) else figures_from_row(row)
    values: list[tuple[str, str | float | None]] = [
        ("tokperf_ttft_s", fig.ttft_s),
        ("tokperf_prefill_tokens_per_s", fig.prefill_tokens_per_s),
        ("tokperf_decode_tokens_per_s", fig.decode_tokens_per_s),
        ("tokperf_decode_tokens_per_s_stdev", fig.decode_tokens_per_s_stdev),
        ("tokperf_ceiling_decode_tokens_per_s", fig.ceiling_decode_tokens_per_s),
        ("tokperf_efficiency", fig.efficiency),
        ("tokperf_chars_per_s", fig.chars_per_s),
        ("tokperf_aggregate_tokens_per_s", fig.aggregate_tokens_per_s),
        ("tokperf_requests_per_s", fig.requests_per_s),
        ("tokperf_ttft_bound_s", fig.ttft_bound_s),
        ("tokperf_prompt_tokens", float(fig.prompt_tokens)),
        ("tokperf_generate_tokens", float(fig.generate_tokens)),
        ("tokperf_repetitions", float(fig.repetitions)),
        ("tokperf_engine", fig.engine_name),
        ("tokperf_engine_build", fig.build_label),
        ("tokperf_verdict", fig.verdict),
        ("tokperf_gate", fig.gate or None),
        ("tokperf_warnings", " | ".join(fig.warnings) or None),
        *_load_properties(fig.machine_load),
    ]
    return [(k, v) for k, v in values
            if v is not None and not (isinstance(v, float) and not math.isfinite(v))]
