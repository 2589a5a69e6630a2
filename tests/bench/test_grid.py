"""``tokperf bench``'s grid: llama-bench's lists, ranges and tests, one llama-server per
server configuration (restarted only where its arguments change), and the bench's own
option names in its errors. The grid runs start the real llama-server on the small model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_tokperf.bench.grid import BenchTest, ServerPoint, parse_numbers, plan
from pytest_tokperf.cli.bench import grid_options
from pytest_tokperf.cli.main import build_parser, main
from pytest_tokperf.errors import ConfigError


def _plan(*argv: str):  # type: ignore[no-untyped-def]
    return plan(grid_options(build_parser().parse_args(["bench", "--db", "off", *argv])))


@pytest.mark.parametrize(("given", "values"), [
    (["1,2,4"], [1, 2, 4]), (["8-32+8"], [8, 16, 24, 32]), (["1-16*2"], [1, 2, 4, 8, 16]),
    (["1-3"], [1, 2, 3]), (["1", "4-5"], [1, 4, 5]),  # the flag given twice: both
])
def test_lists_and_ranges_read_as_llama_bench_reads_them(given: list[str],
                                                         values: list[int]) -> None:
    assert parse_numbers(given, "-t", 1) == values


@pytest.mark.parametrize(("text", "message"), [
    ("4-1", "-t '4-1': the range '4-1' is empty"),
    ("1-5*1", "-t '1-5*1': the range '1-5*1' never grows"),
    ("2,x", "-t '2,x': 'x' is not a whole number >= 1"),
    ("0", "-t '0': '0' is not a whole number >= 1"),
])
def test_bad_lists_name_the_part(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("*", r"\*")):
        parse_numbers([text], "-t", 1)


def test_p_0_and_n_0_ask_for_no_test_of_that_kind_and_pg_combines() -> None:
    names = [t.name for t in _plan("-p", "0", "-n", "16", "-pg", "64,8", "-d", "0,128").tests]
    assert names == ["tg16", "pp64+tg8", "tg16 @ d128", "pp64+tg8 @ d128"]
    assert [t.name for t in _plan("-p", "32", "-n", "0").tests] == ["pp32"]
    assert BenchTest("pp", 512, 0).generate_tokens == 2  # the fewest streamed
    assert BenchTest("tg", 0, 128).prompt_tokens == 1
    assert BenchTest("pg", 512, 128, n_depth=4096, concurrency=4).label == \
        "pp512+tg128 @ d4096 x4"


def test_the_grid_is_every_server_configuration_in_llama_benchs_order() -> None:
    points = _plan("-m", "a.gguf,b.gguf", "-t", "1,2", "-fa", "0,on", "-ctk", "q8_0",
                   "-ngl", "-1", "-ub", "256").points
    assert len(points) == 8
    assert [(p.model, p.flash_attn, p.threads) for p in points[:4]] == [
        ("a.gguf", "off", 1), ("a.gguf", "off", 2), ("a.gguf", "on", 1), ("a.gguf", "on", 2)]
    assert points[0].server_args() == ("-ngl", "all", "-fa", "off", "-ctk", "q8_0", "-ub", "256")
    assert points[0].label(several_models=True) == \
        "-m a.gguf -t 1 -ngl -1 -fa off -ctk q8_0 -ub 256"
    assert ServerPoint("main").label(several_models=False) == ""


@pytest.mark.parametrize(("argv", "message"), [
    (["-p", "0", "-n", "0"], "nothing to measure"),
    (["-n", "1"], "-n '1': a generation test needs at least 2 tokens"),
    (["-pg", "512"], "-pg '512' is not PP,TG"),
    (["-fa", "maybe"], "-fa 'maybe': 'maybe' is none of on, off, auto"),
    (["--flash-attn", "maybe"], "--flash-attn 'maybe'"),  # named as typed
    (["-ctk", "q3"], "-ctk 'q3': 'q3' is none of f32"),
    (["-t", "1,2", "--url", "http://127.0.0.1:9"], "-t 1,2: --url attaches to a running"),
    (["-fa", "on", "--url", "http://127.0.0.1:9"], "-fa on: --url attaches"),
    (["-ngl", "99", "--engine", "ollama"], "-ngl 99: llama-server's arguments"),
    (["--warm", "64", "-p", "32"], "--warm 64 is not below pp32's depth + prompt (32)"),
])
def test_a_plan_that_cannot_run_is_refused_before_any_engine(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--db", "off", *argv]) == 2
    err = capsys.readouterr().err
    assert f"tokperf bench: {message}" in err and err.count("\n") == 1


@pytest.mark.parametrize(("argv", "message"), [
    (["-r", "0"], "tokperf bench: -r '0' from option -r is neither N"),
    (["--repetitions", "0"], "tokperf bench: --repetitions '0' from option --repetitions"),
    (["--server-bin", "/nope/llama-server"],
     "tokperf bench: --server-bin '/nope/llama-server' does not exist"),
    (["-m", "/nope.gguf"], "tokperf bench: -m '/nope.gguf': '/nope.gguf' does not exist"),
    (["--url", "http://127.0.0.1:9", "-m", "/nope.gguf"],
     "tokperf bench: -m '/nope.gguf' does not exist; with --url it names"),
])
def test_errors_name_benchs_own_options(argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--db", "off", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "--tokperf-" not in err


def test_an_engine_that_does_not_answer_is_exit_2_with_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--url", "http://127.0.0.1:9/", "-r", "1", "--warmup", "0",
                 "--db", "off", "--json"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("tokperf bench: --url 'http://127.0.0.1:9' does not answer")
    assert "FAILED" not in captured.err and "--tokperf-url" not in captured.err


# -- on the real llama-server --------------------------------------------------------------

TINY = ["-r", "2", "--warmup", "0", "--bandwidth", "50GB/s"]


@pytest.mark.engine
def test_threads_grid_restarts_per_configuration_and_stores_each_series(
        server_binary: Path, test_model: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    code = main(["bench", "-m", str(test_model), "-p", "16", "-n", "8", "-t", "1,2", *TINY,
                 "--db", str(db), "-o", "sql"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.count("# starting ") == 2
    conn = sqlite3.connect(":memory:")
    conn.executescript(captured.out)
    rows = conn.execute("SELECT t.test_id, n_threads, n_prompt, n_gen, avg_ts, t.series_key "
                        "FROM llama_bench JOIN tokperf_bench t "
                        "ON t.llama_bench_rowid = llama_bench.rowid").fetchall()
    assert [r[:4] for r in rows] == [("tokperf bench pp16 -t 1", 1, 16, 0),
                                     ("tokperf bench tg8 -t 1", 1, 0, 8),
                                     ("tokperf bench pp16 -t 2", 2, 16, 0),
                                     ("tokperf bench tg8 -t 2", 2, 0, 8)]
    assert all(r[4] > 0 for r in rows) and len({r[5] for r in rows}) == 4
    with sqlite3.connect(db) as stored:
        keys = {k for (k,) in stored.execute("SELECT series_key FROM results")}
    assert keys == {r[5] for r in rows}


@pytest.mark.engine
def test_flash_attention_grid_restarts_only_where_the_arguments_change(
        server_binary: Path, test_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "-m", str(test_model), "-p", "0", "-n", "8", "-pg", "16,8",
                 "-fa", "0,1", "-t", "1,1", *TINY, "--db", "off", "-o", "jsonl"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.count("# starting ") == 2  # (off, 1) twice, then (on, 1) twice
    items = [json.loads(line) for line in captured.out.splitlines()]
    assert [(i["flash_attn"], i["test"]) for i in items] == [
        (0, "tg8"), (0, "pp16+tg8"), (0, "tg8"), (0, "pp16+tg8"),
        (1, "tg8"), (1, "pp16+tg8"), (1, "tg8"), (1, "pp16+tg8")]
    assert all(i["avg_ts"] > 0 for i in items)  # an efficiency for tg tests only
    assert all(i["efficiency"] > 0 if i["test"] == "tg8" else i["efficiency"] is None
               for i in items)
    assert items[1]["n_prompt"] == 16 and items[1]["n_gen"] == 8
