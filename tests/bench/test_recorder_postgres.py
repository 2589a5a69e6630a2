"""The recorder on a PostgreSQL store: a run is committed when it closes, and a run the
server threw away mid-session (its connection ended) loses no result: the journal keeps
every one, the last line says how to import it, and importing it restores them."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from tests.support.postgres import PgCluster
from tests.support.storage_factory import make_hardware, make_result

from pytest_tokperf.bench.recorder import Recorder
from pytest_tokperf.cli.main import main
from pytest_tokperf.storage.location import PgUrl
from pytest_tokperf.storage.postgres import PostgresBackend
from pytest_tokperf.storage.store import ResultStore


def _record(recorder: Recorder, test_id: str) -> object:
    return recorder.record(test_id, make_result(), None, "pass", model_path=None,
                           hardware=make_hardware())


def test_a_run_is_committed_when_the_recorder_closes(pg_url: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    recorder = Recorder.open(PgUrl(pg_url))
    assert _record(recorder, "t::a") is not None and _record(recorder, "t::b") is not None
    with ResultStore.open_read_only(PgUrl(pg_url)) as other:
        assert other.runs() == []
    assert recorder.close() is None
    with ResultStore.open_read_only(PgUrl(pg_url)) as other:
        assert [r.results for r in other.runs()] == [2]
    assert not list(tmp_path.glob(".tokperf/*.journal.jsonl"))


def test_a_run_the_server_dropped_is_kept_in_the_journal(
    pg_cluster: PgCluster, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    recorder = Recorder.open(PgUrl(pg_url))
    _record(recorder, "t::a")
    assert recorder.store is not None and isinstance(recorder.store.backend, PostgresBackend)
    pid = recorder.store.backend.conn.info.backend_pid
    pg_cluster.admin(f"SELECT pg_terminate_backend({pid})")
    assert _record(recorder, "t::b") is None  # the connection is gone
    lost = recorder.close()
    assert lost is not None and "2 result(s) could not be stored" in lost
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone() == (0,)
    journals = list(tmp_path.glob(".tokperf/postgresql-*.journal.jsonl"))
    assert len(journals) == 1 and str(journals[0]) in lost
    assert main(["import", "--db", pg_url, str(journals[0])]) == 0
    with ResultStore.open_read_only(PgUrl(pg_url)) as store:
        assert [r.results for r in store.runs()] == [2]
