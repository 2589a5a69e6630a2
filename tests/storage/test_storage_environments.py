"""One ``environments`` row per environment: the moment's bandwidth probe and the engine's
port are per-result figures (schema v7), and the migration folds old duplicates."""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing
from pathlib import Path

from tests.support.storage_factory import (
    make_ceiling,
    make_engine,
    make_model,
    make_result,
    make_run,
    probed_hardware,
    v6_db,
)

from pytest_tokperf.storage.env_hash import PER_RESULT_COLUMNS
from pytest_tokperf.storage.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]


def test_results_of_one_environment_share_its_row(tmp_path: Path) -> None:
    with ResultStore.open(tmp_path / "r.db") as store:
        store.begin_run(make_run())
        for i, gb in enumerate((31.0, 64.0, 47.5)):
            engine = make_engine(base_url=f"http://127.0.0.1:{50000 + i}")
            store.record("run-1", f"t::{i}", make_result(engine=engine), model=make_model(),
                         hardware=probed_hardware(gb), ceiling=make_ceiling(), efficiency=0.5,
                         verdict="unchecked")
        assert store.db.execute("SELECT count(*) FROM environments").fetchone()[0] == 1
        stored = [store.result(i) for i in (1, 2, 3)]
    assert [s.hardware.measured_bandwidth.bytes_per_s for s in stored if s.hardware
            and s.hardware.measured_bandwidth] == [31e9, 64e9, 47.5e9]
    assert [s.result.engine.base_url for s in stored] == [
        f"http://127.0.0.1:{50000 + i}" for i in range(3)]


def test_the_migration_folds_duplicate_environments_and_keeps_each_result(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    v6_db(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM environments").fetchone()[0] == 2
    with ResultStore.open(path) as store:
        assert store.db.execute("SELECT count(*) FROM environments").fetchone()[0] == 1
        assert store.db.execute("SELECT count(*) FROM results").fetchone()[0] == 2
        stored = [store.result(i) for i in (1, 2)]
        moved = store.db.execute(
            f"SELECT {', '.join(PER_RESULT_COLUMNS)} FROM environments").fetchone()
    assert moved == (None,) * len(PER_RESULT_COLUMNS)
    assert [s.hardware.measured_bandwidth.bytes_per_s for s in stored if s.hardware
            and s.hardware.measured_bandwidth] == [31e9, 64e9]
    assert [s.result.engine.base_url for s in stored] == [
        "http://127.0.0.1:50000", "http://127.0.0.1:50001"]


def test_the_reference_runs_hold_one_environment_per_distinct_one(tmp_path: Path) -> None:
    """db/runs, imported: results per environment, not one environment per result."""
    from pytest_tokperf.storage.exchange import import_datasets

    added = import_datasets(tmp_path / "n.db", [ROOT / "db" / "runs"])
    assert added.results > 4
    with ResultStore.open(tmp_path / "n.db") as store:
        envs = store.db.execute("SELECT count(*) FROM environments").fetchone()[0]
        distinct = store.db.execute(
            "SELECT count(*) FROM (SELECT DISTINCT run_id, engine_settings FROM results"
            " JOIN environments e ON e.id = results.environment_id)").fetchone()[0]
    assert envs == distinct < added.results


def test_a_changed_engine_setting_is_another_environment(tmp_path: Path) -> None:
    with ResultStore.open(tmp_path / "r.db") as store:
        store.begin_run(make_run())
        for threads in (4, 8):
            engine = dataclasses.replace(make_engine(), threads=threads)
            store.record("run-1", "t::decode", make_result(engine=engine), model=make_model(),
                         hardware=probed_hardware(40.0), ceiling=make_ceiling(), efficiency=0.5,
                         verdict="unchecked")
        assert store.db.execute("SELECT count(*) FROM environments").fetchone()[0] == 2
