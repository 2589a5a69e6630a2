"""``tokperf bench -o md|csv|json|jsonl|sql``: llama-bench's forms, read back the way their
users read them (a GitHub table, the csv module, strict JSON, sqlite3, tokperf's own
llama-bench importer). No engine: the rows are made here."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import sqlite3
from typing import Any

import pytest

from pytest_tokperf.bench.run import Recorded
from pytest_tokperf.bench.grid import BenchTest
from pytest_tokperf.bench.grid_run import BenchRow
from pytest_tokperf.builds.llama_bench import NEWEST_FIELDS as LLAMA_BENCH_FIELDS
from pytest_tokperf.builds.llama_bench import build_of
from pytest_tokperf.report.llama_bench import SQL_TABLE, TOKPERF_FIELDS, TOKPERF_TABLE, render
from pytest_tokperf.expected.llama_bench_parse import parse_llama_bench
from pytest_tokperf.results import Summary, Workload
from tests.support.storage_factory import make_ceiling, make_engine, make_model, make_result

COMPARE_KEYS = (
    "cpu_info", "gpu_info", "backends", "n_gpu_layers", "n_cpu_moe", "tensor_buft_overrides",
    "model_filename", "model_type", "n_batch", "n_ubatch", "embeddings", "cpu_mask",
    "cpu_strict", "poll", "n_threads", "type_k", "type_v", "load_mode", "no_kv_offload",
    "split_mode", "main_gpu", "tensor_split", "flash_attn", "n_prompt", "n_gen", "n_depth",
    "fit_target", "fit_min_ctx", "build_commit", "test_time", "avg_ts")
"""What b11434's scripts/compare-llama-bench.py joins on and requires
(LLAMA_BENCH_KEY_PROPERTIES plus build_commit, test_time, avg_ts)."""

ENGINE = make_engine(version="b11434", build="b11434-74f58e63", backend="cpu",
                     settings=(("threads", "2"), ("flash_attn", "on"), ("batch_size", "2048"),
                               ("ubatch_size", "512"), ("cache_type_k", "q8_0"),
                               ("cache_type_v", "f16")))
MODEL = make_model(path="/models/it's, a model.gguf", architecture="llama", file_type="F16",
                   parameter_count=33_563_136)


def _row(test: BenchTest, *, nan: bool = False) -> BenchRow:
    workload = Workload(prompt_tokens=test.prompt_tokens, generate_tokens=test.generate_tokens,
                        depth_tokens=test.n_depth, repetitions=3)
    result = make_result(engine=ENGINE, workload=workload)
    if nan:
        result = dataclasses.replace(result, ttft_s=Summary(float("nan"), float("nan"),
                                                            float("nan"), 0.0, 0.0, 3))
    recorded = Recorded(f"tokperf bench {test.label} -t 2", result, make_ceiling(), "pass")
    return BenchRow(test=test, recorded=recorded, test_time="2026-01-02T03:04:05Z",
                    created_at="2026-01-02T03:04:06.000001+00:00", run_id="run-1",
                    series_key=f"key-{test.name}", model=MODEL, model_bytes=67_143_680,
                    cpu_info="AMD EPYC", gpu_info="")


TESTS = (BenchTest("pp", 512, 0), BenchTest("tg", 0, 128, n_depth=4096),
         BenchTest("pg", 512, 128))


@pytest.fixture
def rows() -> list[BenchRow]:
    return [_row(t, nan=t.kind == "pg") for t in TESTS]


def _text(form: Any, rows: list[BenchRow], asked: frozenset[str] = frozenset()) -> str:
    return "\n".join(render(form, rows, asked)) + "\n"


def _gfm_table(lines: list[str]) -> list[list[str]]:
    """A strict GitHub table: pipes at both ends, a delimiter row of ---/---: cells, every
    row the header's cell count, no bare pipe inside a cell."""
    split = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in lines]
    for line in lines:
        assert line.startswith("| ") and line.endswith(" |"), line
    header, delimiter, *body = split
    assert all(re.fullmatch(r":?-+:?", cell) for cell in delimiter), delimiter
    assert all(len(cells) == len(header) for cells in (delimiter, *body))
    return [header, *body]


def test_md_is_llama_benchs_github_table_with_the_ceiling(rows: list[BenchRow]) -> None:
    text = _text("md", rows, frozenset({"flash_attn"}))
    table, footer = text.split("\n\n")
    header, *body = _gfm_table(table.splitlines())
    assert header == ["model", "size", "params", "backend", "threads", "type_k", "fa", "test",
                      "t/s", "ceiling t/s", "eff"]
    cells = [dict(zip(header, line, strict=True)) for line in body]
    assert [c["test"] for c in cells] == ["pp512", "tg128 @ d4096", "pp512+tg128"]
    assert all(re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", c["t/s"]) for c in cells)
    assert cells[0]["model"] == "llama 34M F16" and cells[0]["size"] == "64.03 MiB"
    assert cells[0]["params"] == "33.56 M" and cells[0]["fa"] == "1"
    assert cells[0]["eff"] == "-" and cells[1]["eff"].endswith("%")  # pp: no decode figure
    assert footer == "build: 74f58e63 (11434)\n"
    records = parse_llama_bench(text, "bench.md", "md")
    assert [r.test_name for r in records] == ["pp512", "tg128 @ d4096", "pp512+tg128"]
    assert records[0].get("build_commit") == "74f58e63"


def test_csv_has_llama_benchs_header_and_every_row(rows: list[BenchRow]) -> None:
    text = _text("csv", rows)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert text.splitlines()[0] == ",".join([*LLAMA_BENCH_FIELDS, *TOKPERF_FIELDS])
    assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in parsed] == [
        ("512", "0", "0"), ("0", "128", "4096"), ("512", "128", "0")]
    assert parsed[0]["model_filename"] == "/models/it's, a model.gguf"
    assert parsed[0]["type_k"] == "q8_0" and parsed[0]["flash_attn"] == "1"
    assert parsed[0]["efficiency"] == "" and float(parsed[1]["efficiency"]) > 0
    assert parsed[2]["ttft_s"] == ""  # NaN: no value, never "nan"
    assert set(COMPARE_KEYS) <= set(parsed[0])
    assert len(parse_llama_bench(text, "bench.csv", "csv")) == 3


@pytest.mark.parametrize("form", ["json", "jsonl"])
def test_json_is_strict_with_samples(form: str, rows: list[BenchRow]) -> None:
    text = _text(form, rows)

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in strict JSON")

    if form == "json":
        items = json.loads(text, parse_constant=refuse)
    else:
        items = [json.loads(line, parse_constant=refuse) for line in text.splitlines()]
    assert [i["test"] for i in items] == ["pp512", "tg128 @ d4096", "pp512+tg128"]
    first = items[0]
    assert list(first)[:len(LLAMA_BENCH_FIELDS)] == list(LLAMA_BENCH_FIELDS)
    assert first["cpu_strict"] is False and first["repack"] is True  # typed as llama-bench's
    assert len(first["samples_ns"]) == len(first["samples_ts"]) == 3
    assert first["avg_ts"] == pytest.approx(sum(first["samples_ts"]) / 3)
    assert items[2]["ttft_s"] is None
    assert (first["series_key"], first["run_id"], first["test_id"]) == (
        "key-pp512", "run-1", "tokperf bench pp512 -t 2")
    assert len(parse_llama_bench(text, f"bench.{form}", form)) == 3  # type: ignore[arg-type]


def test_sql_loads_into_sqlite_as_compare_llama_bench_reads_it(rows: list[BenchRow]) -> None:
    text = _text("sql", rows)
    assert text.startswith(f"CREATE TABLE IF NOT EXISTS {SQL_TABLE} (\n")
    conn = sqlite3.connect(":memory:")
    conn.executescript(text)
    conn.executescript(text)  # appended to the same database, as `| sqlite3 file` is
    columns = [r[1] for r in conn.execute(f"PRAGMA table_info({SQL_TABLE})")]
    assert set(COMPARE_KEYS) <= set(columns)
    found = conn.execute(f"SELECT n_prompt, n_gen, n_depth, model_filename, avg_ts, "
                         f"efficiency, build_commit, build_number FROM {SQL_TABLE} JOIN "
                         f"{TOKPERF_TABLE} ON llama_bench_rowid = {SQL_TABLE}.rowid "
                         f"ORDER BY {SQL_TABLE}.rowid").fetchall()
    assert len(found) == 6
    assert found[1][:4] == (0, 128, 4096, "/models/it's, a model.gguf")
    assert found[0][5] is None and found[1][5] > 0 and found[0][6:] == ("74f58e63", 11434)
    joined = conn.execute(  # compare-llama-bench's self-join on the key properties
        f"SELECT COUNT(*) FROM {SQL_TABLE} tb JOIN {SQL_TABLE} tc ON "
        + " AND ".join(f"tb.{k} = tc.{k}" for k in COMPARE_KEYS[:-3])).fetchone()
    assert joined == (12,)
    assert len(parse_llama_bench(text, "bench.sql", "sql")) == 3


def test_build_is_read_from_llama_servers_build_info() -> None:
    assert build_of("b11434-74f58e63", "b11434") == ("74f58e63", 11434)
    assert build_of("b11434-pypi-sdist", "b11434") == ("b11434", 11434)  # a registry build
    assert build_of(None, "b9093") == ("b9093", 9093)


def test_a_markdown_renderer_reads_the_md_table(rows: list[BenchRow]) -> None:
    # markdown-it-py (rich's own Markdown parser) with GitHub's table extension
    markdown_it = pytest.importorskip("markdown_it")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(
        _text("md", rows, frozenset({"flash_attn"})))
    assert html.count("<table>") == 1 and len(re.findall(r"<th[ >]", html)) == 11
    assert html.count("<tr>") == 4  # the header and three tests
    assert "pp512+tg128" in html and re.search(r"<td[^>]*>-</td>", html)  # pp: no eff
