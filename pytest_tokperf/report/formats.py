"""CI formats: a markdown summary for one screen, a JSON document, JUnit properties.

The summary's columns (``COLUMNS``) are chosen and sorted by name. JSON keys are stable
with units in their names, every repetition under ``samples``; NaN becomes ``null``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.jsontext import dumps, finite
from pytest_tokperf.report.report_data import (
    Percentiles,
    RepetitionFigures,
    ResultFigures,
    SeriesChange,
    figures_from_row,
    workload_label,
)
from pytest_tokperf.report.session_rows import Row
from pytest_tokperf.report.tables import (
    Cell,
    Table,
    markdown,
    md_cell,
    rate,
    spread,
    unstable_note,
)
from pytest_tokperf.results import BenchResult, MachineLoad, RunInfo, Summary
from pytest_tokperf.stats.metric import fmt_p, interval_text, pct

if TYPE_CHECKING:
    from pytest_tokperf.bench.ab import ABResult

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
JSON_SCHEMA = "pytest-tokperf/report/1"
VERDICT_ORDER = ("fail", "error", "suspect", "unstable", "busy", "pass", "unchecked")
_SECTIONS = (
    ("regression", "Regressions"),
    ("improvement", "Improvements"),
    ("inconclusive", "Too noisy to decide"),
)


def milliseconds(value_s: float | None) -> str:
    """Seconds as ms to a useful precision: ``0.42``, ``9.84``, ``50.0``, ``1240``."""
    if value_s is None:
        return "-"
    ms = value_s * 1e3
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def percentiles_ms(values: Percentiles | None) -> str:
    """p50/p90/p99 in ms, ``50.0/52.1/55.0``; ``-`` where none are stored."""
    return "-" if values is None else "/".join(milliseconds(v) for v in values)


SortValue = float | str | None
"""A column's value for sorting: numbers as numbers, text as text, None (missing) last."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of the summary table (markdown, HTML): its header, cell and sort value."""

    name: str
    header: str
    cell: Callable[[ResultFigures], str]
    value: Callable[[ResultFigures], SortValue]
    numeric: bool = True


def _verdict_rank(fig: ResultFigures) -> float:
    order = VERDICT_ORDER
    return float(order.index(fig.verdict) if fig.verdict in order else len(order))


def _workload_cell(fig: ResultFigures) -> str:
    return workload_label(fig.workload) + (f", draft {fig.draft_model}" if fig.draft_model
                                           else "")


def _p50(values: Percentiles | None) -> float | None:
    return None if values is None else values[0]


def _streams(fig: ResultFigures) -> float | None:
    return fig.aggregate_tokens_per_s if fig.concurrency > 1 else None


def decode_spread(fig: ResultFigures) -> Summary | None:
    """The judged decode's median and SD, its range from the stored repetitions."""
    if fig.decode_tokens_per_s is None:
        return None
    values = fig.judged_decode_samples
    low, high = (min(values), max(values)) if values else (math.nan, math.nan)
    return Summary(fig.decode_tokens_per_s, fig.decode_tokens_per_s,
                   fig.decode_tokens_per_s_stdev or 0.0, low, high, fig.repetitions)


_COLUMN_LIST = (
    Column("test", "test", lambda f: f.test_id, lambda f: f.test_id, numeric=False),
    Column("workload", "workload", _workload_cell,
           lambda f: float(f.depth_tokens + f.prompt_tokens), numeric=False),
    Column("ttft", "TTFT ms", lambda f: "-" if f.ttft_s is None else f"{f.ttft_s * 1e3:.1f}",
           lambda f: f.ttft_s),
    Column("ttft_percentiles", "TTFT p50/p90/p99 ms", lambda f: percentiles_ms(f.ttft),
           lambda f: _p50(f.ttft)),
    Column("ttft_bound", "TTFT bound ms", lambda f: milliseconds(f.ttft_bound_s),
           lambda f: f.ttft_bound_s),
    Column("prefill", "prefill tok/s", lambda f: rate(f.prefill_tokens_per_s),
           lambda f: f.prefill_tokens_per_s),
    Column("decode", "decode tok/s", lambda f: spread(decode_spread(f)),
           lambda f: f.decode_tokens_per_s),
    Column("engine_decode", "engine decode tok/s", lambda f: rate(f.engine_decode_tokens_per_s),
           lambda f: f.engine_decode_tokens_per_s),
    Column("agreement", "agree",
           lambda f: "-" if f.decode_agreement is None else f"{f.decode_agreement:.2%}",
           lambda f: f.decode_agreement),
    Column("inter_token_percentiles", "inter-token p50/p90/p99 ms",
           lambda f: percentiles_ms(f.inter_token), lambda f: _p50(f.inter_token)),
    Column("repetitions", "n", lambda f: str(f.repetitions), lambda f: float(f.repetitions)),
    Column("ceiling", "ceiling tok/s", lambda f: rate(f.ceiling_decode_tokens_per_s),
           lambda f: f.ceiling_decode_tokens_per_s),
    Column("efficiency", "efficiency",
           lambda f: f"{f.efficiency:.1%}" if f.efficiency is not None else "-",
           lambda f: f.efficiency),
    Column("chars_per_s", "chars/s", lambda f: rate(f.chars_per_s), lambda f: f.chars_per_s),
    Column("all_streams", "all streams tok/s", lambda f: rate(_streams(f)), _streams),
    Column("build", "build", lambda f: f.build_label, lambda f: f.build_label, numeric=False),
    Column("verdict", "verdict", lambda f: f.verdict, _verdict_rank, numeric=False),
    Column("gate", "gate", lambda f: f.gate or "-", lambda f: f.gate or None, numeric=False),
)
COLUMNS: dict[str, Column] = {c.name: c for c in _COLUMN_LIST}
"""Every column the summary can show, by the name ``tokperf_table_columns`` uses (the
names ``settings.TABLE_COLUMNS`` checks, in its order)."""
DEFAULT_COLUMNS = (
    "test", "workload", "ttft_percentiles", "prefill", "decode", "inter_token_percentiles",
    "ceiling", "efficiency", "chars_per_s", "all_streams", "build", "verdict", "gate",
)
"""What the markdown and HTML summaries show unless ``tokperf_table_columns`` says."""


def table_columns(names: Sequence[str] | None = None) -> list[Column]:
    """The columns named (default ``DEFAULT_COLUMNS``); ``ConfigError`` lists the known."""
    chosen = DEFAULT_COLUMNS if names is None else names
    unknown = [n for n in chosen if n not in COLUMNS]
    if unknown:
        raise ConfigError(f"no column {', '.join(map(repr, unknown))}; known: "
                          f"{', '.join(COLUMNS)}")
    return [COLUMNS[n] for n in chosen]


def _order_key(value: SortValue) -> tuple[float, str]:
    return (value, "") if isinstance(value, float) else (0.0, str(value))


def sort_figures(figures: Sequence[ResultFigures], order: Sequence[str]) -> list[ResultFigures]:
    """``figures`` sorted by the columns in ``order`` (the first deciding; ``-name``
    descending); a missing figure goes last either way, ties keep their order."""
    out = list(figures)
    for spec in reversed(order):
        (column,) = table_columns([spec.removeprefix("-")])
        present = [f for f in out if column.value(f) is not None]
        present.sort(key=lambda f: _order_key(column.value(f)), reverse=spec.startswith("-"))
        out = present + [f for f in out if column.value(f) is None]
    return out


def sort_rows(rows: Sequence[Row], order: Sequence[str]) -> list[Row]:
    """The terminal summary's rows in the order ``sort_figures`` gives their figures."""
    figures = [figures_from_row(row) for row in rows]
    row_of = {id(fig): row for fig, row in zip(figures, rows, strict=True)}
    return [row_of[id(fig)] for fig in sort_figures(figures, order)]


def change_line(change: SeriesChange) -> str:
    """``decode −12.0% [−14.1%, −9.8%], p=0.0005, b6000 → b6100`` (a drift: ``drift b0..b9``)."""
    interval = ""
    if not math.isnan(change.ci_low):
        interval = f" {interval_text(change.ci_low, change.ci_high)}"
    span = (f"drift {change.baseline}..{change.current}" if change.kind == "drift"
            else f"{change.baseline} → {change.current}")
    return (f"{change.metric} {pct(change.relative_change)}{interval}, "
            f"p={fmt_p(change.p_value)}, {span}")


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


def markdown_summary(
    figures: Sequence[ResultFigures],
    changes: Sequence[SeriesChange] = (),
    *,
    title: str = "pytest-tokperf",
    columns: Sequence[str] | None = None,
    sort: Sequence[str] = (),
) -> str:
    """One screen of GitHub-flavoured markdown: the results table, then the changes. Flags
    and inconclusive changes get a section each; unchanged ones only a count. ``columns``
    and ``sort``: names from ``COLUMNS`` (``tokperf_table_columns``, ``tokperf_sort``)."""
    chosen = table_columns(columns)
    figures = sort_figures(figures, sort)
    lines = [f"### {title}: {headline(figures, changes)}", ""]
    setups = sorted({f.setup_label for f in figures})
    if setups:
        lines += [f"Setup: {md_cell('; '.join(setups))}", ""]
    if figures:
        strong = ("fail", "error", "suspect")
        rows = [[Cell(c.cell(fig), strong=c.name == "verdict" and fig.verdict in strong)
                 for c in chosen] for fig in figures]
        lines += markdown(Table.of([c.header for c in chosen], rows,
                                   numeric=[i for i, c in enumerate(chosen) if c.numeric]))
        note = unstable_note([c.text for row in rows for c in row])
        lines += ["", *note, *([""] if note else [])]
    else:
        lines += ["No results.", ""]
    warned = [f for f in figures if f.warnings]
    if warned:
        lines += ["#### Warnings", ""]
        for fig in warned:
            for warning in fig.warnings:
                lines.append(f"- **{md_cell(fig.test_id)}**: {md_cell(warning)}")
        lines.append("")
    for verdict, heading in _SECTIONS:
        picked = [c for c in changes if c.verdict == verdict]
        if not picked:
            continue
        lines += [f"#### {heading}", ""]
        for change in picked:
            lines.append(f"- **{md_cell(change.test_id)}** {verdict}: "
                         f"{md_cell(change_line(change))}")
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


_RESULT_FIELDS = (
    "test_id", "series_key", "run_id", "created_at", "engine_name", "engine_version",
    "engine_build", "hardware_name", "model_file_name", "prompt_tokens", "generate_tokens",
    "depth_tokens", "cached_prefix_tokens", "chat", "draft_model", "mean_decode_depth_tokens",
    "concurrency", "repetitions", "ttft_s", "prefill_tokens_per_s", "decode_tokens_per_s",
    "decode_tokens_per_s_stdev", "engine_decode_tokens_per_s", "decode_source",
    "decode_agreement")
_RESULT_FIGURES = ("ceiling_decode_tokens_per_s", "efficiency", "chars_per_s",
                   "aggregate_tokens_per_s", "requests_per_s", "ttft_bound_s")
_SAMPLE_FIELDS = ("round_index", "ttft_s", "prefill_tokens_per_s",
                  "engine_prefill_tokens_per_s", "decode_tokens_per_s",
                  "engine_decode_tokens_per_s", "prompt_tokens", "generated_tokens")
_CHANGE_FIELDS = ("test_id", "series_key", "metric", "verdict", "relative_change", "ci_low",
                  "ci_high", "p_value", "baseline", "current", "reason", "kind")


def _fields(value: object, names: Sequence[str]) -> dict[str, Any]:
    """``value``'s attributes by name, a non-finite number as None."""
    return {name: finite(getattr(value, name)) for name in names}


def result_json(fig: ResultFigures) -> dict[str, Any]:
    """One result with stable, unit-named keys."""
    return {**_fields(fig, _RESULT_FIELDS), **_percentiles_json("ttft", fig.ttft),
            **_percentiles_json("inter_token", fig.inter_token),
            **_fields(fig, _RESULT_FIGURES), "verdict": fig.verdict, "gate": fig.gate or None,
            "warnings": list(fig.warnings), "machine_load": load_json(fig.machine_load),
            "samples": [sample_json(i, s) for i, s in enumerate(fig.samples)]}


def _percentiles_json(figure: str, values: Percentiles | None) -> dict[str, float | None]:
    """``{figure}_p50_s``, ``_p90_s``, ``_p99_s``: null where none are stored."""
    return {f"{figure}_p{q}_s": None if values is None else finite(v)
            for q, v in zip((50, 90, 99), values or (None, None, None), strict=True)}


def sample_json(index: int, sample: RepetitionFigures) -> dict[str, Any]:
    """One repetition's raw figures (``repetition`` counts from 0, in the order measured)."""
    return {"repetition": index, **_fields(sample, _SAMPLE_FIELDS),
            **_percentiles_json("inter_token", sample.inter_token)}


def load_json(load: MachineLoad | None) -> dict[str, Any] | str | None:
    """The machine's load; "unknown" without /proc, None where nothing was sampled."""
    if load is None:
        return None
    if not load.known:
        return "unknown"
    return {**finite(asdict(load)), "others_cpus": load.others_cpus, "loaded": load.loaded}


def change_json(change: SeriesChange) -> dict[str, Any]:
    return _fields(change, _CHANGE_FIELDS)


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


AB_SCHEMA = "pytest-tokperf/ab/1"


def ab_document(results: Sequence[tuple[str, ABResult]]) -> dict[str, Any]:
    """Every same-run A/B of a session (``--tokperf-ab-json``; ``tokperf compare-builds``
    and the watch read it back, ``versions.paired.judge_documents``): per A/B both sides,
    the per-pair figures in ``metrics`` order, the verdicts and what changed."""
    from pytest_tokperf.bench.ab import PAIR_METRICS, model_name

    def side(r: BenchResult) -> dict[str, Any]:
        return {"engine": r.engine.name, "build": r.engine.build, "url": r.engine.base_url,
                "model": model_name(r.engine)}

    return {"schema": AB_SCHEMA, "ab": [{
        "test_id": test_id,
        "workload": asdict(ab.candidate.workload),
        "control": side(ab.control),
        "candidate": side(ab.candidate),
        "pairs": ab.pairs,
        "metrics": list(PAIR_METRICS),
        "rounds": [{"control": list(b), "candidate": list(c),
                    **({"order": ab.orders[i]} if i < len(ab.orders) else {}),
                    **({"start": ab.starts[i]} if i < len(ab.starts) else {})}
                   for i, (b, c) in enumerate(ab.rounds)],
        "sequential": ab.sequential,
        "verdicts": [{"metric": v.metric, "verdict": v.verdict,
                      "change": finite(v.relative_change), "ci_low": finite(v.ci_low),
                      "ci_high": finite(v.ci_high), "confidence": v.confidence,
                      "reason": v.reason} for v in ab.verdicts],
        "changed": ab.changed,
        "models_differ": ab.models_differ,
        "stopped": ab.stopped,
        "clock": ab.clock,
        "busy": ab.busy,
        "load": ab.load_text(),
        "wall_s": round(ab.wall_s, 2),
        "summary": ab.describe(),
    } for test_id, ab in results]}
