"""Every repetition in the JSON report, p50/p90/p99 where stored, and the summary table's
columns and order (``tokperf_table_columns``, ``tokperf_sort``)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.support.fake_faults import FakeFaultyLlama
from tests.support.report_fixture import build_db
from tests.support.storage_factory import make_ceiling, make_result, make_sample

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.formats import (
    COLUMNS,
    dumps_report,
    markdown_summary,
    report_json,
    sort_figures,
    sort_rows,
)
from pytest_tokperf.report.report_data import (
    ResultFigures,
    figures_from_result,
    percentiles,
    store_figures,
)
from pytest_tokperf.report.table import Row
from pytest_tokperf.settings import TABLE_COLUMNS, resolve
from pytest_tokperf.storage.store import ResultStore


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity, as every strict parser does."""
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResultStore]:
    path = build_db(tmp_path_factory.mktemp("samples") / "results.db", concurrency=True)
    with ResultStore.open(path) as opened:
        yield opened


@pytest.fixture(scope="module")
def figures(store: ResultStore) -> list[ResultFigures]:
    return store_figures(store)


def _resolve(ini: dict[str, str] | None = None, env: dict[str, str] | None = None) -> Any:
    return resolve(cli=lambda n: None, ini=lambda k: (ini or {}).get(k), env=env or {},
                   rootdir=Path("/proj"))


def test_the_json_report_carries_every_stored_repetition(store: ResultStore) -> None:
    latest = store.latest_per_series()
    document = strict_loads(dumps_report(report_json(store_figures(store))))
    by_key = {r["series_key"]: r for r in document["results"]}
    assert len(by_key) == len(latest) == 6
    for row in latest:
        stored = store.result(row.result_id).result
        got = by_key[row.series_key]["samples"]
        assert [s["repetition"] for s in got] == list(range(len(stored.samples)))
        for sample, raw in zip(stored.samples, got, strict=True):
            assert raw["ttft_s"] == sample.ttft_s
            assert raw["decode_tokens_per_s"] == sample.decode_tokens_per_s
            assert raw["engine_decode_tokens_per_s"] == sample.engine_decode_tokens_per_s
            assert raw["prefill_tokens_per_s"] == sample.prefill_tokens_per_s
            assert raw["engine_prefill_tokens_per_s"] == sample.engine_prefill_tokens_per_s
            assert raw["generated_tokens"] == sample.generated_tokens
            assert raw["prompt_tokens"] == sample.prompt_tokens
            assert raw["round_index"] == sample.round_index
            gaps = np.percentile(sample.inter_token_s, [50, 90, 99])
            assert [raw[f"inter_token_p{q}_s"] for q in (50, 90, 99)] == pytest.approx(gaps)


def test_the_result_carries_ttft_and_inter_token_percentiles(store: ResultStore) -> None:
    document = report_json(store_figures(store))
    for row in store.latest_per_series():
        stored = store.result(row.result_id).result
        result = next(r for r in document["results"] if r["series_key"] == row.series_key)
        ttfts = [s.ttft_s or 0.0 for s in stored.samples]
        assert [result[f"ttft_p{q}_s"] for q in (50, 90, 99)] == pytest.approx(
            np.percentile(ttfts, [50, 90, 99]))
        assert result["ttft_p50_s"] == pytest.approx(result["ttft_s"])  # p50 is the median
        assert (result["inter_token_p50_s"], result["inter_token_p90_s"],
                result["inter_token_p99_s"]) == (stored.inter_token_p50_s,
                                                 stored.inter_token_p90_s,
                                                 stored.inter_token_p99_s)


def test_a_nan_in_a_repetition_is_null_in_strict_json() -> None:
    fig = figures_from_result("t", make_result(), ceiling=make_ceiling(), verdict="pass")
    broken = dataclasses.replace(fig.samples[0], decode_tokens_per_s=math.nan,
                                 engine_decode_tokens_per_s=math.inf)
    fig = dataclasses.replace(fig, samples=(broken, *fig.samples[1:]))
    samples = strict_loads(dumps_report(report_json([fig])))["results"][0]["samples"]
    assert samples[0]["decode_tokens_per_s"] is None
    assert samples[0]["engine_decode_tokens_per_s"] is None
    assert samples[1]["decode_tokens_per_s"] == make_sample(1).decode_tokens_per_s


def _unmeasured() -> ResultFigures:
    """A result with no TTFT and no gaps between tokens (as an imported llama-bench row)."""
    samples = tuple(dataclasses.replace(make_sample(i), ttft_s=None, inter_token_s=())
                    for i in range(3))
    result = dataclasses.replace(make_result(), samples=samples, ttft_s=None,
                                 inter_token_p50_s=None, inter_token_p90_s=None,
                                 inter_token_p99_s=None)
    return figures_from_result("t[imported]", result, ceiling=None, verdict="unchecked")


def test_percentiles_show_where_stored_and_a_dash_where_not(
        figures: list[ResultFigures]) -> None:
    md = markdown_summary([*figures[:1], _unmeasured()])
    header, _, measured, unmeasured = md.split("\n\n")[2].splitlines()[:4]
    cells = [c.strip() for c in header.strip("|").split("|")]
    ttft, itl = cells.index("TTFT p50/p90/p99 ms"), cells.index("inter-token p50/p90/p99 ms")
    got = [c.strip() for c in measured.strip("|").split("|")]
    assert got[ttft] == "50.0/50.2/50.2" and got[itl] == "10.0/12.0/20.0"
    missing = [c.strip() for c in unmeasured.strip("|").split("|")]
    assert (missing[ttft], missing[itl]) == ("-", "-")
    result = report_json([_unmeasured()])["results"][0]
    assert {k: v for k, v in result.items() if k.endswith(("_p50_s", "_p90_s", "_p99_s"))} \
        == dict.fromkeys(("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "inter_token_p50_s",
                          "inter_token_p90_s", "inter_token_p99_s"))
    assert all(s["inter_token_p50_s"] is None and s["ttft_s"] is None
               for s in result["samples"])


def test_percentiles_are_numpys_linear_ones() -> None:
    for values in ([3.0], [2.0, 1.0], [5.0, 1.0, 4.0, 2.0, 3.0], [0.01 * i for i in range(97)]):
        assert percentiles(values) == pytest.approx(np.percentile(values, [50, 90, 99]))
    assert percentiles([]) is None and percentiles([None]) is None


def _table(md: str) -> list[list[str]]:
    lines = [line for line in md.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[:1] + lines[2:]]


def test_columns_choose_and_order_the_markdown_table(figures: list[ResultFigures]) -> None:
    table = _table(markdown_summary(figures, columns=["verdict", "test", "repetitions"]))
    assert table[0] == ["verdict", "test", "n"]
    assert ["pass", "test_batch", "5"] in table
    assert len({len(row) for row in table}) == 1


def test_sort_orders_rows_descending_with_a_dash_and_missing_last(
        figures: list[ResultFigures]) -> None:
    def order(*keys: str) -> list[tuple[str, int]]:
        return [(f.test_id, f.concurrency) for f in sort_figures(figures, keys)]

    def rates(*keys: str) -> list[float]:
        return [f.decode_tokens_per_s or 0.0 for f in sort_figures(figures, keys)]

    decode = sorted(figures, key=lambda f: f.decode_tokens_per_s or 0.0)
    assert order("decode") == [(f.test_id, f.concurrency) for f in decode]  # ties keep order
    assert rates("-decode") == sorted(rates("decode"), reverse=True)
    assert order("verdict")[0] == ("test_decode[short]", 1)  # the one fail first
    # only concurrent batches have an all-streams figure: they lead, the rest by test id
    assert order("-all_streams", "test") == [
        ("test_batch", 4), ("test_batch", 2), ("test_batch", 1), ("test_decode[deep]", 1),
        ("test_decode[long]", 1), ("test_decode[short]", 1)]
    table = _table(markdown_summary(figures, columns=["test", "decode"], sort=["-decode"]))
    shown = [float(row[1].split()[0]) for row in table[1:]]
    assert shown == sorted(shown, reverse=True)


def test_sort_rows_keeps_each_row_with_its_figures() -> None:
    rows = [Row(f"t{i}", make_result(decode=d), None, "unchecked")
            for i, d in enumerate((50.0, 150.0, 100.0))]
    assert [r.test_id for r in sort_rows(rows, ["-decode"])] == ["t1", "t2", "t0"]
    assert [r.test_id for r in sort_rows(rows, [])] == ["t0", "t1", "t2"]


def test_every_column_name_settings_accepts_is_drawn() -> None:
    assert tuple(COLUMNS) == TABLE_COLUMNS


def test_columns_and_sort_are_ini_or_environment_settings() -> None:
    settings = _resolve(ini={"tokperf_table_columns": "test, decode\n  verdict",
                             "tokperf_sort": "verdict,-decode"})
    assert settings.table_columns == ("test", "decode", "verdict")
    assert settings.sort == ("verdict", "-decode")
    from_env = _resolve(env={"PYTEST_TOKPERF_TABLE_COLUMNS": "test ttft_percentiles",
                             "PYTEST_TOKPERF_SORT": "-ttft"})
    assert (from_env.table_columns, from_env.sort) == (("test", "ttft_percentiles"), ("-ttft",))
    plain = _resolve()
    assert (plain.table_columns, plain.sort) == (None, ())


@pytest.mark.parametrize(("ini", "bad"), [
    ({"tokperf_table_columns": "test, decod"}, "no column 'decod'"),
    ({"tokperf_sort": "-speed, test"}, "no column '-speed'"),
    ({"tokperf_sort": "--decode"}, "no column '--decode'"),
    ({"tokperf_table_columns": " , "}, "names no column"),
])
def test_an_unknown_column_is_refused_in_one_line_listing_the_known(
        ini: dict[str, str], bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _resolve(ini=ini)
    message = str(caught.value)
    key = next(iter(ini))
    assert message.startswith(f"{key} {ini[key]!r} from ini option {key}: {bad}; known: ")
    assert message.endswith("; known: " + ", ".join(TABLE_COLUMNS))
    assert "\n" not in message


TWO = """
def test_one(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)

def test_two(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=3, warmup=0)
"""


def test_a_session_sorts_its_table_and_writes_every_repetition(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO)
    pytester.makeini("[pytest]\ntokperf_sort = -repetitions\n")
    with FakeFaultyLlama("ok") as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s",
                                    "--tokperf-db", "r.db", "--tokperf-report", "r.json",
                                    "--tokperf-report", "r.md")
    result.assert_outcomes(passed=2)
    table = [line for line in result.outlines if "::test_" in line and " 4/8 " in line]
    assert [line.split()[0].rsplit("::", 1)[1] for line in table] == ["test_two", "test_one"]
    document = strict_loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert [r["test_id"].rsplit("::", 1)[1] for r in document["results"]] == ["test_two",
                                                                               "test_one"]
    for result_json, reps in zip(document["results"], (3, 2), strict=True):
        assert [s["repetition"] for s in result_json["samples"]] == list(range(reps))
        assert all(s["generated_tokens"] == 8 and s["engine_decode_tokens_per_s"] > 0
                   for s in result_json["samples"])
        assert result_json["ttft_p99_s"] >= result_json["ttft_p50_s"] > 0
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert md.index("::test_two") < md.index("::test_one")


def test_columns_choose_the_terminal_table_none_left_out() -> None:
    from pytest_tokperf.report.table import COLUMN_NAMES, summary_table

    assert set(COLUMN_NAMES) == set(TABLE_COLUMNS)
    rows = [Row(f"t{i}", make_result(decode=d), make_ceiling(), "pass")
            for i, d in enumerate((50.0, 150.0))]
    lines = summary_table(rows, columns=60, show=["verdict", "test", "ttft_percentiles",
                                                  "inter_token_percentiles", "gate"])
    assert lines[0].split() == ["verdict", "test", "TTFT", "p50/p90/p99", "ITL", "p50/p90/p99",
                                "gate"]
    assert lines[2].split()[:4] == ["pass", "t0", "51.0/51.8/52.0", "10.0/12.0/20.0"]
    assert not any(line.startswith("(not shown") for line in lines)
    default = summary_table(rows, columns=250)
    assert "TTFT p50/p90/p99" not in default[0] and "engine decode" in default[0]


def test_a_session_shows_the_columns_it_was_given(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO)
    pytester.makeini("[pytest]\ntokperf_table_columns = test, repetitions, verdict\n")
    with FakeFaultyLlama("ok") as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s",
                                    "--tokperf-db", "r.db", "--tokperf-report", "r.md")
    result.assert_outcomes(passed=2)
    # a busy machine adds " (busy)" after the verdict
    result.stdout.fnmatch_lines(["test * n  verdict", "*::test_one  2  unchecked*"])
    md = (pytester.path / "r.md").read_text(encoding="utf-8")
    assert "| test | n | verdict |" in md
