"""Plain-text formatting of results: the terminal summary table and one-liners."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence

from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.report.session_rows import Row, gate_label, session_rows
from pytest_tokperf.report.tables import Table, spread, text, unstable_note
from pytest_tokperf.results import BenchResult, Ceiling

__all__ = ["Row", "gate_label", "session_rows"]  # kept importable from here


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
"""The summary's width where the output is no terminal (a CI log, a file) and
``tokperf_columns`` does not say."""


def terminal_columns() -> int:
    """The terminal's width (``COLUMNS`` where set); ``DEFAULT_COLUMNS`` off a terminal."""
    return shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns
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
"""Columns left out, in order, until the table fits..."""
_LEAVE_OUT_NARROW = ("TTFT ms", "eff")
"""...then these, on a terminal narrower still (test, workload, decode and verdict stay)."""
_SHORT_TEST_WIDTH = 32
"""A test id is cut to this (its end kept) before any column is left out..."""
_MIN_TEST_WIDTH = 24
"""...to this when every column that may go has gone, and to ``_NARROW_TEST_WIDTH`` on a
terminal too narrow for the core columns."""
_NARROW_TEST_WIDTH = 16


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
        spread(r.prefill_tokens_per_s),
        spread(r.decode_tokens_per_s),
        spread(r.engine_decode_tokens_per_s),
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
    for name in (*(_LEAVE_OUT_NARROW if chosen is None else ()), None):
        while width(test_width) > columns and test_width > _NARROW_TEST_WIDTH:
            test_width -= 1  # a shorter test id before a core column goes
        if width(test_width) <= columns or name is None:
            break
        kept.remove(_HEADER.index(name))
        test_width = _MIN_TEST_WIDTH
    return kept, test_width


def summary_table(rows: Sequence[Row], columns: int | None = None,
                  option: str = "PYTEST_TOKPERF_COLUMNS=250",
                  show: Sequence[str] | None = None) -> list[str]:
    """Aligned lines of at most ``columns`` characters (None: the terminal's width);
    ``option`` asks for more. ``show``: these columns by name (``COLUMN_NAMES``), in
    order, none left out."""
    columns = terminal_columns() if columns is None else columns
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
    notes = unstable_note([c for line in body for c in line[1:]])
    for row in rows:
        notes += [f"note: {_short(row.test_id)}: {note}" for note in row.result.notes]
        if row.ceiling is not None:
            notes += [f"ceiling: {_short(row.test_id)}: {w}" for w in row.ceiling.footprint.warnings]
    for note in notes:
        out += textwrap.wrap(note, columns, subsequent_indent="    ", break_on_hyphens=False)
    return out
