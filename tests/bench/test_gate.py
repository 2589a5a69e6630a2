"""The regression gate: stored history -> verdict, and the plugin failing on it."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.bench.gate import Gate, GateFinding
from pytest_tokperf.settings import Baseline, parse_baseline
from pytest_tokperf.storage.store import ResultStore
from tests.support.storage_factory import fill_history as _fill
from tests.support.storage_factory import result_at as _result


def _judge(store: ResultStore, key: str, samples, baseline: Baseline = Baseline("history"),
           run_id: str | None = "current") -> list[GateFinding]:
    return Gate(baseline).judge(store, test_id="t::decode", series_key=key, samples=samples,
                                current_build="bnew", run_id=run_id)


def _verdicts(store: ResultStore, key: str, samples, baseline: Baseline = Baseline("history"),
              run_id: str | None = "current") -> dict[str, str]:
    return {f.comparison.metric: f.comparison.verdict
            for f in _judge(store, key, samples, baseline, run_id)}


def test_ten_percent_drop_is_a_regression(tmp_path: Path) -> None:
    store, key = _fill(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(6)])
    current = _result("bnew", 90.0, random.Random(9)).samples
    assert _verdicts(store, key, current)["decode"] == "regression"


def test_unchanged_build_is_quiet(tmp_path: Path) -> None:
    store, key = _fill(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(6)])
    current = _result("bnew", 100.0, random.Random(9)).samples
    assert _verdicts(store, key, current) == {"decode": "unchanged", "ttft": "unchanged"}


def test_one_earlier_run_is_inconclusive(tmp_path: Path) -> None:
    store, key = _fill(tmp_path / "r.db", [("b0", 100.0)])
    current = _result("bnew", 80.0, random.Random(9)).samples
    findings = _judge(store, key, current)
    decode = next(f for f in findings if f.comparison.metric == "decode")
    assert decode.comparison.verdict == "inconclusive"
    assert "need 2 runs of this series" in decode.comparison.reason


def test_named_engine_version_baseline(tmp_path: Path) -> None:
    levels = [("b1", 100.0)] * 3 + [("b2", 80.0)] * 3
    store, key = _fill(tmp_path / "r.db", levels)
    current = _result("bnew", 80.0, random.Random(9)).samples
    assert _verdicts(store, key, current, Baseline("engine", engine_version="b1"))["decode"] == "regression"
    assert _verdicts(store, key, current, Baseline("engine", engine_version="b2"))["decode"] == "unchanged"


def test_other_db_baseline(tmp_path: Path) -> None:
    other, key = _fill(tmp_path / "base.db", [(f"b{i}", 100.0) for i in range(4)])
    other.close()
    mine = ResultStore.open(tmp_path / "mine.db")
    current = _result("bnew", 85.0, random.Random(9)).samples
    assert _verdicts(mine, key, current, parse_baseline(str(tmp_path / "base.db")))["decode"] == "regression"


def test_parse_baseline_errors() -> None:
    assert parse_baseline(None).kind == "history"
    assert parse_baseline("engine=b11434").engine_version == "b11434"
    with pytest.raises(ConfigError, match="names no engine version"):
        parse_baseline("engine=")
    with pytest.raises(ConfigError, match="'nope.db' from option --tokperf-baseline is neither"):
        parse_baseline("nope.db")


def test_bad_baseline_is_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9", "--tokperf-baseline", "old.db")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tokperf-baseline 'old.db'*neither*"])


BENCH = """
def test_decode(tok_bench):
    tok_bench(prompt_tokens=16, generate_tokens=64, repetitions=5, warmup=1)
"""


@pytest.mark.engine
def test_real_run_slower_than_its_history_fails_gate(
    pytester: pytest.Pytester, llama_url: str, test_model: Path
) -> None:
    """A real run judged against four stored runs of its own series that decoded 3x
    faster on other builds: the gate fails it and names the builds compared. (The
    history is written from the real run's own record, so the series key is real.)"""
    pytester.makepyfile(BENCH)
    seed, db = pytester.path / "seed.db", pytester.path / "r.db"
    args = ("--tokperf-url", llama_url, f"--tokperf-model={test_model}",
            "--tokperf-fail-on-regression")
    pytester.runpytest(*args, f"--tokperf-db={seed}").assert_outcomes(passed=1)
    with ResultStore.open(seed) as seeded:
        (row,) = seeded.latest_per_series()
        first = seeded.result(row.result_id)
    store = ResultStore.open(db)
    rng = random.Random(3)
    for n in range(4):
        build = f"b1100{n}"
        fast = [dataclasses.replace(s, engine_decode_tokens_per_s=3000 * rng.gauss(1, 0.01),
                                    decode_tokens_per_s=3000 * rng.gauss(1, 0.01))
                for s in first.result.samples]
        result = dataclasses.replace(
            first.result, samples=tuple(fast),
            engine=dataclasses.replace(first.result.engine, version=build, build=build))
        run = dataclasses.replace(first.run, run_id=f"history-{n}")
        store.begin_run(run)
        store.record(run.run_id, first.test_id, result, model=first.model, hardware=first.hardware,
                     ceiling=first.ceiling, efficiency=first.efficiency, verdict="unchecked")
    store.close()
    result = pytester.runpytest(*args, f"--tokperf-db={db}")
    result.assert_outcomes(passed=1)  # the test measured fine; the gate fails the session
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "gate against stored history: Holm*",
        "*REGRESSION: test_real_run_slower_than_its_history_fails_gate.py::test_decode: decode −*"
        "(baseline b11000..b11003 (4 runs); current b11434-pypi-sdist)*",
    ])
    with ResultStore.open(db) as stored:
        (latest,) = stored.latest_per_series()
        verdicts = stored.gate_verdicts([latest.result_id])[latest.result_id]
    assert {v.metric: v.verdict for v in verdicts}["decode"] == "regression"


def test_finish_controls_the_session_together_and_keeps_rule_verdicts(tmp_path: Path) -> None:
    store, key = _fill(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(6)])
    gate = Gate(Baseline("history"))
    findings = []
    for i, level in enumerate([100.0] * 9 + [80.0]):
        samples = _result("bnew", level, random.Random(i)).samples
        findings += gate.judge(store, test_id=f"t{i}", series_key=key, samples=samples,
                               current_build="bnew", run_id="current")
    short_store, short_key = _fill(tmp_path / "short.db", [("b0", 100.0)])
    findings += _judge(short_store, short_key, _result("bnew", 70.0, random.Random(1)).samples)
    final, summary = gate.finish(findings)
    assert summary.startswith("Holm step-down over ") and "1 regression" in summary
    verdicts = {(f.test_id, f.comparison.metric): f.comparison.verdict for f in final}
    assert verdicts[("t9", "decode")] == "regression"
    assert all(verdicts[(f"t{i}", "decode")] != "regression" for i in range(9))
    assert verdicts[("t::decode", "decode")] == "inconclusive"  # one earlier run: by rule
    assert all(f.correction.startswith("Holm step-down over ") for f in final)
