"""`tokperf history/compare/changes/export/import/merge/save-reference` on stored results."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history

from pytest_tokperf.cli.main import main

STEP = [(f"b{i:02d}", 100.0) for i in range(10)] + [(f"b{i:02d}", 88.0) for i in range(10, 20)]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    store, _ = fill_history(tmp_path / "r.db", STEP)
    store.close()
    return tmp_path / "r.db"


def test_history_lists_series_then_one(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "t::decode" in out and "b19" in out
    assert main(["history", "--db", str(db), "t::decode"]) == 0
    out = capsys.readouterr().out
    assert out.count("  unchecked") == 20
    assert "decode CV " in out and "smallest detectable change at 5 reps" in out


def test_history_lists_a_bench_pp_test_as_prefill(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a `tokperf bench` pp test streams 2 tokens: history showed their decode (56 t/s)
    # where bench's table said 522
    from pytest_tokperf.bench.grid import BenchTest
    from pytest_tokperf.bench.grid_run import TEST_ID

    db = tmp_path / "b.db"
    tests = {"pp": BenchTest("pp", 512, 0, 4096, 4, 256), "pg": BenchTest("pg", 512, 128)}
    for kind, test in tests.items():
        fill_history(db, [("b1", 56.0), ("b2", 56.0)], test_id=f"{TEST_ID} {test.label} -t 8",
                     seed=len(kind))[0].close()
    assert main(["history", "--db", str(db), "--json"]) == 0
    listed = {r["test_id"].split()[2]: r for r in json.loads(capsys.readouterr().out)}
    assert (listed["pp512"]["metric"], listed["pp512+tg128"]["metric"]) == ("prefill", "decode")
    assert main(["history", "--db", str(db)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "pp512 @ d4096" in line)
    assert row.split()[-4:-1] == ["prefill", "5000.00", "-"]  # its prefill, no decode efficiency
    assert main(["compare", "--db", str(db), "--json"]) == 0
    assert {v["metric"] for v in json.loads(capsys.readouterr().out).values()} == {
        "prefill", "decode"}


def test_accept_starts_the_baseline_at_the_new_level(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accept", "--db", str(db), "t::decode", "--reason", "new KV layout", "--by", "ana"]) == 0
    out = capsys.readouterr().out
    assert "accepted" in out and "t::decode" in out and "by ana: new KV layout" in out
    assert main(["history", "--db", str(db), "t::decode"]) == 0
    out = capsys.readouterr().out
    assert out.count("(accepted)") == 1
    assert "accepted level from " in out and "by ana: new KV layout" in out


def test_accept_refuses_an_empty_reason_and_a_foreign_result(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accept", "--db", str(db), "--reason", " "]) == 2
    assert "--reason is empty" in capsys.readouterr().err
    assert main(["accept", "--db", str(db), "--reason", "x", "--result", "999"]) == 2
    assert "result 999 belongs to none of the series" in capsys.readouterr().err


def test_changes_names_the_step_and_build(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["changes", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert len(found) == 1
    step = found[0]
    assert (step["version_before"], step["version_after"]) == ("b09", "b10")
    assert step["relative_change"] == pytest.approx(-0.12, abs=0.02)
    assert step["changed"]["engine_build"] == ["b09", "b10"]


def test_compare_versions_flags_regression(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--db", str(db), "--baseline", "b03", "--current", "b15", "--fail"]) == 1
    out = capsys.readouterr().out
    assert "regression" in out and "decode −11." in out
    assert main(["compare", "--db", str(db), "--baseline", "b03", "--current", "b04"]) == 0
    assert "regression" not in capsys.readouterr().out


def test_compare_two_dbs(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill_history(tmp_path / "new.db", [("b99", 80.0)])[0].close()
    assert main(["compare", "--db", str(db), str(tmp_path / "new.db"), "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert [v["verdict"] for v in verdicts.values()] == ["regression"]


def test_export_import_merge_reference(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_csv = tmp_path / "r.csv"
    assert main(["export", "--db", str(db), "--format", "csv", "-o", str(out_csv)]) == 0
    with out_csv.open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 20 and {r["engine_build"] for r in rows} >= {"b00", "b19"}
    refs = tmp_path / "runs"
    assert main(["save-reference", "--db", str(db), "-d", str(refs)]) == 0
    saved = list(refs.glob("*.jsonl"))
    assert len(saved) == 1
    assert main(["import", "--db", str(tmp_path / "fresh.db"), str(refs)]) == 0
    assert "added 1 runs, 1 results, 5 samples" in capsys.readouterr().out
    assert main(["merge", str(db), str(tmp_path / "fresh.db"), "-o", str(tmp_path / "m.db")]) == 0
    assert "20 runs, 20 results, 100 samples" in capsys.readouterr().out


def test_missing_db_is_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    # with a default DB in the working folder (after any main job), a missing nope.db is
    # still a missing DB, not a series pattern searched for in the default one
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tokperf").mkdir()
    (tmp_path / ".tokperf" / "results.db").write_bytes(b"SQLite format 3\x00")
    assert main(["history", "--db", str(tmp_path / "nope.db")]) == 2
    assert "results DB" in capsys.readouterr().err


def test_unknown_series_is_clear(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "--db", str(db), "zzz"]) == 2
    assert "no stored series matches 'zzz'" in capsys.readouterr().err


def test_plot_and_report(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", "--db", str(db), "-o", str(tmp_path / "plots"), "--json"]) == 0
    plots = json.loads(capsys.readouterr().out)
    history = next(p for p in plots if p["kind"] == "history")
    assert Path(history["path"]).stat().st_size > 10_000
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "t::decode" in html and "data:image/png;base64," in html and "regression" in html


def test_data_verbs_speak_json(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["merge", str(db), str(db), "-o", str(tmp_path / "m.db"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "runs": 20, "results": 20, "samples": 100, "output": str(tmp_path / "m.db")}
    assert main(["export", "--db", str(db), "--format", "json", "-o", str(tmp_path / "e.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == 20


def _strict(text: str) -> object:
    """JSON as a strict parser reads it: NaN and Infinity are errors."""
    def refuse(word: str) -> object:
        raise ValueError(f"not strict JSON: {word}")
    return json.loads(text, parse_constant=refuse)


def test_compare_of_a_db_with_itself_is_refused(db: Path, capsys: pytest.CaptureFixture[str]
                                                 ) -> None:
    assert main(["compare", "--db", str(db), str(db)]) == 2
    assert "that is one DB twice" in capsys.readouterr().err
    same = db.parent / "sub" / ".." / db.name
    (db.parent / "sub").mkdir()
    assert main(["compare", "--db", str(db), str(same)]) == 2
    assert main(["compare", "--db", str(db), "--baseline", "b19", "--current", "19"]) == 2
    err = capsys.readouterr().err
    assert "are both b19: a build compared with itself has no change to judge" in err


def test_every_json_output_is_strict(db: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    # b00 has one run of five samples: the sessions' spread is unknown (NaN figures)
    fill_history(tmp_path / "new.db", [("b20", 90.0)])[0].close()
    for argv in (["compare", "--db", str(db), "--baseline", "b00", "--current", "b19", "--json"],
                 ["compare", "--db", str(db), str(tmp_path / "new.db"), "--json"],
                 ["history", "--db", str(db), "--json"],
                 ["history", "--db", str(db), "t::decode", "--json"],
                 ["changes", "--db", str(db), "--json"]):
        assert main(argv) in (0, 1), argv
        _strict(capsys.readouterr().out)
    assert main(["export", "--db", str(db), "--format", "json", "-o", str(tmp_path / "e.json")]) == 0
    _strict((tmp_path / "e.json").read_text())
