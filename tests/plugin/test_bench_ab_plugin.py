"""The same-run A/B through pytest: --tokperf-ab-engine URL with two fake vLLM servers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.fake_engines import FakeVLLM
from tests.support.fake_http import Handler

BENCH = """
def test_bench(tok_bench):
    r = tok_bench(prompt_tokens=16, generate_tokens=8, repetitions=4, warmup=0)
    assert r.ab is not None and r.ab.pairs == 4
    assert r.ab.control.engine.base_url == "{control}"
    assert r.ab.candidate.engine.base_url == "{candidate}"
    assert {{v.metric for v in r.ab.verdicts}} == {{"decode", "prefill", "ttft"}}
    assert r.result.notes[-1] == r.ab.describe()
"""


class DyingVLLM(FakeVLLM):
    """Answers ``alive`` completions, then the engine's out-of-memory error."""

    def __init__(self, alive: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.alive = alive

    def post_v1_completions(self, h: Handler, body: Any) -> None:
        self.alive -= 1
        if self.alive < 0:
            self.mode = "error"
        super().post_v1_completions(h, body)


def _args(candidate: str, control: str, *extra: str) -> list[str]:
    return ["--tokperf-engine", "vllm", "--tokperf-url", candidate, "--tokperf-ab-engine",
            control, "--tokperf-db", "off", "--tokperf-ab-budget=0", *extra]


def test_control_url_turns_tok_bench_into_a_paired_ab(pytester: pytest.Pytester) -> None:
    with FakeVLLM() as control, FakeVLLM() as candidate:
        pytester.makepyfile(BENCH.format(control=control.url, candidate=candidate.url))
        report = pytester.path / "r.json"
        ab_json = pytester.path / "ab.json"
        result = pytester.runpytest(*_args(candidate.url, control.url,
                                           f"--tokperf-report={report}",
                                           f"--tokperf-ab-json={ab_json}"))
        served = [len([r for r in f.requests if r[1] == "/v1/completions"])
                  for f in (control, candidate)]
    result.assert_outcomes(passed=1)
    assert served == [4, 4]
    result.stdout.fnmatch_lines([
        "tokperf: same-run A/B, every tok_bench call also measures the control (attached "
        "http://127.0.0.1:*) in ABBA pairs; flags changes of 2% or more",
        "A/B test_control_url_turns_tok_bench_into_a_paired_ab.py::test_bench: same-run A/B "
        "against control *: decode *; prefill *; ttft * (4 ABBA pairs*"])
    results = json.loads(report.read_text())["results"]
    assert len(results) == 2  # the control side is kept beside the candidate's
    assert any(w.startswith("same-run A/B against control") for w in results[-1]["warnings"])
    (ab,) = json.loads(ab_json.read_text())["ab"]
    assert ab["pairs"] == len(ab["rounds"]) == 4
    assert ab["control"]["url"] == control.url and ab["candidate"]["url"] == candidate.url
    assert [v["metric"] for v in ab["verdicts"]] == ab["metrics"] == ["decode", "prefill", "ttft"]
    assert all(len(r["control"]) == len(r["candidate"]) == 3 for r in ab["rounds"])


BUDGET = """
def test_bench(tok_bench):
    r = tok_bench(prompt_tokens=16, generate_tokens=8, repetitions=40, warmup=0)
    assert r.ab is not None
    print("PAIRS", r.ab.pairs, "|", r.ab.stopped)
"""


def test_the_ab_budget_stops_every_call_by_the_clock_at_an_even_count(
        pytester: pytest.Pytester) -> None:
    # a budget no pair fits in: each call stops as soon as it may (MIN_PAIRS, an even
    # count), its 40 repetitions notwithstanding (an attached control: one start)
    with FakeVLLM() as control, FakeVLLM() as candidate:
        pytester.makepyfile(BUDGET)
        result = pytester.runpytest(*_args(candidate.url, control.url,
                                           "--tokperf-ab-budget=0.001", "-s"))
        served = [len([r for r in f.requests if r[1] == "/v1/completions"])
                  for f in (control, candidate)]
    result.assert_outcomes(passed=1)
    assert served == [4, 4]
    result.stdout.fnmatch_lines(["*PAIRS 4 | the time budget of 0.001 s was spent (*s)"])


@pytest.mark.parametrize("value", ["-5", "nan", "soon"])
def test_a_bad_ab_budget_is_refused_by_name(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--tokperf-engine", "vllm", "--tokperf-url", "http://127.0.0.1:9",
                                "--tokperf-ab-engine", "http://127.0.0.1:9",
                                f"--tokperf-ab-budget={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--tokperf-ab-budget {value!r} from option "
                                 f"--tokperf-ab-budget is not a number of seconds*"])


def test_an_ab_budget_without_a_control_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--tokperf-engine", "vllm", "--tokperf-url", "http://127.0.0.1:9",
                                "--tokperf-ab-budget=300")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tokperf-ab-budget 300: no same-run A/B is asked for*"
                                 "add --tokperf-ab-engine SPEC*or drop the budget"])


def test_two_different_models_are_refused_before_measuring(pytester: pytest.Pytester) -> None:
    with FakeVLLM(model="org/model-a") as control, FakeVLLM(model="org/model-b") as candidate:
        pytester.makepyfile(BENCH.format(control=control.url, candidate=candidate.url))
        result = pytester.runpytest(*_args(candidate.url, control.url))
        generated = [r for f in (control, candidate) for r in f.requests
                     if r[1] == "/v1/completions"]
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*same-run A/B refused before measuring*not a like-for-like "
                                 "pair: model: control 'model-a', candidate 'model-b'*"
                                 "--tokperf-ab-model PATH*"])
    assert generated == []
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_a_dying_control_fails_the_test_naming_it(pytester: pytest.Pytester) -> None:
    with DyingVLLM(alive=2) as control, FakeVLLM() as candidate:
        pytester.makepyfile(BENCH.format(control=control.url, candidate=candidate.url))
        report = pytester.path / "r.json"
        result = pytester.runpytest(*_args(candidate.url, control.url,
                                           f"--tokperf-report={report}"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*same-run A/B, control side ({control.url}) failed at pair "
                                 "3:*CUDA out of memory*2 pair(s) measured before are kept*"])
    kept = json.loads(report.read_text())["results"]
    assert [r["verdict"] for r in kept] == ["error", "error"]
    assert [r["repetitions"] for r in kept] == [2, 2]
