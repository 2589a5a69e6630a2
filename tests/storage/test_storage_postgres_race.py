"""Eight runners opening one new PostgreSQL DB at the same moment (as a CI fleet's first
jobs do): every one gets a migrated store. Two races lived here: an opener that queued
behind another's migration read "no schema" from its catalog cache and ran the first
step again ("relation runs already exists"), and one that read the version before the
other's first step committed and the tables after it refused the DB as another
program's. Each failed within the first few of these rounds."""

from __future__ import annotations

import threading

import psycopg

from pytest_tokperf.storage.location import PgUrl
from pytest_tokperf.storage.schema import SCHEMA_VERSION
from pytest_tokperf.storage.store import ResultStore

OPENERS = 8
ROUNDS = 12


def test_eight_openers_of_a_new_db_at_once_all_get_the_store(pg_url: str) -> None:
    base = pg_url.rsplit("/", 1)[0]
    errors: list[str] = []
    versions: list[int] = []
    for round_ in range(ROUNDS):
        name = f"{pg_url.rsplit('/', 1)[1]}_race_{round_}"
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        barrier = threading.Barrier(OPENERS)

        def open_one(url: PgUrl = PgUrl(f"{base}/{name}"), r: int = round_) -> None:
            barrier.wait()
            try:
                with ResultStore.open(url) as store:
                    versions.append(store.backend.schema_version())
            except Exception as exc:  # every failure is collected, not only the first
                errors.append(f"round {r}: {exc}")

        threads = [threading.Thread(target=open_one) for _ in range(OPENERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert versions == [SCHEMA_VERSION] * (OPENERS * ROUNDS)
