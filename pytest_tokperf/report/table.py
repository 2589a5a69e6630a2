"""Plain-text formatting of results: the terminal summary table and one-liners."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.report.session_rows import Row, gate_label, session_rows
from pytest_tokperf.report.tables import Table, text
from pytest_tokperf.results import BenchResult, Ceiling, Summary

__all__ = ["Row", "gate_label", "session_rows"]  # kept importable from here


UNSTABLE_SPREAD = 0.25
"""A rate whose repetitions' standard deviation is over this share of its median shows
its range (min-max) and ``!`` instead of a ± that would reach toward zero or below."""
UNSTABLE_NOTE = (f"!: the repetitions spread by more than {UNSTABLE_SPREAD:.0%} of the "
                 "median, so the range (slowest-fastest) is shown, not ±: an unstable figure")


def _unstable(summary: Summary | None) -> bool:
    return (summary is not None and summary.n > 1
            and summary.stdev > UNSTABLE_SPREAD * abs(summary.median))


def _bound(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def _rate(summary: Summary | None) -> str:
    """``208.09 ±3.12``; ``208.09 (12.4-590)!`` when the spread is a large share of it."""
    if summary is None:
        return "-"
    if _unstable(summary):
        return f"{summary.median:.2f} ({_bound(summary.minimum)}-{_bound(summary.maximum)})!"
    if summary.n > 1:
        return f"{summary.median:.2f} ±{summary.stdev:.2f}"
    return f"{summary.median:.2f}"


def _ttft_bound(result: BenchResult, ceiling: Ceiling | None) -> str:
    """The compute-bound TTFT in ms (context / peak prefill tok/s) where peak FLOP/s is known."""
    if ceiling is None or not ceiling.prefill_tokens_per_s:
        return "-"
    w = result.workload
    return f"{(w.depth_tokens + w.prompt_tokens) / ceiling.prefill_tokens_per_s * 1e3:.0f}"


def warning_count(rows: Sequence[Row]) -> int:
    """How many results carry a note or a ceiling warning (the summary's header counts them)."""
    return sum(1 for row in rows if row.result.notes
               or (row.ceiling is not None and row.ceiling.footprint.warnings))


def _short(test_id: str, width: int = 44) -> str:
    return test_id if len(test_id) <= width else "…" + test_id[-(width - 1):]


DEFAULT_COLUMNS = 120
"""The summary fits a 120-column terminal unless told otherwise (``tokperf_columns``)."""
_HEADER = (
    "test", "prompt/gen", "TTFT ms", "TTFT bound", "prefill tok/s", "decode tok/s",
    "engine decode", "agree", "n", "ceiling", "eff", "chars/s", "all streams",
    "engine build", "verdict", "gate", "TTFT p50/p90/p99", "ITL p50/p90/p99",
)
_ON_REQUEST = ("TTFT p50/p90/p99", "ITL p50/p90/p99")
"""Shown only when ``tokperf_table_columns`` names them (the reports show them always)."""
COLUMN_NAMES = {
    "test": "test", "workload": "prompt/gen", "ttft": "TTFT ms", "ttft_bound": "TTFT bound",
    "prefill": "prefill tok/s", "decode": "decode tok/s", "engine_decode": "engine decode",
    "agreement": "agree", "repetitions": "n", "ceiling": "ceiling", "efficiency": "eff",
    "chars_per_s": "chars/s", "all_streams": "all streams", "build": "engine build",
    "verdict": "verdict", "gate": "gate", "ttft_percentiles": "TTFT p50/p90/p99",
    "inter_token_percentiles": "ITL p50/p90/p99",
}
"""Each ``tokperf_table_columns`` name (``settings.TABLE_COLUMNS``) and its column here."""
_LEAVE_OUT = ("TTFT bound", "agree", "all streams", "chars/s", "n", "ceiling",
              "prefill tok/s", "engine build", "gate", "engine decode")
"""Columns left out, in order, until the table fits (the core columns always stay)."""
_SHORT_TEST_WIDTH = 32
"""A test id is cut to this (its end kept) before any column is left out..."""
_MIN_TEST_WIDTH = 24
"""...and to this only when every column that may go has gone."""


def _percentile_cells(row: Row) -> tuple[str, str]:
    """TTFT and inter-token p50/p90/p99 in ms, as the reports write them."""
    from pytest_tokperf.report.formats import COLUMNS
    from pytest_tokperf.report.report_data import figures_from_row

    fig = figures_from_row(row)
    return (COLUMNS["ttft_percentiles"].cell(fig),
            COLUMNS["inter_token_percentiles"].cell(fig))


def _cells(row: Row, percentiles: bool = False) -> tuple[str, ...]:
    r = row.result
    ceiling = row.ceiling.decode_tokens_per_s if row.ceiling else None
    efficiency = decode_efficiency(r, row.ceiling)
    return (
        row.test_id,
        (f"d{r.workload.depth_tokens}+" if r.workload.depth_tokens else "")
        + f"{r.workload.prompt_tokens}/{r.workload.generate_tokens}"
        + (f" warm{r.workload.cached_prefix_tokens}" if r.workload.cached_prefix_tokens else "")
        + (" chat" if r.workload.chat else "")
        + (" +draft" if r.engine.speculative else "")
        + (f" x{r.workload.concurrency}" if r.workload.concurrency > 1 else ""),
        f"{r.ttft_s.median * 1e3:.0f}" if r.ttft_s else "-",
        _ttft_bound(r, row.ceiling),
        _rate(r.prefill_tokens_per_s),
        _rate(r.decode_tokens_per_s),
        _rate(r.engine_decode_tokens_per_s),
        f"{r.decode_agreement:.2%}" if r.decode_agreement is not None else "-",
        str(len(r.samples)),
        f"{ceiling:.1f}" if ceiling else "-",
        f"{efficiency:.0%}" if efficiency is not None else "-",
        f"{r.chars_per_s.median:.0f}" if r.chars_per_s else "-",
        (f"{r.aggregate_tokens_per_s.median:.1f}" if r.workload.concurrency > 1
         and r.aggregate_tokens_per_s else "-"),
        r.engine.build or r.engine.version or "?",
        row.verdict + (" (busy)" if r.load is not None and r.load.loaded else ""),
        row.gate or "-",
        *(_percentile_cells(row) if percentiles else ("-", "-")),
    )


def _layout(body: list[tuple[str, ...]], columns: int, chosen: list[int] | None = None
            ) -> tuple[list[int], int]:
    """The columns kept and the test id's width, to fit ``columns``; ``chosen`` columns
    are all kept (only the test id is shortened)."""
    kept = chosen if chosen is not None else [i for i, name in enumerate(_HEADER)
                                              if name not in _ON_REQUEST]

    def width(test_width: int) -> int:
        widths = [min(test_width, max(len(line[i]) for line in (_HEADER, *body))) if i == 0
                  else max(len(line[i]) for line in (_HEADER, *body)) for i in kept]
        return sum(widths) + 2 * (len(widths) - 1)

    test_width = min(44, max(len(line[0]) for line in (_HEADER, *body)))
    while width(test_width) > columns and test_width > _SHORT_TEST_WIDTH:
        test_width -= 1
    for name in _LEAVE_OUT if chosen is None else ():
        if width(test_width) <= columns:
            break
        kept.remove(_HEADER.index(name))
    while width(test_width) > columns and test_width > _MIN_TEST_WIDTH:
        test_width -= 1
    return kept, test_width


def summary_table(rows: Sequence[Row], columns: int = DEFAULT_COLUMNS,
                  option: str = "PYTEST_TOKPERF_COLUMNS=250",
                  show: Sequence[str] | None = None) -> list[str]:
    """Aligned lines of at most ``columns`` characters; ``option`` asks for more. ``show``:
    these columns by name (``COLUMN_NAMES``), in order, none left out."""
    chosen = None if show is None else [_HEADER.index(COLUMN_NAMES[name]) for name in show]
    extra = chosen is not None and any(_HEADER[i] in _ON_REQUEST for i in chosen)
    full = [_cells(row, extra) for row in rows]
    kept, test_width = _layout(full, columns, chosen)
    header = tuple(_HEADER[i] for i in kept)
    body = [tuple(_short(line[i], test_width) if i == 0 else line[i] for i in kept)
            for line in full]
    out = text(Table.of(header, body))
    left_out = [] if chosen is not None else [
        name for i, name in enumerate(_HEADER) if i not in kept and name not in _ON_REQUEST]
    if left_out:
        out += textwrap.wrap(f"(not shown to fit {columns} columns: {', '.join(left_out)}; "
                             f"{option} shows them)", columns, subsequent_indent=" ",
                             break_on_hyphens=False)
    notes = [UNSTABLE_NOTE] if any(c.endswith(")!") for line in body for c in line[1:]) else []
    for row in rows:
        notes += [f"note: {_short(row.test_id)}: {note}" for note in row.result.notes]
        if row.ceiling is not None:
            notes += [f"ceiling: {_short(row.test_id)}: {w}" for w in row.ceiling.footprint.warnings]
    for note in notes:
        out += textwrap.wrap(note, columns, subsequent_indent="    ", break_on_hyphens=False)
    return out
