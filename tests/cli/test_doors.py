"""Every door reads its verdict off the one judge: the same word, and the same change to
within the difference of what each door compares, on shared fixture DBs.

Doors: ``tokperf compare`` (two builds), ``tokperf changes`` (level steps), the report's
change points (``report.report_data``), the pytest gate (``judge_history`` over the
stored points, as ``bench.gate`` calls it), and ``tokperf history``'s noise line; for
imported llama-bench rows also ``tokperf outliers``, each series on the metric it has
(``storage.history.series_metric``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history

from pytest_tokperf.cli.main import main
from pytest_tokperf.report.formats import report_json
from pytest_tokperf.report.report_data import load_histories, store_figures
from pytest_tokperf.stats import DECODE, judge_history
from pytest_tokperf.storage.history import series_history, session_points
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
    assert main(["compare", "--db", str(db), "--baseline", "b04", "--current", "b05", "--json"]) == 0
    judged = json.loads(capsys.readouterr().out)[key]
    seen["compare"] = (judged["verdict"], judged["relative_change"])
    assert main(["changes", "--db", str(db), "--json"]) == 0
    steps = [s for s in json.loads(capsys.readouterr().out) if s["version_after"] == "b05"]
    seen["changes"] = (steps[0]["verdict"], steps[0]["relative_change"]) if steps else ("none", 0.0)
    with ResultStore.open_read_only(db) as store:
        history = load_histories(store)[0]
        points = session_points(series_history(store, key, DECODE.name))
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


def test_a_drop_the_memory_went_with_is_withheld_by_compare_changes_and_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the 23% drop again, every run after it probed at 37 GB/s against 60 before: compare
    # says inconclusive, changes and the report list no step (the gate: test_gate_moved)
    db = tmp_path / "r.db"
    store, key = fill_history(db, DROP, probed=[60.0] * 5 + [37.0] * 3)
    store.close()
    seen = _doors(db, key, capsys)
    assert seen["compare"][0] == "inconclusive", seen
    assert seen["changes"][0] == seen["report"][0] == "none", seen
    assert main(["compare", "--db", str(db), "--baseline", "b04", "--current", "b05"]) == 0
    assert "the machine's memory moved: it read 37.0 GB/s" in capsys.readouterr().out
    # the same drop on the memory of its history is a regression at every door
    db2 = tmp_path / "same.db"
    store, key = fill_history(db2, DROP, probed=60.0)
    store.close()
    assert {v for v, _ in _doors(db2, key, capsys).values()} == {"regression"}


def test_a_step_in_the_history_is_not_called_machine_phases(
        case: tuple[str, Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    # the step itself once counted as spread between sessions: "phase-dominated history:
    # steps under 121% cannot be seen" beside the step that `changes` had just found
    _, db, key = case
    assert main(["history", "--db", str(db), key]) == 0
    assert main(["changes", "--db", str(db)]) == 0
    assert "phase-dominated" not in capsys.readouterr().out


LLAMA_BENCH = Path(__file__).parents[1] / "expected" / "llama_bench" / "readme.json"
SLOWER = {"pp": 0.90, "tg": 0.77}
"""The step from b5161 to b5162: prefill 10% slower, decode 23% slower."""


@pytest.fixture
def imported(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """llama-bench's README run (pp512 and tg128, 5 samples each) imported as four builds,
    the last two slower; -> the DB and each kind's series key."""
    files = []
    for i in range(4):
        rows = json.loads(LLAMA_BENCH.read_text(encoding="utf-8"))
        for row in rows:
            factor = SLOWER["tg" if row["n_gen"] else "pp"] if i >= 2 else 1.0
            row.update(build_number=5160 + i, build_commit=f"c{i:07d}",
                       test_time=row["test_time"].replace("2025-04-24", f"2025-05-0{i + 1}"),
                       samples_ts=[t * factor for t in row["samples_ts"]],
                       avg_ts=row["avg_ts"] * factor)
        files.append(tmp_path / f"b{5160 + i}.json")
        files[-1].write_text(json.dumps(rows), encoding="utf-8")
    db = tmp_path / "lb.db"
    assert main(["import-llama-bench", *map(str, files), "--db", str(db)]) == 0
    with ResultStore.open_read_only(db) as store:
        keys = {("pp" if "pp512" in r.test_id else "tg"): r.series_key
                for r in store.latest_per_series()}
    return db, keys


def _imported_doors(db: Path, capsys: pytest.CaptureFixture[str]
                    ) -> dict[str, dict[str, tuple[str, str, float]]]:
    """Per door, per series key: (metric, verdict, change) for the step b5161 -> b5162."""
    seen: dict[str, dict[str, tuple[str, str, float]]] = {}
    assert main(["compare", "--db", str(db), "--baseline", "b5161", "--current", "b5162",
                 "--json"]) == 0
    seen["compare"] = {k: (v["metric"], v["verdict"], v["relative_change"])
                       for k, v in json.loads(capsys.readouterr().out).items()}
    assert main(["changes", "--db", str(db), "--json"]) == 0
    seen["changes"] = {s["series_key"]: (s.get("metric"), s["verdict"], s["relative_change"])
                       for s in json.loads(capsys.readouterr().out)
                       if s["version_after"].startswith("b5162")}
    with ResultStore.open_read_only(db) as store:
        histories = load_histories(store)
        figures = store_figures(store)
    document = report_json(figures, [c for h in histories for c in h.series_changes()])
    seen["report"] = {c["series_key"]: (c["metric"], c["verdict"], c["relative_change"])
                      for c in document["changes"] if c["current"].startswith("b5162")}
    seen["history"] = {}
    for key in seen["compare"]:
        assert main(["history", "--db", str(db), key, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        medians = {run["engine_version"]: statistics.median(run["samples"])
                   for run in shown["runs"]}
        change = medians["b5162"] / medians["b5161"] - 1
        seen["history"][key] = (shown["metric"], seen["compare"][key][1], change)
        assert "fewer than 2 repetitions" not in shown["noise"], shown["noise"]
        assert shown["noise"].startswith(f"{shown['metric']} CV ")
    return seen


def test_imported_llama_bench_rows_are_judged_on_their_own_metric_at_every_door(
        imported: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    # pp rows (n_gen = 0) had no decode figure, so every door that read decode dropped
    # them: history said "fewer than 2 repetitions per run", compare and the report had
    # no pp series at all
    db, keys = imported
    seen = _imported_doors(db, capsys)
    for kind, metric, change in (("pp", "prefill", -0.10), ("tg", "decode", -0.23)):
        by_door = {door: found.get(keys[kind]) for door, found in seen.items()}
        assert all(v is not None for v in by_door.values()), by_door
        assert {v[0] for v in by_door.values() if v} == {metric}, by_door
        assert {v[1] for v in by_door.values() if v} == {"regression"}, by_door
        changes = [v[2] for v in by_door.values() if v]
        assert max(changes) - min(changes) < 0.001, by_door
        assert changes[0] == pytest.approx(change, abs=0.001), by_door
    # outliers judge decode efficiency only: the tg build that fell, by the same change
    assert main(["outliers", "--db", str(db), "--json"]) == 0
    fell = [o for o in json.loads(capsys.readouterr().out) if o["build"].startswith("b5162")]
    assert [(o["kind"], "pp512" in o["test_id"]) for o in fell] == [("build-regression", False)]
    assert fell[0]["tokens_per_s"] / fell[0]["earlier_best_tokens_per_s"] - 1 == \
        pytest.approx(seen["compare"][keys["tg"]][2], abs=0.001)


def test_a_prefill_row_is_never_held_against_the_decode_ceiling(
        imported: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    db, keys = imported
    with ResultStore.open_read_only(db) as store:
        figures = {f.series_key: f for f in store_figures(store)}
        histories = {h.series_key: h for h in load_histories(store)}
    pp, tg = figures[keys["pp"]], figures[keys["tg"]]
    assert pp.ceiling_decode_tokens_per_s is None and pp.efficiency is None
    assert histories[keys["pp"]].ceiling_decode_tokens_per_s is None
    assert tg.ceiling_decode_tokens_per_s is not None and tg.efficiency is not None
    assert histories[keys["tg"]].ceiling_decode_tokens_per_s is not None
    assert main(["history", "--db", str(db), "--json"]) == 0
    listed = {r["series_key"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[keys["pp"]]["metric"] == "prefill"
    assert listed[keys["pp"]]["judged_efficiency"]["value"] is None
    assert main(["outliers", "--db", str(db), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert {o["test_id"] for o in found} == {tg.test_id}  # the tg builds that fell 23%


def test_no_ttft_or_chars_per_s_is_shown_for_an_imported_row(
        imported: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # llama-bench sends no request and decodes no text: the import once stored 1/ts as a
    # tg row's TTFT (8 ms), prompt/ts as a pp row's, and 0 characters (chars/s 0.0)
    db, keys = imported
    with ResultStore.open_read_only(db) as store:
        document = report_json(store_figures(store))
        sample_ttfts = store.tuples("SELECT DISTINCT ttft_s, text_chars FROM samples")
    assert sample_ttfts == [(None, None)]
    for result in document["results"]:
        assert result["ttft_s"] is None and result["chars_per_s"] is None, result
    out = tmp_path / "x.json"
    assert main(["export", "--db", str(db), "--format", "json", "-o", str(out)]) == 0
    for row in json.loads(out.read_text(encoding="utf-8")):
        assert row["ttft_s_median"] is None and row["chars_per_s_median"] is None
    capsys.readouterr()
    for kind in ("pp", "tg"):
        assert main(["history", "--db", str(db), keys[kind], "--json"]) == 0
        assert {run["ttft_s"] for run in json.loads(capsys.readouterr().out)["runs"]} == {None}
        assert main(["history", "--db", str(db), keys[kind]]) == 0
        lines = capsys.readouterr().out.splitlines()
        column = lines[1].index("TTFT ms")
        assert {line[column:column + 7].strip() for line in lines[3:7]} == {"-"}, lines


def test_a_report_of_two_builds_judges_them_as_compare_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # two builds are too short a history for a step: the report said "No regressions or
    # improvements found." where compare called tg128 -23% and pp512 -10% a regression
    files = []
    for i, factor in enumerate((1.0, None)):
        rows = json.loads(LLAMA_BENCH.read_text(encoding="utf-8"))
        for row in rows:
            f = factor or SLOWER["tg" if row["n_gen"] else "pp"]
            row.update(build_number=5160 + i, build_commit=f"c{i:07d}",
                       test_time=row["test_time"].replace("2025-04-24", f"2025-05-0{i + 1}"),
                       samples_ts=[t * f for t in row["samples_ts"]], avg_ts=row["avg_ts"] * f)
        files.append(tmp_path / f"b{5160 + i}.json")
        files[-1].write_text(json.dumps(rows), encoding="utf-8")
    db = tmp_path / "two.db"
    assert main(["import-llama-bench", *map(str, files), "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["compare", "--db", str(db), "--baseline", "b5160", "--current", "b5161",
                 "--json"]) == 0
    compared = {k: (v["verdict"], v["relative_change"])
                for k, v in json.loads(capsys.readouterr().out).items()}
    assert sorted(compared.values()) == [("regression", pytest.approx(-0.23, abs=0.001)),
                                         ("regression", pytest.approx(-0.10, abs=0.001))]
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.json")]) == 0
    document = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert {c["series_key"]: (c["verdict"], c["relative_change"])
            for c in document["changes"]} == compared
    assert {(c["kind"], c["baseline"], c["current"]) for c in document["changes"]} == {
        ("compare", "b5160", "b5161")}
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.md")]) == 0
    md = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "2 regressions" in md and "decode −23.0%" in md and "prefill −10.0%" in md
    # two runs a build: the history finds the step too; the report lists it once, as compare's
    fill_history(tmp_path / "runs.db", [("b1", 100.0), ("b1", 100.0), ("b2", 80.0), ("b2", 80.0)])[
        0].close()
    assert main(["report", "--db", str(tmp_path / "runs.db"), "-o", str(tmp_path / "s.json")]) == 0
    changes = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))["changes"]
    assert [(c["kind"], c["verdict"]) for c in changes] == [("compare", "regression")]
