"""A fleet writes one dataset: pytest sessions (subprocesses on the fake llama-server)
writing one PostgreSQL database at once, a writer killed mid-run, a URL with a password.

The sessions are real ``python -m pytest`` processes: each holds its run in one
transaction on the shared server, as runners on many machines would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from tests.support.fake_faults import FakeFaultyLlama
from tests.support.postgres import PG_PASSWORD, PgCluster

from pytest_tokperf.cli.main import main
from pytest_tokperf.storage.exchange import merge
from pytest_tokperf.storage.location import PgUrl
from pytest_tokperf.storage.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 8
RESULTS = 50

FIFTY = f"""
import pytest

@pytest.mark.parametrize("i", range({RESULTS}))
def test_bench(tok_bench, i):
    tok_bench(prompt_tokens=4, generate_tokens=4, repetitions=2, warmup=0)
"""

KILLED = """
import os
import signal

import pytest

@pytest.mark.parametrize("i", range(4))
def test_bench(tok_bench, i):
    tok_bench(prompt_tokens=4, generate_tokens=4, repetitions=2, warmup=0)
    if i == 3:  # three results in the run's open transaction, a fourth being stored
        os.kill(os.getpid(), signal.SIGKILL)
"""


def _session(folder: Path, url: str, db: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "test_it.py", "-q", "-p", "no:cacheprovider",
         "--tokperf-url", url, "--tokperf-bandwidth", "30GB/s", "--tokperf-db", db, *args],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _sessions(tmp_path: Path, url: str, dbs: list[str]) -> None:
    folders = []
    for i, _ in enumerate(dbs):
        folder = tmp_path / f"runner-{i}"  # each runner its own folder, as on its machine
        folder.mkdir(parents=True)
        (folder / "test_it.py").write_text(FIFTY, encoding="utf-8")
        folders.append(folder)
    procs = [_session(folder, url, db) for folder, db in zip(folders, dbs, strict=True)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out[-3000:]
        assert f"results: {RESULTS} stored in" in out


def _canonical(store: ResultStore) -> list[tuple[object, ...]]:
    """A history's rows without what differs between two measurements of the same thing
    (ids, times, figures): per result its series, test, engine, hardware, model, host."""
    return sorted(store.tuples(
        "SELECT series_key, test_id, engine_name, engine_version, engine_build,"
        " hardware_name, model_file_name, model_content_hash, host, repetitions"
        " FROM series_history"))


def _full(store: ResultStore) -> list[tuple[object, ...]]:
    """Every column of every history row but the result id."""
    return sorted(tuple(v for k, v in row.items() if k != "result_id")
                  for row in store.query("SELECT * FROM series_history"))


def test_eight_sessions_write_one_database(pg_url: str, tmp_path: Path) -> None:
    with FakeFaultyLlama("ok") as fake:
        _sessions(tmp_path / "pg", fake.url, [pg_url] * SESSIONS)
        _sessions(tmp_path / "lite", fake.url,
                  [str(tmp_path / f"runner-{i}.db") for i in range(SESSIONS)])
    with psycopg.connect(pg_url) as conn:
        count, ids, runs = conn.execute(
            "SELECT count(*), count(DISTINCT id), count(DISTINCT run_id) FROM results").fetchone()
        per_run = conn.execute("SELECT count(*) FROM results GROUP BY run_id").fetchall()
        unfinished = conn.execute("SELECT count(*) FROM runs WHERE finished_at IS NULL"
                                  ).fetchone()
        samples = conn.execute("SELECT count(*) FROM samples").fetchone()
    assert (count, ids, runs) == (SESSIONS * RESULTS, SESSIONS * RESULTS, SESSIONS)
    assert per_run == [(RESULTS,)] * SESSIONS and unfinished == (0,)
    assert samples == (SESSIONS * RESULTS * 2,)
    merged = tmp_path / "merged.db"
    for i in range(SESSIONS):
        merge(tmp_path / f"runner-{i}.db", None, merged)
    fleet_copy = tmp_path / "fleet.db"
    merge(PgUrl(pg_url), None, fleet_copy)  # the fleet's store as a file Datasette reads
    with ResultStore.open_read_only(PgUrl(pg_url)) as pg, \
            ResultStore.open_read_only(merged) as lite, \
            ResultStore.open_read_only(fleet_copy) as copy:
        assert len(_canonical(pg)) == SESSIONS * RESULTS
        assert _canonical(pg) == _canonical(lite)
        assert _full(pg) == _full(copy)


def test_a_killed_writer_leaves_no_partial_run(pg_url: str, tmp_path: Path) -> None:
    (tmp_path / "test_it.py").write_text(KILLED, encoding="utf-8")
    with FakeFaultyLlama("ok") as fake:
        proc = _session(tmp_path, fake.url, pg_url)
        out = proc.communicate(timeout=600)[0]
    assert proc.returncode == -signal.SIGKILL, out[-2000:]
    with psycopg.connect(pg_url) as conn:
        for table in ("runs", "results", "samples", "gate_verdicts"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    journals = list((tmp_path / ".tokperf").glob("postgresql-*.journal.jsonl"))
    assert len(journals) == 1  # the measured results are kept: import them
    assert main(["import", "--db", pg_url, str(journals[0])]) == 0
    with ResultStore.open_read_only(PgUrl(pg_url)) as store:
        assert [r.results for r in store.runs()] == [4]


def test_a_password_in_the_url_is_shown_and_stored_nowhere(
    pg_cluster: PgCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    url = pg_cluster.url(pg_cluster.create_database(), password=True)
    (tmp_path / "test_it.py").write_text(FIFTY.replace(f"range({RESULTS})", "range(2)"),
                                         encoding="utf-8")
    with FakeFaultyLlama("ok") as fake:
        proc = _session(tmp_path, fake.url, url, "--tokperf-report", "r.json",
                        "--tokperf-report", "r.md", "--tokperf-report", "r.html",
                        "--junitxml", "junit.xml")
        out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out[-2000:]
    assert f"2 stored in postgresql://127.0.0.1:{pg_cluster.port}/" in out
    for verb in (["history", "--db", url], ["export", "--db", url, "-o", str(tmp_path / "e.csv")],
                 ["merge", url, "-o", str(tmp_path / "copy.db")]):
        assert main(verb) == 0
    shown = capsys.readouterr()
    files = b"\n".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        rows = "".join(str(conn.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    assert "results" in tables and "tokperf-SECRET" not in rows
    for text in (out, shown.out, shown.err, files.decode(errors="replace"), rows):
        assert PG_PASSWORD not in text


def test_a_bad_url_is_a_usage_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest("--tokperf-url", "http://127.0.0.1:9",
                                "--tokperf-db", "postgresql://ci:hunter2@db.lan:port/tokperf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tokperf-db from option --tokperf-db "
                                 "'postgresql://db.lan:port/tokperf' is not a PostgreSQL URL*"])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()


def test_an_ephemeral_runner_is_judged_against_the_fleets_runs(pg_url: str,
                                                               tmp_path: Path) -> None:
    outs = []
    with FakeFaultyLlama("ok") as fake:
        for runner in ("first", "ephemeral"):  # nothing local survives between them
            folder = tmp_path / runner
            folder.mkdir()
            (folder / "test_it.py").write_text(
                FIFTY.replace(f"range({RESULTS})", "range(2)").replace("repetitions=2",
                                                                       "repetitions=3"),
                encoding="utf-8")
            proc = _session(folder, fake.url, pg_url)
            outs.append(proc.communicate(timeout=600)[0])
            assert proc.returncode == 0, outs[-1][-2000:]
            assert not list(folder.glob(".tokperf/*.journal.jsonl"))  # committed
    assert "gate against stored history" not in outs[0]
    assert "gate against stored history" in outs[1]
