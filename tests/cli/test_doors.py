"""Every door reads its verdict off the one judge: the same word, and the same change to
within the difference of what each door compares, on shared fixture DBs.

Doors: ``tokperf compare`` (two builds), ``tokperf changes`` (level steps), the report's
change points (``report.report_data``), the pytest gate (``judge_history`` over the
stored points, as ``bench.gate`` calls it), and ``tokperf history``'s noise line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history

from pytest_tokperf.cli.main import main
from pytest_tokperf.report.report_data import load_histories
from pytest_tokperf.stats import DECODE, judge_history
from pytest_tokperf.storage.history import history_points
from pytest_tokperf.storage.store import ResultStore

DROP = [(f"b{i:02d}", 100.0) for i in range(5)] + [(f"b{i:02d}", 77.0) for i in range(5, 8)]
FLAT = [(f"b{i:02d}", 100.0) for i in range(8)]


@pytest.fixture(params=["drop", "flat"])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, str]:
    levels = DROP if request.param == "drop" else FLAT
    store, key = fill_history(tmp_path / "r.db", levels)
    store.close()
    return request.param, tmp_path / "r.db", key


def _doors(db: Path, key: str, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[str, float]]:
    """Door -> (verdict, change) for the step from b04 to b05; 'none' where a door that
    lists steps lists none."""
    seen: dict[str, tuple[str, float]] = {}
    assert main(["compare", str(db), "--baseline", "b04", "--current", "b05", "--json"]) == 0
    judged = json.loads(capsys.readouterr().out)[key]
    seen["compare"] = (judged["verdict"], judged["relative_change"])
    assert main(["changes", str(db), "--json"]) == 0
    steps = [s for s in json.loads(capsys.readouterr().out) if s["version_after"] == "b05"]
    seen["changes"] = (steps[0]["verdict"], steps[0]["relative_change"]) if steps else ("none", 0.0)
    with ResultStore.open_read_only(db) as store:
        history = load_histories(store)[0]
        points = history_points(store, key, DECODE.name)
    report = [c for c in history.changes if c.version_after == "b05"]
    seen["report"] = (report[0].verdict, report[0].relative_change) if report else ("none", 0.0)
    gate = judge_history(points[:5], points[5].samples, DECODE, current_version="b05").comparison
    seen["gate"] = (gate.verdict, gate.relative_change)
    return seen


def test_every_door_gives_the_same_verdict(case: tuple[str, Path, str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    name, db, key = case
    seen = _doors(db, key, capsys)
    if name == "drop":
        assert {v for v, _ in seen.values()} == {"regression"}, seen
        changes = [c for _, c in seen.values()]
        # compare judges b05 against b04, the gate against b00..b04, changes and the
        # report the two levels: one step, read to within a point by each
        assert max(changes) - min(changes) < 0.01, seen
        assert all(-0.245 < c < -0.215 for c in changes), seen
    else:
        assert not {v for v, _ in seen.values()} & {"regression", "improvement"}, seen
        assert seen["changes"][0] == seen["report"][0] == "none"


def test_a_step_in_the_history_is_not_called_machine_phases(
        case: tuple[str, Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    # the step itself once counted as spread between sessions: "phase-dominated history:
    # steps under 121% cannot be seen" beside the step that `changes` had just found
    _, db, key = case
    assert main(["history", str(db), key]) == 0
    assert main(["changes", str(db)]) == 0
    assert "phase-dominated" not in capsys.readouterr().out
