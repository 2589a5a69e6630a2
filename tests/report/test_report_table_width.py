"""The terminal summary fits the terminal (120 columns off one); ``tokperf_columns`` sets it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tests.support.storage_factory import make_ceiling, make_engine, make_result

from pytest_tokperf.report.table import Row, summary_table
from pytest_tokperf.results import Workload
from pytest_tokperf.settings import Settings, resolve

LONG = "benchmarks/test_workloads.py::test_chat_turn_ttft_with_a_long_parametrised_name[warm-960]"


def _rows() -> list[Row]:
    result = make_result(engine=make_engine(build="b11434-pypi-sdist"),
                         workload=Workload(prompt_tokens=1024, generate_tokens=16,
                                           depth_tokens=4096, cached_prefix_tokens=960,
                                           repetitions=3, chat=True))
    result = dataclasses.replace(result, notes=("adaptive: the engine's decode is known to "
                                                "+/-5.3% (95% interval of the mean) after the "
                                                "most repetitions, 10; the target was +/-2.0%",))
    return [Row(LONG, result, make_ceiling(), "unstable", "regression decode −8.1%"),
            Row("t::short", make_result(), make_ceiling(), "pass")]


def test_summary_fits_120_columns_and_names_what_it_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # a 120-column terminal
    lines = summary_table(_rows())
    assert max(len(line) for line in lines) <= 120
    header = lines[0].split()
    for kept in ("test", "prompt/gen", "TTFT", "decode", "eff", "verdict"):
        assert kept in header
    text = " ".join(lines)
    assert "(not shown to fit 120 columns: TTFT bound," in text
    assert "PYTEST_TOKPERF_COLUMNS=250 shows them)" in text
    assert any(line.startswith("note: ") for line in lines)
    short = summary_table(_rows()[1:])  # a plain workload keeps more
    assert max(len(line) for line in short) <= 120
    assert "engine decode" in short[0] and "TTFT bound" not in short[0]


def test_wide_terminal_shows_every_column() -> None:
    lines = summary_table(_rows(), columns=250)
    assert len(lines[0]) > 120
    for name in ("TTFT bound", "agree", "all streams", "chars/s", "engine decode",
                 "engine build", "gate"):
        assert name in lines[0]
    assert not any(line.startswith("(not shown") for line in lines)


def test_columns_option_resolves_and_refuses_a_narrow_width() -> None:
    def settings(**ini: str) -> Settings:
        return resolve(cli=lambda _: None, ini=ini.get, env={}, rootdir=Path("/proj"))

    assert settings().columns is None  # the terminal's
    assert settings(tokperf_columns="200").columns == 200
    with pytest.raises(Exception, match=r"tokperf_columns '20' from ini option"):
        settings(tokperf_columns="20")


def test_columns_is_a_project_setting(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*tokperf_columns (string):*"])
    bad = pytester.runpytest("-o", "tokperf_columns=20")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*tokperf_columns '20'*"])


def test_a_narrow_terminal_keeps_test_workload_decode_and_verdict() -> None:
    lines = summary_table(_rows(), columns=80)
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == ["test", "prompt/gen", "decode", "tok/s", "eff", "verdict"]
    assert lines[2].startswith("…etrised_name[warm-960]  d4096+1024/16 warm960 chat  ")
    assert "(not shown to fit 80 columns: TTFT ms, TTFT bound," in " ".join(lines)


TWO = """
def test_one(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)

def test_a_second_test_with_a_long_name_as_parametrised_tests_have(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=3, warmup=0)
"""


@pytest.mark.parametrize("columns", [80, 200])
def test_the_session_table_fits_the_terminal(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """The defect: the pytest table kept 120 columns whatever the terminal."""
    from tests.support.fake_faults import FakeFaultyLlama

    monkeypatch.setenv("COLUMNS", str(columns))
    pytester.makepyfile(TWO)
    with FakeFaultyLlama("ok") as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s",
                                    "--tokperf-db", "off")
    result.assert_outcomes(passed=2)
    out = result.outlines
    table = out[out.index(next(line for line in out if line.startswith("test "))):]
    table = table[:next(i for i, line in enumerate(table) if not line.strip())
                  if "" in table else len(table)]
    assert table and max(len(line) for line in table) <= columns, table
    wide = "engine build" in table[0] and "gate" in table[0]
    assert wide == (columns == 200)


def test_a_row_measured_on_a_busy_machine_is_flagged_in_its_verdict() -> None:
    from pytest_tokperf.results import MachineLoad

    busy = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                       steal=0.0, run_queue=5.0, samples=10)
    quiet = dataclasses.replace(busy, busy_cpus=0.5)
    rows = [Row("t::busy", dataclasses.replace(make_result(), load=busy), make_ceiling(), "fail"),
            Row("t::quiet", dataclasses.replace(make_result(), load=quiet), make_ceiling(),
                "pass")]
    lines = summary_table(rows, columns=250)
    assert "fail (busy)" in next(line for line in lines if line.startswith("t::busy"))
    assert "busy" not in next(line for line in lines if line.startswith("t::quiet"))
