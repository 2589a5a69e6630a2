"""pytest and the verbs agree on the default DB from any folder of the project, and a
``postgresql://`` DB without psycopg installed is one line naming the extra."""

from __future__ import annotations

import sys

import pytest
from tests.support.fake_faults import FakeFaultyLlama

from pytest_tokperf.cli.main import main

BENCH = """
def test_decode(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=4, repetitions=2, warmup=0)
"""
PG = "postgresql://localhost/results"
EXTRA = "PostgreSQL support needs psycopg: pip install 'pytest-tokperf[postgres]'"


def test_history_from_a_subfolder_reads_what_pytest_wrote(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makeini("[pytest]\n")
    tests = pytester.mkdir("tests")
    (tests / "test_it.py").write_text(BENCH)
    monkeypatch.chdir(tests)
    with FakeFaultyLlama("ok") as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s")
    result.assert_outcomes(passed=1)
    assert (pytester.path / ".tokperf" / "results.db").is_file()
    assert not (tests / ".tokperf").exists()
    capsys.readouterr()
    assert main(["history"]) == 0
    assert "tests/test_it.py::test_decode" in capsys.readouterr().out
    assert main(["history", "--json"]) == 0


@pytest.fixture
def no_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in sys.modules if n == "psycopg" or n.startswith("psycopg.")]:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.usefixtures("no_psycopg")
def test_a_verb_on_postgresql_without_psycopg_names_the_extra(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "--db", PG]) == 2
    err = capsys.readouterr().err
    assert EXTRA in err and "Traceback" not in err and err.count("\n") == 1, err


@pytest.mark.usefixtures("no_psycopg")
def test_a_session_on_postgresql_without_psycopg_names_the_extra(
    pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(BENCH)
    result = pytester.runpytest("--tokperf-db", PG, "--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --tokperf-db from option --tokperf-db '{PG}': {EXTRA}"])
    assert "Traceback" not in result.stderr.str() and "INTERNALERROR" not in result.stdout.str()
