"""CI formats from a fixture database: markdown, step summary, JSON, JUnit properties."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.report_fixture import BUILDS, build_db, commit
from tests.support.storage_factory import make_ceiling, make_result

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.table import Row
from pytest_tokperf.report.report_data import (
    ResultFigures,
    SeriesChange,
    SeriesHistory,
    figures_from_row,
    load_histories,
    load_history,
    store_figures,
)
from pytest_tokperf.report.formats import (
    JSON_SCHEMA,
    dumps_report,
    junit_properties,
    markdown_summary,
    report_json,
    write_step_summary,
)
from pytest_tokperf.stats.comparing import DECODE, Comparison
from pytest_tokperf.storage.store import ResultStore


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResultStore]:
    path = build_db(tmp_path_factory.mktemp("reports") / "results.db")
    with ResultStore.open(path) as opened:
        yield opened


@pytest.fixture(scope="module")
def figures(store: ResultStore) -> list[ResultFigures]:
    return store_figures(store)


@pytest.fixture(scope="module")
def histories(store: ResultStore) -> list[SeriesHistory]:
    return load_histories(store)


@pytest.fixture(scope="module")
def changes(histories: list[SeriesHistory]) -> list[SeriesChange]:
    return [c for h in histories for c in h.series_changes()]


def by_test(figures: list[ResultFigures], test_id: str) -> ResultFigures:
    return next(f for f in figures if f.test_id == test_id)


def test_store_figures_are_the_newest_result_of_each_series(figures: list[ResultFigures]) -> None:
    assert [f.test_id for f in figures] == [
        "test_decode[deep]", "test_decode[long]", "test_decode[short]"]
    short = by_test(figures, "test_decode[short]")
    assert (short.engine_version, short.engine_build) == (BUILDS[-1], commit(11))
    assert short.decode_tokens_per_s == pytest.approx(88.0)
    assert short.efficiency == pytest.approx(88.0 / 125.0)
    assert short.verdict == "fail"
    deep = by_test(figures, "test_decode[deep]")
    assert deep.mean_decode_depth_tokens == 8192 + 512 + 63
    assert deep.hardware_name == "NVIDIA H200" and deep.model_file_name == "tiny.gguf"


def test_store_figures_of_one_run(store: ResultStore) -> None:
    first = store_figures(store, run_id="run-00")
    assert len(first) == 3 and {f.run_id for f in first} == {"run-00"}
    assert by_test(first, "test_decode[short]").decode_tokens_per_s == pytest.approx(100.3)  # drift


def test_history_finds_the_step_between_the_builds(histories: list[SeriesHistory]) -> None:
    short = next(h for h in histories if h.test_id == "test_decode[short]")
    assert [p.version for p in short.points] == [f"{b} ({commit(i)})" for i, b in enumerate(BUILDS)]
    assert short.points[0].labels["hardware"] == "NVIDIA H200"
    (step,) = short.changes
    assert (step.version_before, step.version_after) == ("b6005 (c0ffee5)", "b6006 (c0ffee6)")
    assert step.verdict == "regression" and step.relative_change == pytest.approx(-0.12, abs=0.005)
    assert all(not h.changes for h in histories if h.test_id != "test_decode[short]")


def test_unknown_series_names_the_key(store: ResultStore) -> None:
    with pytest.raises(ConfigError, match=r"series 'nope' has no results in .*tokperf history"):
        load_history(store, "nope", metric=DECODE)


def test_markdown_shows_results_verdicts_and_the_regression(
    figures: list[ResultFigures], changes: list[SeriesChange]
) -> None:
    md = markdown_summary(figures, changes)
    lines = md.splitlines()
    assert lines[0] == ("### pytest-tokperf: 3 results: 1 fail, 1 pass, 1 unchecked "
                        "· 3 with warnings · 1 regression")  # the factory's ceiling warns
    assert "Setup: llama-server b6011 (c0ffeeb) · tiny.gguf · NVIDIA H200" in lines
    assert ("| test_decode[short] | prompt 512, gen 128 | 50.0/50.2/50.2 | 10240 | 88.0 ±0.3 "
            "| 10.0/12.0/20.0 | 125.0 | 70.4% | 441.4 | - | b6011 (c0ffeeb) | **fail** | - |"
            ) in lines
    assert ("| test_decode[deep] | prompt 512, gen 128, depth 8192 | 80.0/80.3/80.4 | 6400 "
            "| 60.0 ±0.2 | 10.0/12.0/20.0 | 85.0 | 70.6% | 301.0 | - | b6011 (c0ffeeb) "
            "| unchecked | - |") in lines
    assert "#### Warnings" in lines and "- **test_decode[deep]**: no output tensor" in lines
    assert "| test_decode[long] | prompt 4096, gen 128 | 400.0/401.5/402.0 |" in md
    assert "#### Regressions" in lines
    (regression,) = [line for line in lines if line.startswith("- ") and "regression:" in line]
    assert regression.startswith("- **test_decode[short]** regression: decode −12.0% [−12.")
    assert ", p=" in regression  # the change point's Bonferroni-adjusted p (stats owns its value)
    assert regression.endswith(", b6005 (c0ffee5) → b6006 (c0ffee6)")
    assert "Improvements" not in md and "Too noisy" not in md


def test_markdown_lists_gate_comparisons_escapes_pipes_and_says_when_empty(
    figures: list[ResultFigures],
) -> None:
    nan = math.nan
    noisy = Comparison("ttft", "inconclusive", nan, nan, nan, 0.995, nan, 2, 5,
                       "ttft: baseline has 2 and current 5 samples")
    faster = Comparison("decode", "improvement", 0.2, 0.15, 0.25, 0.995, 1e-4, 15, 5, "faster")
    changes = [
        SeriesChange.from_comparison("t[a|b]", noisy, baseline="b1", current="b2"),
        SeriesChange.from_comparison("t[c]", faster, baseline="b1 .. b3", current="b4"),
    ]
    md = markdown_summary(figures[:1], changes, title="nightly")
    assert md.startswith("### nightly: 1 result: 1 unchecked · 1 with warnings · 1 improvement\n")
    assert "#### Too noisy to decide" in md
    assert "- **t[a\\|b]** inconclusive: ttft -, p=-, b1 → b2" in md
    assert "- **t[c]** improvement: decode +20.0% [+15.0%, +25.0%], p=1.0e-04, b1 .. b3 → b4" in md
    assert markdown_summary([]).startswith("### pytest-tokperf: 0 results\n\nNo results.")


def test_step_summary_appends_only_when_set(tmp_path: Path) -> None:
    assert write_step_summary("# x", {}) is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(target)}
    assert write_step_summary("### one", env) == target
    write_step_summary("### two\n", env)
    assert target.read_text() == "earlier step\n### one\n\n### two\n\n"


def test_step_summary_unwritable_names_the_variable(tmp_path: Path) -> None:
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"from GITHUB_STEP_SUMMARY\)"):
        write_step_summary("### x", env)


def test_json_document_has_stable_keys_si_units_and_no_nan(
    store: ResultStore, figures: list[ResultFigures], changes: list[SeriesChange]
) -> None:
    run = store.runs()[-1].run
    noisy = SeriesChange.from_comparison(
        "t", Comparison("ttft", "inconclusive", math.nan, math.nan, math.nan, 0.995, math.nan,
                        1, 1, "too few"), baseline="a", current="b")
    text = dumps_report(report_json(figures, [*changes, noisy], run=run))
    doc = json.loads(text)
    assert list(doc) == ["schema", "run", "counts", "results_with_warnings", "results", "changes"]
    assert doc["schema"] == JSON_SCHEMA
    assert doc["run"]["run_id"] == "run-11" and doc["run"]["host"] == "bench-host"
    assert doc["counts"] == {"fail": 1, "pass": 1, "unchecked": 1}
    short = next(r for r in doc["results"] if r["test_id"] == "test_decode[short]")
    assert short["decode_tokens_per_s"] == pytest.approx(88.0)
    assert short["ttft_s"] == pytest.approx(0.05)
    assert short["ceiling_decode_tokens_per_s"] == 125.0
    assert short["efficiency"] == pytest.approx(0.704)
    assert short["mean_decode_depth_tokens"] == 575
    assert (short["engine_version"], short["verdict"]) == ("b6011", "fail")
    assert list(short)[:3] == ["test_id", "series_key", "run_id"]
    regression = doc["changes"][0]
    assert regression["verdict"] == "regression" and regression["current"] == "b6006 (c0ffee6)"
    assert regression["relative_change"] == pytest.approx(-0.12, abs=0.005)
    assert doc["changes"][1]["relative_change"] is None and doc["changes"][1]["p_value"] is None
    assert "NaN" not in text


def test_junit_properties_from_figures_and_from_a_summary_row(
    figures: list[ResultFigures],
) -> None:
    props = dict(junit_properties(by_test(figures, "test_decode[short]")))
    assert props["tokperf_decode_tokens_per_s"] == pytest.approx(88.0)
    assert props["tokperf_ttft_s"] == pytest.approx(0.05)
    assert props["tokperf_efficiency"] == pytest.approx(0.704)
    assert props["tokperf_verdict"] == "fail"
    assert props["tokperf_engine_build"] == "b6011 (c0ffeeb)"
    assert all(k.startswith("tokperf_") for k in props)
    row = Row("test_x", make_result(decode=100.0), None, "unchecked")
    from_row = dict(junit_properties(row))
    # every repetition carries the engine's own decode (101.0): that is the judged figure
    assert from_row["tokperf_decode_tokens_per_s"] == 101.0
    assert "tokperf_efficiency" not in from_row
    assert "tokperf_ceiling_decode_tokens_per_s" not in from_row
    row = Row("test_x", make_result(decode=100.0), make_ceiling(), "pass")
    with_ceiling = figures_from_row(row)
    assert with_ceiling.decode_source == "engine"
    assert with_ceiling.efficiency == pytest.approx(101.0 / 6833.3)


def test_markdown_escapes_html_from_test_ids(figures: list[ResultFigures]) -> None:
    import dataclasses

    hostile = dataclasses.replace(figures[0], test_id="t[<script>alert(1)</script>|x]")
    md = markdown_summary([hostile])
    assert "<script>" not in md
    assert "t[\\<script\\>alert(1)\\</script\\>\\|x]" in md


def test_one_spread_reads_the_same_in_the_terminal_markdown_and_html() -> None:
    """The defect: ``95.78 (57.0-117)!`` in the terminal, ``95.8 ±29.9`` in HTML and md."""
    import dataclasses

    from tests.support.storage_factory import make_sample

    from pytest_tokperf.report.html import render_html
    from pytest_tokperf.report.table import summary_table
    from pytest_tokperf.report.tables import UNSTABLE_NOTE
    from pytest_tokperf.results import Summary

    values = [57.0, 95.78, 117.0, 70.0, 110.0]
    samples = tuple(dataclasses.replace(make_sample(i), decode_tokens_per_s=v,
                                        engine_decode_tokens_per_s=None)
                    for i, v in enumerate(values))
    wild = dataclasses.replace(make_result(), samples=samples, engine_decode_tokens_per_s=None,
                               decode_tokens_per_s=Summary.of(values))
    rows = [Row("t::wild", wild, make_ceiling(), "unstable"),
            Row("t::calm", make_result(), make_ceiling(), "pass")]
    terminal = summary_table(rows, columns=250)
    md = markdown_summary([figures_from_row(r) for r in rows])
    html = render_html([figures_from_row(r) for r in rows], [], [])
    assert "95.8 (57.0-117)!" in terminal[2] and "| 95.8 (57.0-117)! |" in md
    assert ">95.8 (57.0-117)!</td>" in html
    assert "100.0 ±2.0" in terminal[3] and ">101.0 ±2.0</td>" in html  # md, html: the engine's
    assert UNSTABLE_NOTE in terminal and UNSTABLE_NOTE in md and UNSTABLE_NOTE in html


def test_no_report_shows_the_models_folder(tmp_path: Path) -> None:
    """The defect: report.md's Setup line read ``/home/me/models/Qwen3-0.6B-Q8_0.gguf``."""
    import dataclasses

    from tests.support.storage_factory import make_engine

    from pytest_tokperf.report.files import ReportPaths, write_session_reports

    folder = "/home/me/models"
    engine = make_engine(model_path=f"{folder}/Qwen3-0.6B-Q8_0.gguf",
                         model_name=f"{folder}/Qwen3-0.6B-Q8_0.gguf")  # no alias: the path
    rows = [Row("t::decode", dataclasses.replace(make_result(), engine=engine), make_ceiling(),
                "pass")]
    paths = ReportPaths(tmp_path / "r.md", tmp_path / "r.json", tmp_path / "r.html")
    written = write_session_reports(rows, [], paths, {})
    assert len(written) == 3
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert folder not in text and "Qwen3-0.6B-Q8_0.gguf" in text, path.name
    assert "Setup: llama-server b6000 (abc1234) · Qwen3-0.6B-Q8_0.gguf" in paths.markdown.read_text()
