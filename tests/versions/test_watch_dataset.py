"""The release watch's dense window (db/runs/watch-b10380-b10499), as data: what it named,
and every A/B judged again from its stored pairs to the verdict the journal kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT
from pytest_tokperf.versions.paired import judge_documents
from pytest_tokperf.versions.watch_journal import JUDGED, AbRow

FOLDER = Path(__file__).resolve().parents[2] / "db" / "runs" / "watch-b10380-b10499"
RELEASES = [10380, 10405, 10423, 10429, 10435, 10441, 10448, 10452, 10453, 10456, 10472,
            10488, 10499]


def _journal() -> list[dict]:
    text = (FOLDER / "journal.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_window_names_b10429_and_the_release_that_undoes_it() -> None:
    summary = json.loads((FOLDER / "summary.json").read_text(encoding="utf-8"))
    assert [r["build"]["number"] for r in summary["releases"]] == RELEASES
    assert not [r for r in summary["releases"] if r.get("skipped")]
    named = {(n["kind"], n["first_bad"]): n for n in summary["named"]}
    assert ("regression", "b10429") in named and ("improvement", "b10448") in named
    assert all(n["confirmed"] for n in named.values())  # every flag a second A/B agrees with
    assert named[("regression", "b10429")]["first"]["rows"][0]["change"] < -0.15
    assert summary["median_wall_s"] <= 600 and summary["busy"] == []


@pytest.mark.parametrize("entry", [e for e in _journal() if e["step"] == "ab"],
                         ids=lambda e: f"{e['control']}-{e['candidate']}-{e['role']}")
def test_each_ab_judges_again_to_its_journalled_verdict(entry: dict) -> None:
    document = json.loads((FOLDER / Path(entry["document"]).name).read_text(encoding="utf-8"))
    again = [AbRow.of(f) for f in judge_documents([document], JUDGED,
                                                  min_effect=PAIRED_MIN_EFFECT)]
    kept = [AbRow(**r) for r in entry["rows"]]
    assert [(r.metric, r.verdict) for r in again] == [(r.metric, r.verdict) for r in kept]
    assert [round(r.change, 6) for r in again] == [round(r.change, 6) for r in kept]
