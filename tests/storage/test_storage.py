"""The results store: schema, round trip, series key, history, errors, migration."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlite_utils import Database
from tests.support.storage_factory import (
    make_engine,
    make_hardware,
    make_model,
    make_result,
    make_run,
    record_kwargs,
)

from pytest_tokperf.errors import StorageError
from pytest_tokperf.results import Workload
from pytest_tokperf.storage.store import (
    HistoryRow,
    ResultStore,
)
from pytest_tokperf.storage.rows import (
    environment_row,
    result_row,
    run_row,
    sample_rows,
    series_key,
    series_of,
    series_row,
)
from pytest_tokperf.storage.schema import MIGRATIONS, SCHEMA_VERSION


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultStore]:
    opened = ResultStore.open(tmp_path / "deep" / "results.db")
    opened.begin_run(make_run())
    yield opened
    opened.close()


def test_open_creates_parents_wal_and_current_schema(store: ResultStore) -> None:
    assert store.path.is_file()
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    assert {"runs", "environments", "series", "results", "samples"} <= set(store.db.table_names())
    assert {"latest_results", "series_history"} <= set(store.db.view_names())
    columns = [c.name for c in store.db["series_history"].columns]
    assert columns == list(HistoryRow.__dataclass_fields__)


def test_record_round_trips_every_field(store: ResultStore) -> None:
    result = make_result()
    kwargs = record_kwargs()
    recorded = store.record("run-1", "tests/test_x.py::test_decode", result, **kwargs)
    result_id = recorded.result_id

    stored = store.result(result_id)

    assert stored.run == make_run()
    assert stored.result == result
    assert (stored.model, stored.hardware, stored.ceiling) == (
        kwargs["model"],
        kwargs["hardware"],
        kwargs["ceiling"],
    )
    assert (stored.efficiency, stored.verdict) == (0.0146, "pass")
    assert stored.series_key == recorded.series_key
    assert stored.series_key == series_key("tests/test_x.py::test_decode", result, make_model())
    assert store.samples(result_id) == result.samples
    assert store.db.table("samples").count == 3


def test_record_without_optional_parts(store: ResultStore) -> None:
    result = dataclasses.replace(
        make_result(), decode_tokens_per_s=None, engine_prefill_tokens_per_s=None, samples=()
    )
    result_id = store.record(
        "run-1",
        "t",
        result,
        model=None,
        hardware=None,
        ceiling=None,
        efficiency=None,
        verdict="unchecked",
    ).result_id
    stored = store.result(result_id)
    assert stored.result == result
    assert (stored.model, stored.hardware, stored.ceiling, stored.verdict) == (
        None,
        None,
        None,
        "unchecked",
    )


def test_environments_are_deduplicated(store: ResultStore) -> None:
    for _ in range(3):
        store.record("run-1", "t", make_result(), **record_kwargs())
    store.record("run-1", "t", make_result(engine=make_engine(build="def5678")), **record_kwargs())
    assert store.db.table("environments").count == 2
    assert store.db.table("series").count == 1


def test_series_key_is_stable_and_ignores_compared_dimensions() -> None:
    model = make_model()
    series = series_of("t", make_result(), model)
    key = series_key("t", make_result(), model)
    assert key == series.key == "1e77f951a462c247"
    # llama-server's default batch (2048) is None in the key; the CUDA backend is named
    assert series.text.startswith('{"backend":"cuda","batch_size":null,"concurrency":1,')
    compared = make_result(engine=make_engine(version="b7000", build="fff", base_url="http://x"))
    assert series_key("t", compared, model) == key
    assert series_key("t", make_result(decode=50.0), model) == key
    changed = [
        series_key("other", make_result(), model),
        series_key("t", make_result(engine=make_engine(threads=4)), model),
        series_key("t", make_result(engine=make_engine(settings=(("kv_type", "f16"),))), model),
        series_key("t", make_result(workload=Workload(1024, 128)), model),
        series_key("t", make_result(), make_model(content_hash="e" * 64)),
        series_key("t", make_result(), make_model(file_type="MOSTLY_Q8_0")),
        series_key("t", make_result(workload=Workload(512, 128, repetitions=3,
                                                      cached_prefix_tokens=448)), model),
        series_key("t", make_result(engine=make_engine(settings=(
            *make_engine().settings, ("draft_model", "d.gguf")))), model),
    ]
    # Fields added in schema v3 stay out of the text at their defaults: old keys hold.
    assert "cached_prefix_tokens" not in series.text and "draft_model" not in series.text
    assert key not in changed
    assert len(set(changed)) == len(changed)


REAL_V3_SETTINGS = (("ctx_size", "4096"), ("parallel", "1"), ("threads", "2"),
                    ("total_slots", "1"))
"""What a tokperf-started llama-server stored before schema v5: no speed settings."""


@pytest.mark.parametrize(
    ("changes", "old_key"),
    [
        # keys computed by the schema-v3 code (commit 7f14099) for rows as they were stored
        ({"backend": "pypi-sdist", "settings": REAL_V3_SETTINGS}, "1b70d197d92079f6"),
        ({"backend": "pypi-sdist", "settings": (*REAL_V3_SETTINGS,
                                                 ("server_args", "--no-mmap"))},
         "1b70d197d92079f6"),
        ({"name": "ollama", "backend": None, "settings": (
            ("loaded_models", "1"), ("size_bytes", "5000"), ("size_vram_bytes", "0"),
            ("gpu_share", "0%"))}, "bd949b495b40d553"),
        ({"name": "vllm", "backend": None, "settings": ()}, "136a356d2a9a072c"),
    ],
)
def test_old_series_keys_hold_where_settings_are_default_or_unknown(
    changes: dict[str, object], old_key: str
) -> None:
    engine = make_engine(**changes)
    assert series_key("t", make_result(engine=engine), make_model()) == old_key
    # the same run with today's adapter output: defaults read from the log are None
    observed = (*engine.settings, ("batch_size", "2048"), ("ubatch_size", "512"),
                ("flash_attn", "auto"), ("cache_type_k", "f16"), ("cache_type_v", "f16"))
    if engine.name == "llama-server":
        today = make_engine(**{**changes, "backend": "cpu", "settings": observed})
        assert series_key("t", make_result(engine=today), make_model()) == old_key


def _key_for(args: str, backend: str | None = None) -> str:
    engine = make_engine(backend=backend, settings=(*REAL_V3_SETTINGS, ("server_args", args)))
    return series_key("t", make_result(engine=engine), make_model())


def test_runs_differing_only_in_a_speed_flag_are_different_series() -> None:
    base = "--no-mmap"
    keys = {
        "default": _key_for(base),
        "-fa on": _key_for(f"{base} -fa on"),
        "-fa off": _key_for(f"{base} -fa off"),
        "-ngl 99": _key_for(f"{base} -ngl 99"),
        "-ngl 0": _key_for(f"{base} -ngl 0"),
        "-ngl 20": _key_for(f"{base} -ngl 20"),
        "-ctk q8_0": _key_for(f"{base} -ctk q8_0"),
        "-ctv q8_0": _key_for(f"{base} -ctv q8_0"),
        "-ctk q8_0 -ctv q8_0": _key_for(f"{base} -ctk q8_0 -ctv q8_0"),
        "-ctk q8_0 -ctv q4_0": _key_for(f"{base} -ctk q8_0 -ctv q4_0"),
        "-b 512": _key_for(f"{base} -b 512"),
        "-ub 128": _key_for(f"{base} -ub 128"),
        "cuda": _key_for(base, backend="cuda"),
        "cuda -ngl 0": _key_for(f"{base} -ngl 0", backend="cuda"),
    }
    assert len(set(keys.values())) == len(keys), keys
    # spellings of the same setting are one series
    assert _key_for(f"{base} --flash-attn=on") == keys["-fa on"]
    assert _key_for(f"{base} -b 2048 -ub 512 -fa auto -ctk f16 -ctv f16") == keys["default"]
    assert _key_for(f"{base} --n-gpu-layers 99") == keys["-ngl 99"]
    # a CPU backend offloads nothing whatever -ngl says
    assert _key_for(f"{base} -ngl 99", backend="cpu") == _key_for(base, backend="cpu")


def test_series_reads_speed_settings_under_engine_names() -> None:
    engine = make_engine(
        settings=(
            ("n_batch", "512"),
            ("fa", "0"),
            ("cache_type_k", "q8_0"),
            ("cache_type_v", "q4_0"),
            ("n_gpu_layers", "99"),
        ),
    )
    series = series_of("t", make_result(engine=engine), None)
    assert (series.batch_size, series.flash_attn, series.kv_type, series.kv_type_v,
            series.gpu_layers) == (512, "off", "q8_0", "q4_0", 99)
    assert series.model == "engine:tiny"
    assert series_of("t", make_result(), make_model(content_hash=None)).model == (
        "file:tiny.gguf:123456789"
    )


def test_history_is_in_time_order_and_limit_keeps_newest(store: ResultStore) -> None:
    ids = [
        store.record("run-1", "t", make_result(decode=float(d)), **record_kwargs()).result_id
        for d in (10, 20, 30)
    ]
    store.record("run-1", "other", make_result(), **record_kwargs())
    key = series_key("t", make_result(), make_model())

    history = store.history(key)
    assert [h.result_id for h in history] == ids
    assert [h.decode_tokens_per_s for h in history] == [10.0, 20.0, 30.0]
    assert history[0].engine_build == "abc1234"
    assert history[0].hardware_driver == "570.86"
    assert [h.result_id for h in store.history(key, limit=2)] == ids[1:]
    assert store.history("no-such-series") == []


def test_latest_per_series_picks_the_newest_of_each(store: ResultStore) -> None:
    store.record("run-1", "a", make_result(decode=1.0), **record_kwargs())
    newest_a = store.record("run-1", "a", make_result(decode=2.0), **record_kwargs()).result_id
    only_b = store.record("run-1", "b", make_result(decode=3.0), **record_kwargs()).result_id
    latest = {row.test_id: row.result_id for row in store.latest_per_series()}
    assert latest == {"a": newest_a, "b": only_b}


def test_runs_begin_twice_and_finish(store: ResultStore) -> None:
    store.begin_run(make_run())
    store.record("run-1", "t", make_result(), **record_kwargs())
    store.finish_run("run-1")
    [stored] = store.runs()
    assert stored.run == make_run()
    assert stored.results == 1
    assert stored.finished_at is not None and stored.finished_at > stored.run.started_at


def test_record_needs_its_run(store: ResultStore) -> None:
    with pytest.raises(StorageError, match=r"run 'ghost' is not in .*call begin_run\(\) first"):
        store.record("ghost", "t", make_result(), **record_kwargs())
    assert store.db.table("results").count == 0


def test_db_from_the_future_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    ResultStore.open(path).close()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    message = (
        f"results.db was written by a newer pytest-tokperf (schema {SCHEMA_VERSION + 5}, "
        f"this version knows {SCHEMA_VERSION}): upgrade pytest-tokperf or name another file: pytest --tokperf-db, tokperf --db"
    )
    with pytest.raises(StorageError, match=rf"^{message.replace('(', '.').replace(')', '.')}"):
        ResultStore.open(path)


def test_corrupt_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    path.write_bytes(b"this is not sqlite\n" * 200)
    with pytest.raises(StorageError, match=r"is not a readable SQLite results database") as info:
        ResultStore.open(path)
    assert str(path) in str(info.value)
    assert "Move it aside" in str(info.value)


def test_unwritable_path_names_the_path_and_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    path = blocker / "sub" / "results.db"
    with pytest.raises(StorageError, match=r"cannot write the results database") as info:
        ResultStore.open(path)
    assert str(path) in str(info.value)
    assert "--tokperf-db" in str(info.value) and "'off'" in str(info.value)


def _write_v1_db(path: Path) -> int:
    """A database as the first shipped schema wrote it, holding one result."""
    db = Database(path)
    MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    result, model = make_result(), make_model()
    db.table("runs").insert(run_row(make_run()))
    def v1(table: str, row: dict[str, object]) -> dict[str, object]:
        # Today's row builders also fill columns later schema steps added.
        columns = db.table(table).columns_dict
        return {k: v for k, v in row.items() if k in columns}

    env_id = (
        db.table("environments")
        .insert(v1("environments", environment_row(result.engine, model, make_hardware())))
        .last_pk
    )

    series = series_of("t", result, model)
    db.table("series").insert(v1("series", series_row(series)))
    row = {
        "run_id": "run-1",
        "environment_id": env_id,
        "series_key": series.key,
        "test_id": "t",
        "created_at": "2026-01-02T03:04:06.000000+00:00",
        **result_row(result, None, None, "unchecked"),
    }
    result_id = int(db.table("results").insert(v1("results", row)).last_rowid or 0)
    db.table("samples").insert_all(
        v1("samples", {**s, "result_id": result_id}) for s in sample_rows(result.samples)
    )
    db.close()
    return result_id


def test_v1_database_upgrades_in_place_and_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    result_id = _write_v1_db(path)
    with ResultStore.open(path) as store:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        key = series_key("t", make_result(), make_model())
        assert [h.result_id for h in store.history(key)] == [result_id]
        assert store.result(result_id).result == make_result()
        assert "idx_results_series_key_created_at_id" in {
            i.name for i in store.db.table("results").indexes
        }
        store.record("run-1", "t", make_result(), **record_kwargs())
        assert len(store.history(key)) == 2


def test_v5_clears_the_commit_label_from_engine_backend(tmp_path: Path) -> None:
    path = tmp_path / "results.db"
    _write_v1_db(path)
    db = Database(path)
    db.execute("UPDATE environments SET engine_version = 'b11434', "
               "engine_build = 'b11434-pypi-sdist', engine_backend = 'pypi-sdist'")
    db.conn.commit()
    db.close()
    with ResultStore.open(path) as store:
        row = next(store.db.table("environments").rows)
        assert row["engine_backend"] is None and row["engine_build"] == "b11434-pypi-sdist"
        assert "kv_type_v" in store.db.table("series").columns_dict
        assert "vram_fraction" in store.db.table("environments").columns_dict


def test_environment_columns_hold_what_the_engine_ran_with() -> None:
    engine = make_engine(backend="cuda", settings=(
        ("server_args", "-ngl 99 -ctk q8_0 -ctv q4_0 -fa on"), ("offloaded_layers", "33"),
        ("layer_count", "33"), ("batch_size", "2048"), ("devices", "CUDA0|NVIDIA H200||")))
    row = environment_row(engine, make_model(), make_hardware())
    assert (row["engine_backend"], row["gpu_layers"], row["layer_count"], row["kv_type"],
            row["kv_type_v"], row["flash_attn"], row["batch_size"]) == (
        "cuda", 33, 33, "q8_0", "q4_0", "on", 2048)
    assert row["devices"] == "CUDA0|NVIDIA H200||"
    series = series_of("t", make_result(engine=engine), make_model())
    assert (series.backend, series.gpu_layers, series.batch_size) == ("cuda", -1, None)


def _make_read_only(path: Path) -> None:
    """Read-only even for root: the immutable attribute (chmod does not stop root)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable attribute and we run as root")


def test_a_read_only_db_is_refused_before_any_work(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    ResultStore.open(db).close()
    _make_read_only(db)
    try:
        with ResultStore.open(db) as reader:  # reading stays possible
            assert reader.runs() == []
        with pytest.raises(StorageError, match=r"cannot write the results database .*readonly"
                           r".*Point pytest --tokperf-db or tokperf --db .* at a writable file, or set it to 'off'"):
            ResultStore.open(db, check_writable=True)
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)
        db.chmod(0o644)
