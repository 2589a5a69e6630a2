"""`tokperf bench`: workloads measured without pytest, on the session's real llama-server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_tokperf.cli.main import main

pytestmark = pytest.mark.engine


def test_every_combination_is_measured_with_its_ceiling(
    llama_url: str, test_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--url", llama_url, "-m", str(test_model), "-p", "16,32", "-n", "8",
                 "-d", "0,64", "-r", "2", "--warmup", "0", "--db", "off", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["failures"] == [] and out["db"] is None
    shapes = [(r["prompt_tokens"], r["depth_tokens"], r["repetitions"]) for r in out["results"]]
    assert shapes == [(16, 0, 2), (16, 64, 2), (32, 0, 2), (32, 64, 2)]
    assert all(r["ceiling_decode_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0
               for r in out["results"])


def test_a_missed_floor_fails_but_keeps_every_result(
    llama_url: str, test_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.db"
    code = main(["bench", "--url", llama_url, "-m", str(test_model), "-p", "8,16", "-n", "8",
                 "-r", "1", "--warmup", "0", "--bandwidth", "100TB/s", "--min-efficiency", "0.6",
                 "--db", str(db)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.count("FAILED prompt ") == 2 and "required >= 60%" in captured.err
    assert f"results: 2 stored in {db}" in captured.out
    with sqlite3.connect(db) as conn:
        verdicts = [v for (v,) in conn.execute("select verdict from results order by id")]
    assert verdicts == ["fail", "fail"]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("-p", "16,abc", "--prompt '16,abc': 'abc' is not a whole number >= 1"),
    ("-c", "0", "--concurrency '0': '0' is not a whole number >= 1"),
    ("-n", "1", "--generate '1': '1' is not a whole number >= 2"),
    ("-d", "-5", "--depth '-5': '-5' is not a whole number >= 0"),
])
def test_bad_lists_are_refused_before_any_engine(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--url", "http://127.0.0.1:9", flag, value, "--db", "off"])
    assert code == 2
    assert message in capsys.readouterr().err
