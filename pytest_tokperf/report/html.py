"""A self-contained HTML report: summary table, changes and the figures inline.

No external URLs; a Content-Security-Policy forbids anything but the one hashed script.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tempfile
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.formats import Column, change_line, headline, table_columns
from pytest_tokperf.report.plots import Plot, history_file_names, plot_all
from pytest_tokperf.report.report_data import (
    ResultFigures,
    SeriesChange,
    load_histories,
    report_changes,
    store_figures,
)
from pytest_tokperf.report.tables import Cell, Table, html_table, unstable_note
from pytest_tokperf.stats.comparing import Metric
from pytest_tokperf.storage.store import ResultStore

SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.title = "sort by this column";
  th.addEventListener("click", function () {
    var table = th.closest("table"), rows = Array.from(table.rows).slice(1);
    var up = th.dataset.order !== "asc";
    table.querySelectorAll("th").forEach(function (h) { delete h.dataset.order; });
    th.dataset.order = up ? "asc" : "desc";
    function key(row) {
      var cell = row.cells[col];
      if (cell.dataset.sort !== undefined) { return parseFloat(cell.dataset.sort); }
      var text = cell.textContent.trim(), n = parseFloat(text.replace(/[^0-9.eE+-]/g, ""));
      return /^[-+]?[0-9.]/.test(text.replace("\u2212", "-")) && !isNaN(n) ? n : text.toLowerCase();
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    });
    rows.forEach(function (row) { table.tBodies[0].appendChild(row); });
  });
});
"""
"""Sorts the summary table by the clicked column (a cell's ``data-sort`` number, else its
text: numbers as numbers), again to reverse."""
SCRIPT_HASH = base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode()).digest()).decode()
CSP = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
       f"script-src 'sha256-{SCRIPT_HASH}'")
PALETTE_COLOURS = 32
"""Colours of an embedded PNG: a plot has few, and a palette PNG is a quarter the size."""
_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; margin: 0 0 4px; }
.headline { font-size: 16px; margin: 0 0 12px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; }
td.num { white-space: nowrap; }
th { background: #f0f3f7; text-align: left; cursor: pointer; }
th[data-order="asc"]::after { content: " \\25B2"; }
th[data-order="desc"]::after { content: " \\25BC"; }
td a { color: inherit; }
.wide { overflow-x: auto; margin: 8px 0 16px; }
.wide table { margin: 0; }
.wide td:first-child { overflow-wrap: anywhere; min-width: 8em; }
.wide .pin { position: sticky; right: 0; background: #fff; box-shadow: -2px 0 3px #0002; }
.wide th.pin { background: #f0f3f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.v-fail, .v-error, .v-suspect, .v-unstable, .regression { color: #b00020; font-weight: bold; }
.v-pass, .improvement { color: #1b7f2a; }
.inconclusive { color: #8a6d00; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
  gap: 8px 24px; }
figure { margin: 8px 0 16px; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 13px; }
.skipped { color: #666; }
"""
_SECTIONS = (
    ("regression", "Regressions"),
    ("improvement", "Improvements"),
    ("inconclusive", "Too noisy to decide"),
)


def _cell(column: Column, fig: ResultFigures, anchor: str | None) -> Cell:
    value = column.value(fig)
    css = "num" if column.numeric else ""
    if column.name == "verdict":
        css = f"v-{fig.verdict}"
    elif column.name == "gate" and fig.gate.split(" ", 1)[0] in ("regression", "improvement"):
        css = fig.gate.split(" ", 1)[0]
    sort = value if isinstance(value, float) and column.name != "test" else None
    href = f"#{anchor}" if column.name == "test" and anchor else None
    return Cell(column.cell(fig), css="" if href else css, sort=sort, href=href,
                title="its history figure" if href else "")


def _table(figures: Sequence[ResultFigures], links: Mapping[str, str]) -> list[str]:
    if not figures:
        return ["<p>No results.</p>"]
    columns = table_columns()
    rows = [[_cell(c, fig, links.get(fig.series_key or "")) for c in columns] for fig in figures]
    names = [c.name for c in columns]
    note = unstable_note([c.text for row in rows for c in row])
    # wider than the window: the table scrolls in its own box, its verdict kept in view
    return ['<div class="wide">', *html_table(Table.of([c.header for c in columns], rows),
                                              pinned=names.index("verdict")
                                              if "verdict" in names else None), "</div>",
            *(f"<p><small>{escape(n)}</small></p>" for n in note)]


def _changes(changes: Sequence[SeriesChange]) -> list[str]:
    out: list[str] = []
    for verdict, heading in _SECTIONS:
        picked = [c for c in changes if c.verdict == verdict]
        if not picked:
            continue
        out += [f"<h2>{heading}</h2>", "<ul>"]
        for c in picked:
            out.append(
                f'<li><b>{escape(c.test_id)}</b> <span class="{verdict}">{verdict}</span>: '
                f'{escape(change_line(c))}<br><small>{escape(c.reason)}</small></li>'
            )
        out.append("</ul>")
    if not out:
        out.append("<p>No regressions or improvements found.</p>")
    return out


def compact_png(data: bytes) -> bytes:
    """The PNG with a ``PALETTE_COLOURS`` palette (Pillow), unchanged without Pillow."""
    try:
        from PIL import Image
    except ImportError:
        return data
    image = Image.open(io.BytesIO(data)).convert("RGB")
    out = io.BytesIO()
    image.quantize(PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT).save(
        out, format="PNG", optimize=True)
    return out.getvalue()


def figure_anchor(path: Path) -> str:
    """The id of a figure in the page: ``fig-`` and its file name without the suffix."""
    return f"fig-{path.stem}"


def _figure(plot: Plot, path: Path) -> str:
    try:
        data = compact_png(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"cannot read the plot {str(plot.path)!r} to embed it: {exc}") from exc
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    caption = escape(plot.title) + (f" — {escape(plot.note)}" if plot.note else "")
    return (f'<figure id="{escape(figure_anchor(path))}"><img alt="{escape(plot.title)}" '
            f'src="{uri}"><figcaption>{caption}</figcaption></figure>')


def render_html(
    figures: Sequence[ResultFigures],
    changes: Sequence[SeriesChange],
    plots: Sequence[Plot],
    *,
    title: str = "pytest-tokperf report",
    subtitle: str = "",
    links: Mapping[str, str] | None = None,
) -> str:
    """The whole page as text; ``links``: per series key, its history figure's anchor."""
    setups = sorted({f.setup_label for f in figures})
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="headline">{escape(headline(figures, changes))}</p>',
    ]
    if subtitle:
        body.append(f"<p>{escape(subtitle)}</p>")
    if setups:
        body.append(f"<p>Setup: {escape('; '.join(setups))}</p>")
    drawn_anchors = {figure_anchor(p.path) for p in plots if p.path is not None}
    body += _table(figures, {k: v for k, v in (links or {}).items() if v in drawn_anchors})
    warned = [(f.test_id, w) for f in figures for w in f.warnings]
    if warned:  # the headline counts them: they are shown
        body += ["<h2>Warnings</h2>", "<ul>",
                 *(f"<li><b>{escape(t)}</b>: {escape(w)}</li>" for t, w in warned), "</ul>"]
    body += _changes(changes)
    drawn = [(p, p.path) for p in plots if p.path is not None]
    if drawn:
        body += ["<h2>Figures</h2>", '<div class="figures">',
                 *(_figure(p, path) for p, path in drawn), "</div>"]
    skipped = [p for p in plots if p.skipped]
    if skipped:
        body.append('<ul class="skipped">')
        body += [f"<li>{escape(p.title)}: not drawn ({escape(p.note)})</li>" for p in skipped]
        body.append("</ul>")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head><body>",
        *body,
        f"<script>{SORT_SCRIPT}</script>",
        "</body></html>",
        "",
    ])


def write_html(html: str, path: Path) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the HTML report to {str(path)!r}: {exc}") from exc
    return path


def build_html_report(
    store: ResultStore,
    path: Path,
    *,
    run_id: str | None = None,
    series_keys: Sequence[str] | None = None,
    metric: Metric | None = None,
    limit: int | None = None,
    extra_changes: Sequence[SeriesChange] = (),
    title: str = "pytest-tokperf report",
) -> Path:
    """Read ``store``, draw every figure and write one self-contained page to ``path`` (all
    series' latest, or the results of ``run_id``); ``metric`` None: each series' own."""
    figures = store_figures(store, run_id=run_id, series_keys=series_keys)
    keys = series_keys if run_id is None else sorted({f.series_key for f in figures
                                                       if f.series_key is not None})
    histories = load_histories(store, keys, metric=metric, limit=limit)
    histories.sort(key=lambda h: not (h.changes or h.drifts))  # series that moved first
    changes = report_changes(store, histories, {c.series_key for c in extra_changes}) + list(
        extra_changes)
    subtitle = f"{store.path.name}" + (f", run {run_id}" if run_id else "")
    links = {key: figure_anchor(Path(name)) for key, name in history_file_names(histories).items()}
    with tempfile.TemporaryDirectory(prefix="tokperf-plots-") as tmp:
        plots = plot_all(figures, histories, Path(tmp))
        html = render_html(figures, changes, plots, title=title, subtitle=subtitle, links=links)
    return write_html(html, path)
