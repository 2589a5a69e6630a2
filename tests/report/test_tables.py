"""One table writer for every door: hostile cell text (pipes, HTML, markdown, control
characters) renders as a GitHub table with the text intact, read by a real renderer
(markdown-it-py with tables, as GitHub's cmark-gfm reads them); the terminal never gets a
control character."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from pytest_tokperf.report.tables import Cell, Table, markdown, md_cell, plain, text

HOSTILE = ("t[a|b] <script>alert(1)</script> *x* _y_ `z` [l](http://e) ![i](u) "
           "~~s~~ &amp; \\| a\\b\n\x1b[31mred\x00")
"""What a test id, a model name or an engine string may carry."""


def _md() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough")


def _cells(lines: list[str]) -> list[list[str]]:
    """The rendered table's cells as text (every inline token's text, entities read),
    or a failure when the lines are no single table."""
    tokens = _md().parse("\n".join(lines) + "\n")
    kinds = [t.type for t in tokens if t.level == 0]
    assert kinds == ["table_open", "table_close"], kinds
    rows: list[list[str]] = []
    for token in tokens:
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline":
            rows[-1].append("".join(c.content for c in token.children or ()
                                    if c.type in ("text", "code_inline")))
    assert len({len(r) for r in rows}) == 1, rows
    return rows


def _expected(raw: str) -> str:
    """The text a reader sees: control characters as spaces, no space at either end (a
    renderer trims a cell)."""
    return "".join(" " if ord(c) < 32 or 127 <= ord(c) < 160 else c for c in raw).strip()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_any_text_is_one_cell_that_reads_as_itself(a: str, b: str) -> None:
    rows = _cells(markdown(Table.of(("a", "b"), [(a, Cell(b, strong=True))])))
    assert rows[1] == [_expected(a), _expected(b)]


def test_a_padded_table_reads_as_the_plain_one() -> None:
    table = Table.of(("model", "t/s"), [(HOSTILE, "12.30 ± 0.10")], numeric=[1], widths=[30, 20])
    assert _cells(markdown(table, padded=True)) == _cells(markdown(table))
    assert _cells(markdown(table))[1][0] == _expected(HOSTILE)


def test_the_terminal_gets_no_control_character() -> None:
    lines = text(Table.of(("test", "engine"), [(HOSTILE, "b1\x07\x9b")]))
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for line in lines for c in line)
    assert "\\x1b[31mred\\x00" in lines[2] and plain("a\nb") == "a\\x0ab"


def test_md_cell_leaves_ordinary_text_as_it_is() -> None:
    for ordinary in ("test_main.py::test_decode[short]", "-12.0% [-14.1%, -9.8%]",
                     "b11434-74f58e63", "pp512 @ d4096", "regression at 99.75%"):
        assert md_cell(ordinary) == ordinary


# -- every door -------------------------------------------------------------------------


def _table_lines(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("|")]


def _holds(md: str, raw: str = HOSTILE) -> None:
    rows = _cells(_table_lines(md))
    assert any(_expected(raw) in cells for cells in rows), rows


def test_the_session_summary(tmp_path: Path) -> None:
    from pytest_tokperf.report.formats import markdown_summary
    from pytest_tokperf.report.report_data import figures_from_result
    from tests.support.storage_factory import make_result

    figure = figures_from_result(HOSTILE, make_result(), ceiling=None, verdict="fail")
    _holds(markdown_summary([figure]))


def test_compare_md(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.cli.main import main
    from tests.support.storage_factory import fill_history

    steps = [(f"b{i:02d}", 100.0) for i in range(6)] + [(f"b{i:02d}", 80.0) for i in range(6, 12)]
    fill_history(tmp_path / "r.db", steps, test_id=HOSTILE)[0].close()
    assert main(["compare", "--db", str(tmp_path / "r.db"), "--baseline", "b02",
                 "--current", "b09", "-o", "md"]) == 0
    _holds(capsys.readouterr().out)


def test_compare_builds_tables() -> None:
    from pytest_tokperf.report.verdicts import paired_table, sessions_table, titled_markdown
    from pytest_tokperf.stats.verdict import Comparison
    from pytest_tokperf.versions.paired import PairedBuildComparison
    from pytest_tokperf.versions.sessions import BuildComparison, Target

    c = Comparison("decode", "regression", -0.1, -0.12, -0.08, 0.95, 0.001, 5, 5, "r")
    sessions = BuildComparison(Target("k", HOSTILE, "decode"), 10.0, 9.0, 5, 5, 5, 5, c,
                               10.0, 9.0)
    paired = PairedBuildComparison(HOSTILE, "w", "decode", 10.0, 9.0, 100, 1, c)
    for table in (sessions_table([sessions]), paired_table([paired])):
        _holds(titled_markdown(HOSTILE, table, [HOSTILE]))


def test_bench_md() -> None:
    from pytest_tokperf.report.llama_bench import render
    from tests.report.test_llama_bench_forms import TESTS, _row

    row = _row(TESTS[1])
    model = dataclasses.replace(row.model, architecture=HOSTILE, file_type=None,
                                parameter_count=None)
    _holds("\n".join(render("md", [dataclasses.replace(row, model=model)])),
           f"{HOSTILE} ?B")


def test_watch_summary(tmp_path: Path) -> None:
    from pytest_tokperf.report.watch import format_markdown
    from tests.versions.test_watch import Fakes, watch

    result = watch(Fakes(tmp_path), tmp_path)
    hostile = dataclasses.replace(result, releases=tuple(
        dataclasses.replace(r, label=HOSTILE) for r in result.releases))
    _holds(format_markdown(hostile))


def test_the_html_table_escapes_every_cell() -> None:
    from pytest_tokperf.report.tables import html_table

    html = "\n".join(html_table(Table.of(("a",), [(Cell(HOSTILE, href="#x\"y", sort=math.nan),)])))
    assert "<script>" not in html and "&lt;script&gt;" in html and 'href="#x&quot;y"' in html
    assert "data-sort" not in html
