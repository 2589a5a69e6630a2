"""The PostgreSQL store against a real throwaway server (``tests.support.postgres``):
the same schema and reads as SQLite, a run held in one transaction, ids never reused,
moving data both ways, URLs validated and their passwords shown nowhere."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psycopg
import pytest

from pytest_tokperf.errors import ConfigError, StorageError
from pytest_tokperf.report.files import export_results
from pytest_tokperf.storage.exchange import import_datasets, merge, read_runs
from pytest_tokperf.storage.location import PgUrl, db_location, parse_pg_url
from pytest_tokperf.storage.schema import SCHEMA_VERSION
from pytest_tokperf.storage.store import ResultStore
from tests.support.postgres import PG_PASSWORD, PgCluster
from tests.support.storage_factory import (
    fill_history,
    judge_every_result,
    make_result,
    make_run,
    record_kwargs,
)

LEVELS = [("b1", 100.0), ("b1", 100.5), ("b2", 90.0), ("b2", 90.4), ("b3", 91.0)]


def _columns(url: str, table: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position", [table]).fetchall()]


def test_the_schema_is_the_sqlite_schema(pg_url: str, tmp_path: Path) -> None:
    ResultStore.open(PgUrl(pg_url)).close()
    with ResultStore.open(tmp_path / "r.db") as lite, ResultStore.open(PgUrl(pg_url)) as pg:
        for table in ("runs", "environments", "series", "results", "samples", "gate_verdicts",
                      "acceptances", "series_history", "latest_results"):
            assert pg.columns(table) == lite.columns(table), table
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM tokperf_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_record_and_read_back(pg_url: str) -> None:
    url = PgUrl(pg_url)
    result = make_result()
    with ResultStore.open(url, check_writable=True) as store:
        store.begin_run(make_run())
        stored = store.record("run-1", "t::x", result, **record_kwargs())
        back = store.result(stored.result_id)
        assert back.result == dataclasses.replace(result, engine=back.result.engine)
        assert back.result.samples == result.samples
        store.finish_run("run-1")
    with ResultStore.open_read_only(url) as store:
        assert [r.run.run_id for r in store.runs()] == ["run-1"]
        assert store.history(stored.series_key)[0].result_id == stored.result_id


def test_a_run_is_invisible_until_it_finishes(pg_url: str) -> None:
    url = PgUrl(pg_url)
    writer = ResultStore.open(url)
    writer.begin_run(make_run())
    writer.record("run-1", "t::x", make_result(), **record_kwargs())
    with ResultStore.open_read_only(url) as reader:
        assert reader.runs() == []
        assert reader.latest_per_series() == []
    writer.finish_run("run-1")
    with ResultStore.open_read_only(url) as reader:
        assert [r.results for r in reader.runs()] == [1]
    writer.close()


def test_an_unfinished_run_is_rolled_back_and_its_ids_never_reused(pg_url: str) -> None:
    url = PgUrl(pg_url)
    with ResultStore.open(url) as store:
        store.begin_run(make_run("lost"))
        lost = store.record("lost", "t::x", make_result(), **record_kwargs()).result_id
    with ResultStore.open(url) as store:
        assert store.runs() == []
        store.begin_run(make_run("kept"))
        kept = store.record("kept", "t::x", make_result(), **record_kwargs()).result_id
        store.finish_run("kept")
    assert kept > lost


def test_a_failed_write_undoes_only_itself(pg_url: str) -> None:
    with ResultStore.open(PgUrl(pg_url)) as store:
        store.begin_run(make_run())
        with pytest.raises(StorageError, match="call begin_run"):
            store.record("nope", "t::x", make_result(), **record_kwargs())
        store.record("run-1", "t::x", make_result(), **record_kwargs())
        store.finish_run("run-1")
        assert [r.results for r in store.runs()] == [1]


def test_merge_both_ways_keeps_every_row(pg_url: str, tmp_path: Path) -> None:
    lite, key = fill_history(tmp_path / "a.db", LEVELS, finish=True)
    assert judge_every_result(lite) == 5  # the gate's verdicts travel too
    lite.close()
    url = PgUrl(pg_url)
    first = merge(tmp_path / "a.db", None, url)
    assert (first.runs, first.results, first.samples) == (5, 5, 25)
    assert merge(tmp_path / "a.db", None, url).results == 0  # nothing twice
    merge(url, None, tmp_path / "back.db")
    with ResultStore.open_read_only(tmp_path / "a.db") as a, \
            ResultStore.open_read_only(tmp_path / "back.db") as b, \
            ResultStore.open_read_only(url) as pg:
        bundles = [list(read_runs(s)) for s in (a, b, pg)]
        assert bundles[0] == bundles[1] == bundles[2]
        assert all(len(r.gate_verdicts) == 1 for run in bundles[2] for r in run.results)
        assert [h.decode_tokens_per_s for h in pg.history(key)] == \
            [h.decode_tokens_per_s for h in a.history(key)]


def test_export_and_import_through_postgres(pg_url: str, tmp_path: Path) -> None:
    fill_history(tmp_path / "a.db", LEVELS, finish=True)[0].close()
    url = PgUrl(pg_url)
    merge(tmp_path / "a.db", None, url)
    assert export_results(url, "json", tmp_path / "pg.json") == 5
    export_results(tmp_path / "a.db", "json", tmp_path / "lite.json")
    pg_rows, lite_rows = (json.loads((tmp_path / n).read_text()) for n in ("pg.json", "lite.json"))
    assert pg_rows == lite_rows
    added = import_datasets(tmp_path / "fresh.db", [tmp_path / "pg.json"])
    assert added.results == 5


def test_a_bad_url_is_one_line_naming_it_without_the_password() -> None:
    for bad, why in [("postgresql://u:hunter2@host:notaport/db", "not a PostgreSQL URL"),
                     ("postgres://u:hunter2@host:5432", "names no database")]:
        with pytest.raises(ConfigError, match=why) as caught:
            parse_pg_url(bad, "--tokperf-db")
        message = str(caught.value)
        assert "hunter2" not in message and "\n" not in message
        assert "--tokperf-db" in message
    assert isinstance(db_location("postgres://h/db"), PgUrl)
    assert db_location("x/postgresql.db") == Path("x/postgresql.db")


def test_the_password_is_never_shown(pg_cluster: PgCluster) -> None:
    url = PgUrl(pg_cluster.url(pg_cluster.create_database(), password=True))
    assert PG_PASSWORD not in f"{url} {url!r} {url.shown}"
    with ResultStore.open(url) as store:
        assert PG_PASSWORD not in str(store.path)
    wrong = PgUrl(url.dsn.replace(PG_PASSWORD, "not-the-" + PG_PASSWORD))
    with pytest.raises(StorageError, match="cannot connect to the results DB") as caught:
        ResultStore.open(wrong)
    assert PG_PASSWORD not in str(caught.value)


def test_a_database_of_another_program_is_refused(pg_cluster: PgCluster, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(StorageError, match="holds other tables \\(invoices\\)"):
        ResultStore.open(PgUrl(pg_url))
    with pytest.raises(StorageError, match="is empty"):
        ResultStore.open_read_only(PgUrl(pg_cluster.url(pg_cluster.create_database())))
