"""The regression gate: stored history -> verdict, and the plugin failing on it."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.gate import Baseline, judge, parse_baseline
from pytest_tokperf.storage import ResultStore
from storage_factory import fill_history as _fill
from storage_factory import result_at as _result


def _verdicts(store: ResultStore, key: str, samples, baseline: Baseline = Baseline("history"),
              run_id: str | None = "current") -> dict[str, str]:
    findings = judge(store, baseline, test_id="t::decode", series_key=key, samples=samples,
                     current_build="bnew", run_id=run_id)
    return {f.comparison.metric: f.comparison.verdict for f in findings}


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
    findings = judge(store, Baseline("history"), test_id="t::decode", series_key=key,
                     samples=current, current_build="bnew", run_id="current")
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
    tok_bench(prompt_tokens=16, generate_tokens=48, repetitions=5, warmup=1)
"""


@pytest.mark.engine
def test_cpu_hog_regression_fails_gate(pytester: pytest.Pytester, llama_url: str) -> None:
    """Three quiet runs, then one with a busy process stealing a core: the gate fails it."""
    pytester.makepyfile(BENCH)
    db = pytester.path / "r.db"
    args = ("--tokperf-url", llama_url, f"--tokperf-db={db}", "--tokperf-fail-on-regression")
    for _ in range(3):
        pytester.runpytest(*args).assert_outcomes(passed=1)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        result = pytester.runpytest(*args)
    finally:
        hog.kill()
        hog.wait()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*REGRESSION: test_cpu_hog_regression_fails_gate.py::test_decode: decode −*",
        "against stored history:",
    ])
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from results").fetchone() == (4,)
