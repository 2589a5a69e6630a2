"""`tokperf changes` and one series' `tokperf history` name a slide whose total reaches the
minimum effect as a drift, keep a step a step, and leave a drop the memory explains alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history

from pytest_tokperf.cli.main import main
from pytest_tokperf.report.history import changes, series_runs
from pytest_tokperf.storage.lookup import find_series
from pytest_tokperf.storage.store import ResultStore

RAMP = [(f"b{i:02d}", 100 * 0.99**i) for i in range(10)]  # -8.6% in steps of 1%
DROP = [(f"b{i:02d}", 100.0) for i in range(5)] + [(f"b{i:02d}", 77.0) for i in range(5, 8)]


def test_changes_and_the_history_view_name_a_ramp_as_a_drift(tmp_path: Path) -> None:
    store, _ = fill_history(tmp_path / "r.db", RAMP, seed=3)
    shown = changes(store)
    (drift,) = shown.data
    assert (drift["kind"], drift["verdict"]) == ("drift", "regression")
    assert (drift["version_before"], drift["version_after"]) == ("b00", "b09")
    assert -0.10 < drift["relative_change"] <= -0.05
    assert shown.lines[0].split()[:6] == ["series", "test", "where", "metric", "change", "p"]
    assert "drift b00..b09" in shown.lines[2] and "engine_build: b00 -> b09" in shown.lines[2]
    one = series_runs(store, find_series(store, "t::decode")[0])
    assert [c["kind"] for c in one.data["changes"]] == ["drift"]
    assert any(line.startswith("drift b00..b09: regression −") for line in one.lines)
    store.close()


def test_a_step_stays_a_step_and_a_flat_history_names_nothing(tmp_path: Path) -> None:
    store, _ = fill_history(tmp_path / "step.db", DROP)
    assert [(c["kind"], c["version_after"]) for c in changes(store).data] == [("step", "b05")]
    assert any(line.startswith("step b04 -> b05: regression") for line in series_runs(
        store, find_series(store, "t::decode")[0]).lines)
    store.close()
    flat, _ = fill_history(tmp_path / "flat.db", [(f"b{i:02d}", 100.0) for i in range(12)])
    assert changes(flat).data == []
    flat.close()


def test_a_drop_the_memory_went_with_is_neither_a_step_nor_a_drift(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    fill_history(db, DROP, probed=[60.0] * 5 + [37.0] * 3)[0].close()
    with ResultStore.open_read_only(db) as store:
        assert changes(store).data == []
    assert main(["changes", "--db", str(db)]) == 0
    assert capsys.readouterr().out.startswith("no change points")
