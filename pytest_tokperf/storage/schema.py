"""The results database schema, as ordered migrations over sqlite-utils.

``MIGRATIONS[i]`` takes a database at schema ``i`` to schema ``i + 1`` (the number in
``PRAGMA user_version``); a shipped step is never edited: a change is a new step. Plain
tables with foreign keys (runs, environments, series, results, samples, gate_verdicts,
acceptances) and the views ``series_history`` and ``latest_results``, so any SQLite
client reads the file without this package.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable

from sqlite_utils import Database

from pytest_tokperf.storage.env_hash import environment_hash

SUMMARY_FIGURES = (
    "ttft_s",
    "decode_tokens_per_s",
    "prefill_tokens_per_s",
    "engine_decode_tokens_per_s",
    "engine_prefill_tokens_per_s",
)
SUMMARY_FIGURES_V6 = ("aggregate_tokens_per_s", "requests_per_s", "chars_per_s")
"""Summaries added in schema v6: all streams' output and requests per second of round
wall time, and characters per second a reader sees."""
SUMMARY_PARTS: dict[str, type] = {
    "median": float,
    "mean": float,
    "stdev": float,
    "min": float,
    "max": float,
    "n": int,
}

_RUNS_V1: dict[str, type] = {
    "run_id": str,
    "started_at": str,
    "finished_at": str,
    "host": str,
    "os": str,
    "python": str,
    "pytest_version": str,
    "plugin_version": str,
    "project_commit": str,
    "ci_provider": str,
    "ci_job": str,
}

_SPEED_SETTINGS_V1: dict[str, type] = {
    "threads": int,
    "batch_size": int,
    "ubatch_size": int,
    "gpu_layers": int,
    "flash_attn": str,
    "kv_type": str,
    "context_size": int,
    "speculative": bool,
}

_SERIES_V1: dict[str, type] = {
    "series_key": str,
    "series_text": str,
    "test_id": str,
    "engine_name": str,
    "model": str,
    "quant": str,
    **_SPEED_SETTINGS_V1,
    "prompt_tokens": int,
    "generate_tokens": int,
    "depth_tokens": int,
    "concurrency": int,
}

_ENVIRONMENTS_V1: dict[str, type] = {
    "id": int,
    "env_hash": str,
    "engine_name": str,
    "engine_version": str,
    "engine_build": str,
    "engine_backend": str,
    "engine_base_url": str,
    "engine_model_path": str,
    "engine_model_name": str,
    "engine_settings": str,
    **_SPEED_SETTINGS_V1,
    "hardware_name": str,
    "hardware_kind": str,
    "hardware_driver": str,
    "hardware_memory_bytes": int,
    "hardware_peak_flops": float,
    "hardware_detail": str,
    "spec_bandwidth_bytes_per_s": float,
    "spec_bandwidth_source": str,
    "spec_bandwidth_detail": str,
    "measured_bandwidth_bytes_per_s": float,
    "measured_bandwidth_source": str,
    "measured_bandwidth_detail": str,
    "model_file_name": str,
    "model_path": str,
    "model_file_bytes": int,
    "model_content_hash": str,
    "model_architecture": str,
    "model_parameter_count": int,
    "model_quant_types": str,
    "model_file_type": str,
    "model_context_length": int,
}

_RESULTS_V1: dict[str, type] = {
    "id": int,
    "run_id": str,
    "environment_id": int,
    "series_key": str,
    "test_id": str,
    "created_at": str,
    "prompt_tokens": int,
    "generate_tokens": int,
    "depth_tokens": int,
    "concurrency": int,
    "repetitions": int,
    "warmup": int,
    **{f"{fig}_{part}": kind for fig in SUMMARY_FIGURES for part, kind in SUMMARY_PARTS.items()},
    "inter_token_p50_s": float,
    "inter_token_p90_s": float,
    "inter_token_p99_s": float,
    "decode_agreement": float,
    "ttft_minus_engine_prefill_s": float,
    "ceiling_decode_tokens_per_s": float,
    "ceiling_prefill_tokens_per_s": float,
    "ceiling_bandwidth_bytes_per_s": float,
    "ceiling_bandwidth_source": str,
    "ceiling_bandwidth_detail": str,
    "bytes_per_token": int,
    "footprint_architecture": str,
    "footprint_weights_bytes": int,
    "footprint_kv_bytes_per_position": int,
    "footprint_depth_tokens": int,
    "footprint_kv_type": str,
    "footprint_resident_bytes": int,
    "footprint_active_parameters": int,
    "footprint_total_parameters": int,
    "footprint_expert_count": int,
    "footprint_experts_used": int,
    "footprint_tied_output": bool,
    "footprint_warnings": str,
    "efficiency": float,
    "verdict": str,
    "notes": str,
}

_SAMPLES_V1: dict[str, type] = {
    "result_id": int,
    "repetition": int,
    "ttft_s": float,
    "prefill_tokens_per_s": float,
    "decode_tokens_per_s": float,
    "prompt_tokens": int,
    "generated_tokens": int,
    "inter_token_s": str,
    "engine_prefill_s": float,
    "engine_prefill_tokens_per_s": float,
    "engine_decode_tokens_per_s": float,
    "cached_prompt_tokens": int,
    "speculative": bool,
    "text_chars": int,
}


def _v1_tables(db: Database) -> None:
    db.table("runs").create(_RUNS_V1, pk="run_id", not_null={"run_id", "started_at"})
    db.table("environments").create(_ENVIRONMENTS_V1, pk="id", not_null={"env_hash", "engine_name"})
    db.table("environments").create_index(["env_hash"], unique=True)
    db.table("series").create(_SERIES_V1, pk="series_key", not_null={"series_text", "test_id"})
    db.table("results").create(
        _RESULTS_V1,
        pk="id",
        not_null={"run_id", "environment_id", "series_key", "test_id", "created_at"},
        foreign_keys=[
            ("run_id", "runs", "run_id"),
            ("environment_id", "environments", "id"),
            ("series_key", "series", "series_key"),
        ],
    )
    db.table("results").create_index(["run_id"])
    db.table("samples").create(
        _SAMPLES_V1,
        pk=("result_id", "repetition"),
        foreign_keys=[("result_id", "results", "id")],
    )


_SERIES_HISTORY_V2 = """
SELECT r.id AS result_id, r.run_id, r.created_at, r.test_id, r.series_key,
  e.engine_name, e.engine_version, e.engine_build, e.engine_backend,
  e.hardware_name, e.hardware_kind, e.hardware_driver,
  e.model_file_name, e.model_content_hash,
  ru.project_commit, ru.host,
  r.ttft_s_median AS ttft_s,
  r.decode_tokens_per_s_median AS decode_tokens_per_s,
  r.decode_tokens_per_s_stdev AS decode_tokens_per_s_stdev,
  r.prefill_tokens_per_s_median AS prefill_tokens_per_s,
  r.engine_decode_tokens_per_s_median AS engine_decode_tokens_per_s,
  r.engine_prefill_tokens_per_s_median AS engine_prefill_tokens_per_s,
  r.repetitions, r.ceiling_decode_tokens_per_s, r.efficiency, r.verdict
FROM results r
JOIN environments e ON e.id = r.environment_id
JOIN runs ru ON ru.run_id = r.run_id
"""

_LATEST_RESULTS_V2 = """
SELECT h.* FROM series s
JOIN series_history h ON h.result_id = (
  SELECT r.id FROM results r WHERE r.series_key = s.series_key
  ORDER BY r.created_at DESC, r.id DESC LIMIT 1
)
"""


def _v2_history(db: Database) -> None:
    db.table("results").create_index(["series_key", "created_at", "id"])
    db.table("results").create_index(["created_at"])
    db.create_view("series_history", _SERIES_HISTORY_V2)
    db.create_view("latest_results", _LATEST_RESULTS_V2)


def _v3_warm_prefix_and_drafts(db: Database) -> None:
    """Warm-prefix and chat workloads, speculative decoding: new columns, old rows default."""
    db.table("results").add_column("cached_prefix_tokens", int, not_null_default=0)
    db.table("series").add_column("cached_prefix_tokens", int, not_null_default=0)
    db.table("series").add_column("draft_model", str)
    db.table("samples").add_column("draft_tokens", int)
    db.table("samples").add_column("draft_accepted_tokens", int)
    db.table("results").add_column("chat", bool, not_null_default=False)
    db.table("series").add_column("chat", bool, not_null_default=False)
    db.table("samples").add_column("reasoning_tokens", int)
    db.table("samples").add_column("answer_ttft_s", float)


_GATE_VERDICTS_V4: dict[str, type] = {
    "result_id": int,
    "metric": str,
    "verdict": str,
    "relative_change": float,
    "ci_low": float,
    "ci_high": float,
    "p_value": float,
    "n_baseline": int,
    "n_current": int,
    "baseline": str,
    "correction": str,
    "reason": str,
}

_ACCEPTANCES_V4: dict[str, type] = {
    "id": int,
    "series_key": str,
    "result_id": int,
    "accepted_at": str,
    "accepted_by": str,
    "reason": str,
}


def _v4_gate_verdicts_and_acceptances(db: Database) -> None:
    """The gate's verdicts kept with their results; accepted levels per series."""
    db.table("gate_verdicts").create(
        _GATE_VERDICTS_V4, pk=("result_id", "metric"),
        foreign_keys=[("result_id", "results", "id")], not_null={"verdict"},
    )
    db.table("acceptances").create(
        _ACCEPTANCES_V4, pk="id", not_null={"series_key", "result_id", "accepted_at"},
        foreign_keys=[("series_key", "series", "series_key"), ("result_id", "results", "id")],
    )
    db.table("acceptances").create_index(["series_key", "result_id"])


def _v5_speed_settings(db: Database) -> None:
    """Every speed setting of the engine server, K and V cache types apart, the backend
    (NULL for old rows); an ``engine_backend`` that is the suffix of ``engine_build`` (a
    commit label, not a backend) becomes NULL."""
    series: dict[str, type] = {"kv_type_v": str, "threads_batch": int, "split_mode": str,
                               "backend": str}
    environments: dict[str, type] = {
        "kv_type_v": str, "threads_batch": int, "parallel": int, "split_mode": str,
        "layer_count": int, "flash_attn_active": bool, "vram_fraction": float, "devices": str,
    }
    for name, kind in series.items():
        db.table("series").add_column(name, kind)
    for name, kind in environments.items():
        db.table("environments").add_column(name, kind)
    db.execute(
        "UPDATE environments SET engine_backend = NULL "
        "WHERE engine_backend IS NOT NULL AND engine_build = engine_version || '-' || engine_backend"
    )


def _v6_concurrency_and_text_figures(db: Database) -> None:
    """Concurrent rounds kept as measured (aggregate tok/s, requests/s, each round's wall
    time on its samples), and chars/s; old rows have NULL there."""
    for figure in SUMMARY_FIGURES_V6:
        for part, kind in SUMMARY_PARTS.items():
            db.table("results").add_column(f"{figure}_{part}", kind)
    db.table("samples").add_column("round_index", int)
    db.table("samples").add_column("round_wall_s", float)


_PER_RESULT_V7: dict[str, type] = {
    "engine_base_url": str,
    "measured_bandwidth_bytes_per_s": float,
    "measured_bandwidth_source": str,
    "measured_bandwidth_detail": str,
}


def _v7_one_row_per_environment(db: Database) -> None:
    """The moment's bandwidth probe and the engine's URL move from ``environments`` to
    ``results`` (values copied); environments that now read alike become one row, the
    moved columns stay in ``environments``, NULL."""
    moved = list(_PER_RESULT_V7)
    for name, kind in _PER_RESULT_V7.items():
        db.table("results").add_column(name, kind)
    db.execute(f"UPDATE results SET ({', '.join(moved)}) = (SELECT {', '.join(moved)} "
               "FROM environments e WHERE e.id = results.environment_id)")
    cursor = db.execute("SELECT * FROM environments ORDER BY id")
    names = [d[0] for d in cursor.description]
    keep: dict[str, int] = {}
    for values in cursor.fetchall():
        row = dict(zip(names, values, strict=True))
        new_hash = environment_hash(row)
        if new_hash in keep:
            db.execute("UPDATE results SET environment_id = ? WHERE environment_id = ?",
                       [keep[new_hash], row["id"]])
            db.execute("DELETE FROM environments WHERE id = ?", [row["id"]])
        else:
            keep[new_hash] = row["id"]
    for new_hash, env_id in keep.items():
        db.execute(f"UPDATE environments SET env_hash = ?, {', '.join(f'{c} = NULL' for c in moved)}"
                   " WHERE id = ?", [new_hash, env_id])


def _v8_machine_load(db: Database) -> None:
    """The machine's own state during the repetitions (``results.MachineLoad``): one JSON
    column, the result's window and each repetition's; NULL for old rows (not sampled)."""
    db.table("results").add_column("machine_load", str)


def _v9_imported_rows_invent_nothing(db: Database) -> None:
    """Imported llama-bench rows' TTFT and characters (made up before 0.1: llama-bench
    sends no request and shows no text) become NULL, as the importer writes them now."""
    imported = ("SELECT r.id FROM results r JOIN environments e ON e.id = r.environment_id"
                " WHERE e.engine_name = 'llama-bench'")
    figures = [f"{figure}_{part} = NULL" for figure in ("ttft_s", "chars_per_s")
               for part in SUMMARY_PARTS]
    db.execute(f"UPDATE samples SET ttft_s = NULL, text_chars = NULL"
               f" WHERE result_id IN ({imported})")
    db.execute(f"UPDATE results SET {', '.join(figures)} WHERE id IN ({imported})")


MIGRATIONS: tuple[Callable[[Database], None], ...] = (
    _v1_tables, _v2_history, _v3_warm_prefix_and_drafts, _v4_gate_verdicts_and_acceptances,
    _v5_speed_settings, _v6_concurrency_and_text_figures, _v7_one_row_per_environment,
    _v8_machine_load, _v9_imported_rows_invent_nothing,
)
SCHEMA_VERSION = len(MIGRATIONS)


Column = tuple[str, bool, bool]
"""A column's SQLite type (``INTEGER``, ``REAL``, ``TEXT``), whether it is NOT NULL, and
whether a row must name it (NOT NULL without a default)."""


@functools.cache
def current_columns() -> dict[str, dict[str, Column]]:
    """Per table, its columns at ``SCHEMA_VERSION``, read from a database migrated in
    memory: what an imported row is checked against before any DB is opened."""
    db = Database(sqlite3.connect(":memory:"), execute_plugins=False)
    try:
        for step in MIGRATIONS:
            step(db)
        return {table: {name: (str(kind).upper(), bool(not_null),
                               bool(not_null) and default is None)
                        for _, name, kind, not_null, default, _ in
                        db.execute(f"PRAGMA table_info([{table}])").fetchall()}
                for table in db.table_names()}
    finally:
        db.close()
