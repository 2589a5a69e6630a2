"""Every table the package prints or writes, written here and only here.

A ``Table`` (a header and rows of text cells) is written as terminal text, GitHub
markdown or HTML; named records (dicts) as CSV or SQL. Each format has its one escaper in
this module: ``md_cell`` (markdown), ``plain`` (the terminal: control characters shown,
never sent), ``html.escape``, the ``csv`` module and ``sql_literal``; JSON goes through
``jsontext.dumps``. A door builds rows and hands them over.
"""

from __future__ import annotations

import csv
import html
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_tokperf.jsontext import finite
from pytest_tokperf.results import Summary


@dataclass(frozen=True, slots=True)
class Cell:
    """A cell with more than its text: bold (a verdict that fails), and for HTML a class,
    a sort key and a link with its tooltip."""

    text: str
    strong: bool = False
    css: str = ""
    sort: float | None = None
    href: str | None = None
    title: str = ""


CellLike = str | Cell


@dataclass(frozen=True, slots=True)
class Table:
    """A header and rows of cells. ``numeric``: the columns aligned right in markdown
    (and classed ``num`` in HTML); ``widths``: the least width of each column in padded
    markdown (llama-bench's layout; 0: as wide as its cells)."""

    header: tuple[str, ...]
    rows: tuple[tuple[CellLike, ...], ...]
    numeric: frozenset[int] = frozenset()
    widths: tuple[int, ...] = ()

    @classmethod
    def of(cls, header: Sequence[str], rows: Iterable[Sequence[CellLike]],
           numeric: Iterable[int] = (), widths: Sequence[int] = ()) -> Table:
        return cls(tuple(header), tuple(tuple(r) for r in rows), frozenset(numeric),
                   tuple(widths))


def _text(cell: CellLike) -> str:
    return cell.text if isinstance(cell, Cell) else cell


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"[\\`*<>&|~]|\[(?=.*\]\()")
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def plain(text: str) -> str:
    """``text`` safe to print: a control character (ESC, NUL, a newline) as ``\\x1b``,
    never sent to the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def md_cell(text: str) -> str:
    """``text`` as one GitHub table cell that renders as the same text: markdown's inline
    punctuation and HTML's ``<&`` backslash-escaped (an underscore only where it could
    start or end emphasis, a bracket only where it could open a link), the pipe escaped,
    line breaks and control characters spaces."""
    text = _CONTROL.sub(" ", text)
    text = _MD_SPECIAL.sub(lambda m: "\\" + m[0], text)
    return _MD_UNDERSCORE.sub(r"\\_", text)


def _md(cell: CellLike) -> str:
    text = md_cell(_text(cell)).strip(" ")
    bold = isinstance(cell, Cell) and cell.strong and text and text == text.strip()
    return f"**{text}**" if bold else text  # emphasis cannot start or end at a space


def markdown(table: Table, *, padded: bool = False) -> list[str]:
    """A GitHub table; ``padded``: every column as wide as its widest cell (or its
    ``widths``), as llama-bench prints it, for a reader of the raw text."""
    cells = [[md_cell(h) for h in table.header], *([_md(c) for c in row] for row in table.rows)]
    count = len(table.header)
    widths = [3] * count
    if padded:
        widths = [max(max(len(r[i]) for r in cells),
                      table.widths[i] if i < len(table.widths) else 0, 3) for i in range(count)]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(
            (c.rjust(w) if i in table.numeric else c.ljust(w)) if padded else c
            for i, (c, w) in enumerate(zip(row, widths, strict=True))) + " |"

    rule = line(["-" * (w - padded) + ":" if i in table.numeric else "-" * w
                 for i, w in enumerate(widths)])
    return [line(cells[0]), rule, *(line(r) for r in cells[1:])]


def text(table: Table) -> list[str]:
    """Left-aligned terminal columns with a dashed rule under the header."""
    rows = [[plain(h) for h in table.header], *([plain(_text(c)) for c in r] for r in table.rows)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(table.header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    return [line(rows[0]), "  ".join("-" * w for w in widths), *(line(r) for r in rows[1:])]


def _html_cell(cell: CellLike, numeric: bool, pinned: bool = False) -> str:
    if not isinstance(cell, Cell):
        cell = Cell(cell)
    css = " ".join(filter(None, (cell.css or ("num" if numeric else ""), "pin" * pinned)))
    attrs = f' class="{html.escape(css)}"' if css else ""
    if cell.sort is not None and math.isfinite(cell.sort):
        attrs += f' data-sort="{cell.sort:.9g}"'
    body = html.escape(cell.text)
    if cell.strong:
        body = f"<b>{body}</b>"
    if cell.href:
        title = f' title="{html.escape(cell.title)}"' if cell.title else ""
        body = f'<a href="{html.escape(cell.href)}"{title}>{body}</a>'
    return f"<td{attrs}>{body}</td>"


def html_table(table: Table, css: str = "sortable", pinned: int | None = None) -> list[str]:
    """An HTML table, its cells escaped; ``css`` the table's class; the ``pinned``
    column's cells and header get the class ``pin`` (kept in view where it scrolls)."""
    pin = ' class="pin"'
    head = "".join(f"<th{pin * (i == pinned)}>{html.escape(h)}</th>"
                   for i, h in enumerate(table.header))
    body = ["<tr>" + "".join(_html_cell(c, i in table.numeric, i == pinned)
                             for i, c in enumerate(row)) + "</tr>" for row in table.rows]
    return [f'<table class="{html.escape(css)}">', f"<thead><tr>{head}</tr></thead><tbody>",
            *body, "</tbody></table>"]


def _flat(value: Any) -> Any:
    """A CSV cell or SQL value: booleans as 0/1, no NaN or infinity."""
    return int(value) if isinstance(value, bool) else finite(value)


def csv_text(names: Sequence[str], records: Iterable[Mapping[str, Any]], *,
             quote_all: bool = False, line_end: str = "\r\n") -> str:
    """CSV with a header line: ``names`` in order, a missing or null value empty.
    ``quote_all``: every cell quoted (llama-bench's CSV)."""
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL,
                        lineterminator=line_end)
    out.write(",".join(names) + line_end)
    for record in records:
        writer.writerow(["" if (v := _flat(record.get(n))) is None else v for n in names])
    return out.getvalue()


def sql_literal(value: Any) -> str:
    """One SQL value: NULL, a number, or a quoted string (quotes doubled, a NUL dropped:
    sqlite3 cuts a statement at one)."""
    value = _flat(value)
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("\x00", "").replace("'", "''") + "'"


def sql_text(table_name: str, types: Mapping[str, str],
             records: Iterable[Mapping[str, Any]]) -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` with ``types`` (name -> SQL type), then one
    ``INSERT`` per record."""
    names = list(types)
    lines = [f"CREATE TABLE IF NOT EXISTS {table_name} ("]
    lines += [f"  {n} {t}{',' if i < len(names) - 1 else ''}"
              for i, (n, t) in enumerate(types.items())]
    lines += [");", ""]
    for record in records:
        values = ", ".join(sql_literal(record.get(n)) for n in names)
        lines.append(f"INSERT INTO {table_name} ({', '.join(names)}) VALUES ({values});")
    return lines


UNSTABLE_SPREAD = 0.25
"""A rate whose repetitions' standard deviation is over this share of its median shows
its range (min-max) and ``!`` instead of a ± that would reach toward zero or below."""
UNSTABLE_NOTE = (f"!: the repetitions spread by more than {UNSTABLE_SPREAD:.0%} of the "
                 "median, so the range (slowest-fastest) is shown, not ±: an unstable figure")


def unstable(summary: Summary | None) -> bool:
    """Whether ``summary``'s spread is over ``UNSTABLE_SPREAD`` of its median."""
    return (summary is not None and summary.n > 1
            and summary.stdev > UNSTABLE_SPREAD * abs(summary.median))


def unstable_note(cells: Sequence[str]) -> list[str]:
    """What a ``!`` after a figure means, where one of ``cells`` has it."""
    return [UNSTABLE_NOTE] if any(c.endswith("!") for c in cells) else []


def _bound(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.1f}"


def rate(value: float | None, stdev: float | None = None) -> str:
    """Tokens per second to a useful precision: ``102.4 ±1.9``, ``5230``."""
    if value is None:
        return "-"
    text = f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    if stdev:
        text += f" ±{stdev:.1f}" if stdev < 1000 else f" ±{stdev:.0f}"
    return text


def spread(summary: Summary | None) -> str:
    """A rate over its repetitions, written so in every table (terminal, markdown, HTML):
    ``208.1 ±3.1``; ``208.1 (12.4-590)!`` when the spread is a large share of it (a range
    not stored: ``208.1 ±353.3!``)."""
    if summary is None:
        return "-"
    if not unstable(summary):
        return rate(summary.median, summary.stdev if summary.n > 1 else None)
    if math.isfinite(summary.minimum) and math.isfinite(summary.maximum):
        return f"{rate(summary.median)} ({_bound(summary.minimum)}-{_bound(summary.maximum)})!"
    return f"{rate(summary.median, summary.stdev)}!"
