"""The same data on both backends reads the same: ``tokperf history``, ``compare``,
``changes`` and ``accept`` print the same text (and JSON), and the gate gives the same
verdicts, whether the DB is an SQLite file or a PostgreSQL database."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history, result_at

from pytest_tokperf.bench.gate import Gate
from pytest_tokperf.cli.main import main
from pytest_tokperf.settings import Baseline
from pytest_tokperf.storage.exchange import merge
from pytest_tokperf.storage.location import PgUrl
from pytest_tokperf.storage.store import ResultStore

LEVELS = [("b1", 100.0), ("b1", 100.4), ("b1", 99.8), ("b2", 90.0), ("b2", 90.5),
          ("b2", 89.9), ("b3", 90.2)]


@pytest.fixture
def both(pg_url: str, tmp_path: Path) -> tuple[str, str, str]:
    """(SQLite file, PostgreSQL URL, series key) holding the same two series."""
    lite = tmp_path / "lite.db"
    store, key = fill_history(lite, LEVELS, finish=True)
    store.close()
    fill_history(tmp_path / "other.db", LEVELS[:4], seed=3, test_id="t::other",
                 finish=True)[0].close()
    merge(lite, tmp_path / "other.db", tmp_path / "all.db")
    for target in (tmp_path / "same.db", PgUrl(pg_url)):  # the same rows, ids, times
        merge(tmp_path / "all.db", None, target)
    return str(tmp_path / "same.db"), pg_url, key


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("verb", [
    ["history"], ["history", "t::decode"], ["history", "--json"],
    ["history", "t::decode", "--json"],
    ["compare", "--baseline", "b1", "--current", "b2"],
    ["compare", "--baseline", "b1", "--current", "b2", "--json"],
    ["changes"], ["changes", "--json"], ["changes", "t::other"],
])
def test_verbs_print_the_same_on_both_backends(both: tuple[str, str, str], verb: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    lite, pg, _ = both
    on_lite = _out(capsys, [verb[0], "--db", lite, *verb[1:]])
    on_pg = _out(capsys, [verb[0], "--db", pg, *verb[1:]])
    assert on_lite[0] == 0 and on_lite[1]
    assert on_pg == on_lite


def test_accept_then_history_read_the_same(both: tuple[str, str, str],
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    lite, pg, _ = both
    # the acceptance's time is printed: the same on both, whatever the clock does between
    monkeypatch.setattr("pytest_tokperf.storage.store.utc_now",
                        lambda: "2026-02-01T00:00:00.000000+00:00")
    outs = []
    for db in (lite, pg):
        code, accepted, _ = _out(capsys, ["accept", "--db", db, "t::decode", "--reason",
                                          "new kernel", "--by", "ci"])
        assert code == 0
        outs.append((accepted, _out(capsys, ["history", "--db", db, "t::decode"])))
    assert outs[0] == outs[1]
    assert "(accepted)" in outs[1][1][1]


def test_the_gate_judges_the_same_on_both_backends(both: tuple[str, str, str]) -> None:
    lite, pg, key = both
    samples = result_at("b4", 80.0, random.Random(9)).samples
    verdicts = []
    for location in (Path(lite), PgUrl(pg)):
        with ResultStore.open_read_only(location) as store:
            gate = Gate(Baseline("history"))
            findings = gate.judge(store, test_id="t::decode", series_key=key, samples=samples,
                                  current_build="b4", run_id=None)
            verdicts.append(gate.finish(findings))
    assert verdicts[0] == verdicts[1]
    assert {f.comparison.verdict for f in verdicts[1][0]} >= {"regression"}


def test_every_other_reading_verb_works_on_postgres(both: tuple[str, str, str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    lite, pg, _ = both
    for db, name in ((lite, "lite"), (pg, "pg")):
        out = tmp_path / name
        for verb in (["save-reference", "--run", "run-0", "-d", str(out / "runs")],
                     ["export", "--format", "json", "-o", str(out / "e.json")],
                     ["report", "-o", str(out / "r.html")], ["outliers"]):
            assert main([verb[0], "--db", db, *verb[1:]]) == 0, verb
    capsys.readouterr()
    for name in ("runs/run-0.jsonl", "e.json"):
        assert (tmp_path / "lite" / name).read_text() == (tmp_path / "pg" / name).read_text()
    assert (tmp_path / "pg" / "r.html").stat().st_size > 1000
