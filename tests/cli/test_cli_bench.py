"""`tokperf bench`: llama-bench's tests measured without pytest, on the session's real
llama-server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_tokperf.cli.main import main

pytestmark = pytest.mark.engine


def test_every_test_is_measured_with_its_ceiling_and_its_own_series(
    llama_url: str, test_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--url", llama_url, "-m", str(test_model), "-p", "16,32", "-n", "8",
                 "-d", "0,64", "-r", "2", "--warmup", "0", "--db", "off", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["failures"] == [] and out["db"] is None
    results = out["results"]
    shapes = [(r["test"], r["prompt_tokens"], r["generate_tokens"], r["depth_tokens"],
               r["repetitions"]) for r in results]
    assert shapes == [("pp16", 16, 2, 0, 2), ("pp32", 32, 2, 0, 2), ("tg8", 1, 8, 0, 2),
                      ("pp16 @ d64", 16, 2, 64, 2), ("pp32 @ d64", 32, 2, 64, 2),
                      ("tg8 @ d64", 1, 8, 64, 2)]
    assert [r["test_id"] for r in results] == [f"tokperf bench {s[0]}" for s in shapes]
    assert len({r["series_key"] for r in results}) == 6 and all(r["series_key"] for r in results)
    assert len({r["run_id"] for r in results}) == 1 and results[0]["run_id"]
    assert all(r["created_at"] for r in results)
    # a tg test is judged against the decode ceiling, a pp test is not
    assert all(r["ceiling_decode_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0
               for r in results if r["test"].startswith("tg"))
    assert all(r["prefill_tokens_per_s"] > 0 and r["efficiency"] is None
               for r in results if r["test"].startswith("pp"))


def test_a_missed_floor_fails_but_keeps_every_result(
    llama_url: str, test_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "r.db"
    code = main(["bench", "--url", llama_url, "-m", str(test_model), "-p", "8", "-n", "8",
                 "-pg", "16,8", "-r", "1", "--warmup", "0", "--bandwidth", "100TB/s",
                 "--min-efficiency", "0.6", "--db", str(db)])
    captured = capsys.readouterr()
    assert code == 1
    assert "FAILED tokperf bench tg8: " in captured.err
    assert "FAILED tokperf bench pp16+tg8: " in captured.err
    assert "required >= 60%" in captured.err and "pp8:" not in captured.err  # no decode floor
    assert f"results: 3 stored in {db}" in captured.out
    with sqlite3.connect(db) as conn:
        verdicts = [v for (v,) in conn.execute("select verdict from results order by id")]
    assert verdicts[1:] == ["fail", "fail"] and verdicts[0] != "fail"


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("-p", "16,abc", "-p '16,abc': 'abc' is not a whole number >= 0"),
    ("--prompt", "16,abc", "--prompt '16,abc': 'abc' is not a whole number >= 0"),
    ("-c", "0", "-c '0': '0' is not a whole number >= 1"),
    ("-n", "1", "-n '1': a generation test needs at least 2 tokens"),
    ("-d", "-5", "-d '-5': '-5' is not a whole number >= 0"),
])
def test_bad_lists_are_refused_before_any_engine(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--url", "http://127.0.0.1:9", flag, value, "--db", "off"])
    assert code == 2
    assert message in capsys.readouterr().err
