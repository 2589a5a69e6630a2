"""The data verbs and their DB: ``--db`` everywhere, read-only reads, foreign files refused
untouched, build labels in every form, rows told apart."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from tests.support.storage_factory import (
    fill_history,
    make_ceiling,
    make_model,
    make_result,
    make_run,
    probed_hardware,
    v6_db,
)

from pytest_tokperf.cli.main import main
from pytest_tokperf.results import Bandwidth
from pytest_tokperf.storage.store import ResultStore

STEP = [(f"b{i:02d}", 100.0) for i in range(6)] + [(f"b{i:02d}", 88.0) for i in range(6, 12)]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    store, _ = fill_history(tmp_path / "r.db", STEP)
    store.close()
    return tmp_path / "r.db"


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another program's SQLite file."""
    path = tmp_path / "notes.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes (text) VALUES ('keep me')")
    conn.commit()
    conn.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _verbs(target: Path, db: Path, tmp: Path) -> list[list[str]]:
    t = str(target)
    return [
        ["history", "--db", t], ["history", "--db", t, "t::decode"],
        ["changes", "--db", t],
        ["compare", "--db", t, "--baseline", "b00", "--current", "b11"],
        ["compare", "--db", str(db), t], ["compare", "--db", t, str(db)],
        ["accept", "--db", t, "--reason", "x"],
        ["export", "--db", t, "-o", str(tmp / "e.csv")],
        ["import", "--db", t, str(tmp / "refs")],
        ["merge", "--db", t, str(db), "-o", str(tmp / "m1.db")],
        ["merge", str(db), str(db), "-o", t],
        ["save-reference", "--db", t, "-d", str(tmp / "refs2")],
        ["plot", "--db", t, "-o", str(tmp / "plots")],
        ["report", "--db", t, "-o", str(tmp / "r.html")],
    ]


def test_no_verb_writes_to_a_foreign_sqlite_file(
    db: Path, foreign: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["save-reference", "--db", str(db), "-d", str(tmp_path / "refs")]) == 0
    before = _digest(foreign)
    for argv in _verbs(foreign, db, tmp_path):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "is not a tokperf results DB" in err and "notes" in err, (argv, err)
        assert _digest(foreign) == before, argv
    conn = sqlite3.connect(foreign)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    conn.close()


def test_reading_verbs_leave_an_old_schema_db_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An older tokperf DB is read through a migrated copy in memory, not upgraded."""
    db = tmp_path / "v6.db"
    v6_db(db)
    before = _digest(db)
    assert main(["history", "--db", str(db)]) == 0
    assert "t::decode" in capsys.readouterr().out
    assert main(["export", "--db", str(db), "-o", str(tmp_path / "e.json"), "--format", "json"]) == 0
    assert json.loads((tmp_path / "e.json").read_text())[1]["measured_bandwidth_bytes_per_s"] == 64e9
    assert _digest(db) == before
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 6


def test_every_data_verb_takes_db_and_defaults_to_the_bench_db(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert "'.tokperf/results.db' does not exist" in err and "--db PATH" in err
    assert "--tokperf-db" not in err
    (tmp_path / ".tokperf").mkdir()
    (tmp_path / ".tokperf" / "results.db").write_bytes(db.read_bytes())
    assert main(["history", "t::decode"]) == 0
    assert "series " in capsys.readouterr().out
    assert main(["save-reference", "-d", "refs"]) == 0  # the latest run of the default DB
    (tmp_path / ".tokperf" / "results.db").unlink()
    assert main(["import", "refs"]) == 0
    assert "added 1 runs, 1 results, 5 samples to .tokperf/results.db" in capsys.readouterr().out


def test_compare_takes_every_build_label_install_engine_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builds = [("b9093", 100.0)] * 4 + [("b9100", 80.0)] * 4
    store, _ = fill_history(tmp_path / "b.db", builds)
    store.close()
    outs = []
    for baseline in ("b9093", "9093", "9093.0.0", "b9093-pypi-sdist"):
        assert main(["compare", "--db", str(tmp_path / "b.db"), "--baseline", baseline,
                     "--current", "9100", "--json"]) == 0, capsys.readouterr().err
        outs.append(json.loads(capsys.readouterr().out))
    assert all(o == outs[0] for o in outs) and outs[0]
    assert main(["compare", "--db", str(tmp_path / "b.db"), "--baseline", "9094",
                 "--current", "9100"]) == 2
    assert "no stored results of engine version '9094'" in capsys.readouterr().err


def test_history_sorts_by_test_and_tells_alike_rows_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _ = fill_history(tmp_path / "s.db", [("b1", 100.0)] * 2, test_id="z::last")
    store.close()
    store, _ = fill_history(tmp_path / "s.db", [("b1", 100.0)] * 2, test_id="a::first")
    store.close()
    store, _ = fill_history(tmp_path / "s.db", [("b1", 60.0)] * 2, test_id="a::first",
                            speculative=True)
    store.close()
    assert main(["history", "--db", str(tmp_path / "s.db")]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    assert [line.split("  ")[0].strip() for line in lines] == [
        "a::first", "a::first +draft", "z::last"]


def _record_at(store: ResultStore, run_id: str, test_id: str, bandwidth: Bandwidth,
               efficiency: float) -> None:
    store.begin_run(make_run(run_id=run_id))
    ceiling = dataclasses.replace(make_ceiling(), bandwidth=bandwidth)
    store.record(run_id, test_id, make_result(), model=make_model(), ceiling=ceiling,
                 hardware=probed_hardware(bandwidth.bytes_per_s / 1e9),
                 efficiency=efficiency, verdict="unchecked")


def test_history_judges_efficiency_against_the_host_not_the_moment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stored at 124% against a low probe of the moment: shown against what the host
    reached (64 GB/s): 0 results above 100% without a warning."""
    with ResultStore.open(tmp_path / "e.db") as store:
        _record_at(store, "low", "t::a", Bandwidth(31e9, "measured", "probe"), 1.24)
        _record_at(store, "high", "t::b", Bandwidth(64e9, "measured", "probe"), 0.6)
    assert main(["history", "--db", str(tmp_path / "e.db"), "--json"]) == 0
    listed = {r["test_id"]: r["judged_efficiency"] for r in json.loads(capsys.readouterr().out)}
    assert listed["t::a"]["value"] == pytest.approx(1.24 * 31 / 64)
    assert listed["t::a"]["stored"] == 1.24 and listed["t::b"]["value"] == 0.6
    assert main(["history", "--db", str(tmp_path / "e.db")]) == 0
    out = capsys.readouterr().out
    assert "124%" not in out and "60%" in out and f"{1.24 * 31 / 64:.0%}" in out
    assert "judged against that" in out and "64.0 GB/s" in out and "WARNING" not in out


def test_history_warns_when_a_datasheet_ceiling_is_beaten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ResultStore.open(tmp_path / "s.db") as store:
        _record_at(store, "spec", "t::a", Bandwidth(50e9, "catalog", "datasheet"), 1.06)
    assert main(["history", "--db", str(tmp_path / "s.db"), "t::a"]) == 0
    out = capsys.readouterr().out
    assert "106% !" in out
    assert "WARNING result 1: efficiency 106% is above its ceiling of 50.0 GB/s" in out


def test_an_import_that_fails_leaves_no_db_it_made(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a row without avg_ts is refused once the DB is open: exit 2 used to leave an 80 KB DB
    bad = tmp_path / "bad.json"
    bad.write_text('[{"n_prompt": 0, "n_gen": 128}]', encoding="utf-8")
    new = tmp_path / "new" / "dir" / "t.db"
    assert main(["import-llama-bench", str(bad), "--db", str(new)]) == 2
    assert "no avg_ts" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    before = db.read_bytes()
    assert main(["import-llama-bench", str(bad), "--db", str(db)]) == 2
    assert db.read_bytes() == before  # a DB that was there stays, as it was
