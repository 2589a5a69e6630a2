"""Nothing lost (xdist writers, SIGKILL) and moving results: export, import, merge."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

from pytest_tokperf.errors import StorageError
from pytest_tokperf.report.files import export_results
from pytest_tokperf.storage.exchange import (
    Added,
    dump_run,
    import_datasets,
    merge,
    write_reference_run,
)
from pytest_tokperf.storage.store import ResultStore
from tests.support.storage_factory import (
    make_engine,
    make_result,
    make_run,
    record_kwargs,
)

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = str(ROOT)


def _counts(path: Path) -> tuple[int, ...]:
    with closing(sqlite3.connect(path)) as conn:
        tables = ("runs", "environments", "series", "results", "samples")
        return tuple(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables)


def _fill(path: Path, run_id: str, n: int, build: str = "abc1234") -> list[int]:
    with ResultStore.open(path) as store:
        store.begin_run(make_run(run_id))
        ids = [
            store.record(
                run_id, f"t{i}", make_result(engine=make_engine(build=build)), **record_kwargs()
            ).result_id
            for i in range(n)
        ]
        store.finish_run(run_id)
    return ids


def test_xdist_workers_share_one_db_without_loss(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db = tmp_path / "shared.db"
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)
    monkeypatch.setenv("TOKPERF_TEST_DB", str(db))
    pytester.makepyfile(
        test_writers="""
        import os
        from pathlib import Path
        import pytest
        from tests.support.storage_factory import make_result, make_run, record_kwargs
        from pytest_tokperf.storage.store import ResultStore

        @pytest.fixture(scope="session")
        def store():
            opened = ResultStore.open(Path(os.environ["TOKPERF_TEST_DB"]))
            opened.begin_run(make_run("shared-run"))
            yield opened
            opened.close()

        @pytest.mark.parametrize("i", range(120))
        def test_write(store, i):
            for j in range(3):
                store.record("shared-run", f"t{i}-{j}", make_result(), **record_kwargs())
        """
    )
    result = pytester.runpytest_subprocess("-n", "4", "-p", "no:tokperf", "-q")
    result.assert_outcomes(passed=120)
    runs, envs, series, results, samples = _counts(db)
    assert (runs, envs, series, results, samples) == (1, 1, 360, 360, 1080)
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(DISTINCT test_id) FROM results").fetchone()[0] == 360


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tests.support.storage_factory import make_result, make_run, record_kwargs
    from pytest_tokperf.storage.store import ResultStore

    store = ResultStore.open(Path(sys.argv[1]))
    store.begin_run(make_run("killed"))
    i = 0
    while True:
        result_id = store.record("killed", f"t{i}", make_result(), **record_kwargs()).result_id
        print(result_id, flush=True)
        i += 1
    """
)


def test_sigkill_keeps_every_returned_record(tmp_path: Path) -> None:
    db = tmp_path / "killed.db"
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    ) as child:
        assert child.stdout is not None
        returned = [int(child.stdout.readline()) for _ in range(40)]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stored = {row[0] for row in conn.execute("SELECT id FROM results")}
        assert set(returned) <= stored
        incomplete = conn.execute(
            "SELECT count(*) FROM results r WHERE (SELECT count(*) FROM samples s"
            " WHERE s.result_id = r.id) != 3"
        ).fetchone()[0]
        assert incomplete == 0
    with ResultStore.open(db) as store:
        assert store.runs()[0].results == len(stored)


def test_export_csv_and_json(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    ids = _fill(db, "run-a", 2)
    assert export_results(db, "csv", tmp_path / "out.csv") == 2
    with (tmp_path / "out.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["result_id"]) for r in rows] == ids
    first = rows[0]
    assert (first["run_id"], first["test_id"], first["engine_build"]) == ("run-a", "t0", "abc1234")
    assert (first["hardware_driver"], first["host"], first["verdict"]) == (
        "570.86",
        "bench-host",
        "pass",
    )
    assert float(first["decode_tokens_per_s_median"]) == 100.0
    assert json.loads(first["series_text"])["test_id"] == "t0"

    assert export_results(db, "json", tmp_path / "out.json") == 2
    data = json.loads((tmp_path / "out.json").read_text())
    assert set(data[0]) == set(first)
    assert data[0]["notes"] == ["warm cache", "second note"]
    assert data[0]["engine_settings"] == {
        "batch_size": "2048",
        "flash_attn": "true",
        "kv_type": "q8_0",
    }
    assert data[1]["model_content_hash"] == "f" * 64


def test_dump_run_and_import_round_trip(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    [result_id] = _fill(source, "run-a", 1)
    text = dump_run(source, "run-a")
    lines = text.splitlines()
    assert len(lines) == 2
    assert all(line == json.dumps(json.loads(line), sort_keys=True) for line in lines)
    assert json.loads(lines[0])["format"] == "tokperf-run/1"

    path = tmp_path / "run-a.jsonl"
    path.write_text(text)
    target = tmp_path / "b.db"
    assert import_datasets(target, [path]) == Added(runs=1, results=1, samples=3)
    assert import_datasets(target, [path]) == Added()
    with ResultStore.open(source) as a, ResultStore.open(target) as b:
        original, imported = a.result(result_id), b.result(b.runs()[0].results)
        assert imported.result == original.result
        assert (imported.run, imported.model, imported.hardware, imported.ceiling) == (
            original.run,
            original.model,
            original.hardware,
            original.ceiling,
        )
        assert (imported.created_at, imported.series_key) == (
            original.created_at,
            original.series_key,
        )
        assert b.runs()[0].finished_at == a.runs()[0].finished_at
    assert dump_run(target, "run-a") == text


def test_import_json_export_without_samples(tmp_path: Path) -> None:
    source = tmp_path / "a.db"
    _fill(source, "run-a", 2)
    export_results(source, "json", tmp_path / "out.json")
    target = tmp_path / "b.db"
    assert import_datasets(target, [tmp_path / "out.json"]) == Added(runs=1, results=2, samples=0)
    assert import_datasets(target, [tmp_path / "out.json"]) == Added()
    assert _counts(target) == (1, 1, 2, 2, 0)
    with ResultStore.open(target) as store:
        assert store.latest_per_series()[0].engine_build == "abc1234"


def test_import_rejects_bad_files_with_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"environment": {}, "result": {}, "samples": [], "series": "{}"}\n')
    with pytest.raises(
        StorageError, match=r"bad\.jsonl:1: not a tokperf run line: a result before"
    ):
        import_datasets(tmp_path / "x.db", [bad])
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"not": "a list"}')
    with pytest.raises(StorageError, match=r"is not a `tokperf export --format json` file"):
        import_datasets(tmp_path / "x.db", [bad_json])


def test_merge_dedupes_by_run_and_environment(tmp_path: Path) -> None:
    a, b, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "out.db"
    _fill(a, "run-a", 3)
    _fill(b, "run-b", 2, build="def5678")
    [stray] = _fill(b, "run-a", 1)
    assert merge(a, b, out) == Added(runs=2, results=6, samples=18)
    counts = _counts(out)
    assert counts == (2, 2, 3, 6, 18)
    assert merge(a, b, out) == Added()
    assert merge(b, a, out) == Added()
    assert _counts(out) == counts
    with pytest.raises(StorageError, match="is also an input"):
        merge(a, out, out)
    with pytest.raises(StorageError, match="does not exist"):
        merge(a, tmp_path / "missing.db", out)
    assert stray


def test_import_a_folder_of_reference_runs(tmp_path: Path) -> None:
    source, runs_dir = tmp_path / "a.db", tmp_path / "runs"
    _fill(source, "run-a", 2)
    _fill(source, "run-b", 1)
    written = [write_reference_run(source, r, runs_dir) for r in ("run-a", "run-b")]
    assert [p.name for p in written] == ["run-a.jsonl", "run-b.jsonl"]
    target = tmp_path / "loaded.db"
    assert import_datasets(target, [runs_dir]) == Added(runs=2, results=3, samples=9)
    assert import_datasets(target, [runs_dir]) == Added()
    assert _counts(target) == _counts(source)


def test_the_gates_verdicts_travel_with_their_results(tmp_path: Path) -> None:
    from tests.support.storage_factory import fill_history, judge_every_result

    store, _ = fill_history(tmp_path / "main.db", [("b00", 100.0), ("b01", 77.0)])
    assert judge_every_result(store) == 2
    store.close()
    merge(tmp_path / "main.db", None, tmp_path / "copy.db")
    runs = tmp_path / "runs"
    for run_id in ("run-0", "run-1"):
        write_reference_run(tmp_path / "main.db", run_id, runs)
        import_datasets(tmp_path / "imported.db", [runs / f"{run_id}.jsonl"])
    for db in ("copy.db", "imported.db"):
        with ResultStore.open_read_only(tmp_path / db) as copy:
            verdicts = copy.gate_verdicts(r["id"] for r in copy.query("SELECT id FROM results"))
            assert sorted(v.verdict for vs in verdicts.values() for v in vs) == \
                ["regression", "regression"], db
            assert all(v.reason.startswith("decode -23.0%") for vs in verdicts.values() for v in vs)
