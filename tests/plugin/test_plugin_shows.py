"""Nothing measured is hidden: progress, final verdicts, gate verdicts and warnings reach
the terminal, the DB and the reports (against a fake llama-server on 127.0.0.1)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from tests.support.fake_faults import FakeFaultyLlama


def _run(pytester: pytest.Pytester, body: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(body)
    with FakeFaultyLlama("ok") as fake:
        return pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s",
                                  "--tokperf-db", "r.db", *args)


TWO = """
def test_one(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)

def test_two(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=3, warmup=0)
"""


def test_one_line_per_measurement_without_v_and_no_carriage_returns(
    pytester: pytest.Pytester
) -> None:
    result = _run(pytester, TWO)
    result.assert_outcomes(passed=2)
    lines = [line for line in result.outlines if line.startswith("tokperf test_")]
    assert len(lines) == 2
    assert lines[0].startswith("tokperf test_one_line_per_measurement_without_v_and_no_carriage"
                               "_returns.py::test_one: 2 reps, decode ")
    assert " tok/s, TTFT " in lines[1] and lines[1].startswith("tokperf ") and "3 reps" in lines[1]
    assert "\r" not in result.stdout.str()  # not a terminal: no rewriting


def test_v_adds_a_line_per_repetition(pytester: pytest.Pytester) -> None:
    result = _run(pytester, TWO, "-v")
    result.stdout.fnmatch_lines(["tokperf *::test_two: rep 1/3: decode *, TTFT * ms",
                                 "tokperf *::test_two: rep 3/3: decode *, TTFT * ms",
                                 "*test_two PASSED*",
                                 "tokperf *::test_two: 3 reps, decode *"])


EXPLICIT = """
def test_floor(tok_bench):
    r = tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)
    r.assert_ttft(max_s=1e-9)  # the test's own assertion fails after the recording
"""


def test_the_stored_verdict_is_the_tests_final_one(pytester: pytest.Pytester) -> None:
    result = _run(pytester, EXPLICIT, "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    with sqlite3.connect(pytester.path / "r.db") as conn:
        (verdict,) = conn.execute("select verdict from results").fetchone()
    assert verdict == "fail"
    result.stdout.fnmatch_lines(["*4/8 *fail*"])  # the summary table shows it too
    junit = (pytester.path / "junit.xml").read_text()
    assert '<property name="tokperf_verdict" value="fail"' in junit
    assert junit.count('name="tokperf_verdict"') == 1  # replaced, not added twice


def test_warnings_are_counted_stored_and_reported(pytester: pytest.Pytester) -> None:
    # attached, its model file is not here: no ceiling, and the run says so per result
    result = _run(pytester, TWO, "--tokperf-report", "report.json",
                  "--tokperf-report", "report.md")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["2 of 2 results have warnings*",
                                 "note: *::test_one: no ceiling: *"])
    doc = json.loads((pytester.path / "report.json").read_text())
    assert doc["results_with_warnings"] == 2
    assert all(any("no ceiling" in w for w in r["warnings"]) for r in doc["results"])
    md = (pytester.path / "report.md").read_text()
    assert "2 with warnings" in md and "#### Warnings" in md
    with sqlite3.connect(pytester.path / "r.db") as conn:
        notes = [json.loads(n) for (n,) in conn.execute("select notes from results")]
    assert all(any("no ceiling" in n for n in note) for note in notes)


def test_gate_verdicts_are_a_column_and_stored(pytester: pytest.Pytester) -> None:
    # wide enough that the gate column is never dropped to fit: on a busy machine the fake's
    # client figures spread (a starved client reads tokens in bursts) and widen the table
    for _ in range(3):  # two runs of history, then one judged
        result = _run(pytester, TWO, "-o", "tokperf_columns=250")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*verdict *gate*", "gate against stored history: Holm*"])
    with sqlite3.connect(pytester.path / "r.db") as conn:
        rows = conn.execute("select metric, verdict, correction from gate_verdicts").fetchall()
    assert {m for m, _, _ in rows} == {"decode", "ttft"}
    assert all(c.startswith("Holm step-down over ") for _, _, c in rows)


def test_an_attached_ollama_model_is_identified_and_its_warnings_kept(
    pytester: pytest.Pytester
) -> None:
    from tests.support.fake_engines import FakeOllama

    pytester.makepyfile(TWO)
    loaded = {"llama3.2:3b": (4_000_000_000, 3_000_000_000)}  # a quarter left in RAM
    with FakeOllama(loaded=loaded) as fake:
        result = pytester.runpytest("--tokperf-engine", "ollama", "--tokperf-url", fake.url,
                                    "--tokperf-model", "llama3.2:3b", "--tokperf-db", "r.db")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["2 of 2 results have warnings*", "note: *partial*"])
    with sqlite3.connect(pytester.path / "r.db") as conn:
        (name, size, quant, params) = conn.execute(
            "select model_file_name, model_file_bytes, model_file_type, model_parameter_count "
            "from environments").fetchone()
        (key,) = conn.execute("select model from series limit 1").fetchone()
    assert name and (size or quant or params)  # identified from /api/show and /api/tags
    assert not key.startswith("engine:")


def test_the_header_names_the_engines_device(pytester: pytest.Pytester) -> None:
    from tests.support.fake_engines import FakeOllama

    pytester.makepyfile("def test_nothing():\n    pass\n")
    loaded = {"llama3.2:3b": (4_000_000_000, 3_000_000_000)}
    with FakeOllama(loaded=loaded) as fake:
        result = pytester.runpytest("--tokperf-engine", "ollama", "--tokperf-url", fake.url,
                                    "--tokperf-model", "llama3.2:3b", "--tokperf-db", "off")
        forced = pytester.runpytest("--tokperf-engine", "ollama", "--tokperf-url", fake.url,
                                    "--tokperf-device", "cpu", "--tokperf-db", "off")
    result.stdout.fnmatch_lines(["tokperf: engine device *75% of the bytes on the GPU "
                                 "(ollama /api/ps*"])
    forced.stdout.fnmatch_lines(["tokperf: engine device cpu* (--tokperf-device)"])


BUSY_LOAD = """
import pytest
from pytest_tokperf.hardware.load import LoadSampler
from pytest_tokperf.results import MachineLoad

BUSY = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                   steal=0.0, run_queue=5.0, run_queue_max=7, samples=10)

@pytest.fixture(autouse=True)
def neighbours(monkeypatch):
    monkeypatch.setattr(LoadSampler, "stop", lambda self: BUSY)
"""

FLOOR = """
def test_floor(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0).assert_usable(0.001)
"""


@pytest.mark.parametrize("busy", ["skip", "fail", "judge"])
def test_a_floor_measured_busy_through_tok_bench(pytester: pytest.Pytester, busy: str) -> None:
    pytester.makeconftest(BUSY_LOAD)
    result = _run(pytester, FLOOR, "--tokperf-busy", busy, "-rs",
                  "-o", "tokperf_busy_wait=1")  # the busy neighbours never leave
    if busy == "skip":
        result.assert_outcomes(skipped=1)
        # known busy once measured, before the floor is read (a call without one too)
        result.stdout.fnmatch_lines(["SKIPPED*machine busy: other processes used 1.6 of 2 CPUs*"
                                     "neither a pass nor a fail: its figures are stored as busy*"])
    elif busy == "fail":
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["MeasuredBusy: machine busy: other processes used 1.6*"])
    else:
        result.assert_outcomes(passed=1)
    with sqlite3.connect(pytester.path / "r.db") as conn:
        (verdict,) = conn.execute("select verdict from results").fetchone()
    assert verdict == ("unchecked" if busy == "judge" else "busy")  # judged: as before


def test_a_floor_checked_inside_tok_bench_reaches_pytest_as_measured_busy() -> None:
    # --tokperf-min-efficiency is checked inside tok_bench(); its MeasuredBusy once became a
    # plain failure there ("MeasuredBusy: ..."), so the main job failed beside a neighbour
    from pytest_tokperf.errors import EngineUnavailable, MeasuredBusy
    from pytest_tokperf.plugin import _or_fail

    def raising(error: Exception) -> None:
        raise error

    with pytest.raises(MeasuredBusy):
        _or_fail(raising, MeasuredBusy("machine busy: ..."))
    with pytest.raises(pytest.fail.Exception, match="EngineUnavailable: down"):
        _or_fail(raising, EngineUnavailable("down"))
