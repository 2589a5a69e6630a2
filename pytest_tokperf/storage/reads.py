"""The store's read side: a series' history, verdicts, acceptances, runs and results,
rebuilt as value types from SQL both backends read. ``ResultStore`` inherits it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_tokperf.errors import StorageError
from pytest_tokperf.results import MachineLoad, Sample
from pytest_tokperf.storage.backend import Backend
from pytest_tokperf.storage.location import DbLocation
from pytest_tokperf.storage.records import (
    Acceptance,
    GateVerdict,
    HistoryRow,
    ProbedResult,
    SampleFigures,
    StoredResult,
    StoredRun,
)
from pytest_tokperf.storage.rows import (
    Row,
    bench_result_from_rows,
    ceiling_from_row,
    hardware_from_row,
    machine_loads_from_json,
    model_from_row,
    run_from_row,
    sample_from_row,
    with_result_columns,
)

_HISTORY_FIGURES = """
WITH chosen AS (
  SELECT * FROM series_history
  WHERE series_key = :key
    AND (:since_accepted = 0
         OR NOT EXISTS (SELECT 1 FROM acceptances WHERE series_key = :key)
         OR (created_at, result_id) >= (
              SELECT r.created_at, r.id FROM acceptances a JOIN results r ON r.id = a.result_id
              WHERE a.series_key = :key ORDER BY a.accepted_at DESC, a.id DESC LIMIT 1))
    AND (:exclude_run_id IS NULL OR run_id != :exclude_run_id)
    AND (:engine_version IS NULL OR engine_version = :engine_version
         OR engine_build = :engine_version)
  ORDER BY created_at DESC, result_id DESC
  {limit}
)
SELECT chosen.*, s.repetition AS sample_repetition, s.ttft_s AS sample_ttft_s,
       s.prefill_tokens_per_s AS sample_prefill, s.decode_tokens_per_s AS sample_decode,
       s.engine_decode_tokens_per_s AS sample_engine, s.generated_tokens AS sample_generated,
       s.round_index AS sample_round, s.round_wall_s AS sample_round_wall
FROM chosen LEFT JOIN samples s ON s.result_id = chosen.result_id
ORDER BY chosen.created_at, chosen.result_id, s.repetition
"""
_PROBED = """
SELECT r.id AS result_id, r.series_key, e.engine_version, e.engine_build,
  r.measured_bandwidth_bytes_per_s AS bandwidth_bytes_per_s, s.ttft_s AS sample_ttft_s,
  s.prefill_tokens_per_s AS sample_prefill, s.decode_tokens_per_s AS sample_decode,
  s.engine_decode_tokens_per_s AS sample_engine, s.generated_tokens AS sample_generated,
  s.round_index AS sample_round, s.round_wall_s AS sample_round_wall
FROM results r JOIN environments e ON e.id = r.environment_id
JOIN runs ru ON ru.run_id = r.run_id JOIN samples s ON s.result_id = r.id
WHERE ru.host = ? AND r.measured_bandwidth_bytes_per_s > 0 ORDER BY r.id, s.repetition
"""
_SAMPLE_ALIASES = ("sample_ttft_s", "sample_prefill", "sample_decode", "sample_engine",
                   "sample_generated", "sample_round", "sample_round_wall")


class StoreReads:
    """Read-only queries over an open store's ``backend``."""

    backend: Backend
    path: DbLocation

    def _read(self, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> list[Row]:
        raise NotImplementedError  # ResultStore's: rows as dicts, errors as StorageError

    def query(self, sql: str, params: tuple[object, ...] | dict[str, object] = ()) -> list[Row]:
        """Rows of a read-only query (SQL both backends read: ``?``/``:name`` placeholders)."""
        return self._read(sql, params)

    def tuples(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """``query`` as tuples, in the select list's order."""
        return [tuple(r.values()) for r in self._read(sql, params)]

    def columns(self, table: str) -> list[str]:
        """The columns of ``table``, in schema order."""
        return self.backend.columns(table)

    def history(self, series_key: str, limit: int | None = None) -> list[HistoryRow]:
        """A series' results, oldest first; ``limit`` keeps the newest ``limit``."""
        sql = ("SELECT * FROM series_history WHERE series_key = ?"
               " ORDER BY created_at DESC, result_id DESC")
        params: tuple[object, ...] = (series_key,)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        return [HistoryRow(**row) for row in reversed(self._read(sql, params))]

    def history_figures(self, series_key: str, *, since_accepted: bool = True,
                        exclude_run_id: str | None = None, engine_version: str | None = None,
                        limit: int | None = None
                        ) -> list[tuple[HistoryRow, tuple[SampleFigures, ...]]]:
        """A series' results with their repetitions' figures, oldest first, in one query:
        ``since_accepted`` starts at the latest accepted level; ``exclude_run_id`` leaves one
        run out; ``engine_version`` keeps results whose version or build is that; ``limit``
        keeps the newest ``limit`` of what is left."""
        params: dict[str, object] = {
            "key": series_key, "since_accepted": int(since_accepted),
            "exclude_run_id": exclude_run_id, "engine_version": engine_version}
        if limit is not None:
            params["limit"] = limit
        rows = self._read(_HISTORY_FIGURES.format(
            limit="" if limit is None else "LIMIT :limit"), params)
        out: list[tuple[HistoryRow, list[SampleFigures]]] = []
        for row in rows:
            repetition = row.pop("sample_repetition")
            figures = [row.pop(name) for name in _SAMPLE_ALIASES]
            if not out or out[-1][0].result_id != row["result_id"]:
                out.append((HistoryRow(**row), []))
            if repetition is not None:  # None: stored without samples (TTFT may be NULL)
                out[-1][1].append(SampleFigures(*figures))
        return [(row, tuple(figures)) for row, figures in out]

    def machine_loads(self, result_ids: Iterable[int]) -> dict[int, MachineLoad | None]:
        """Each result's machine load over its repetitions (None: not sampled, e.g. stored
        before schema v8)."""
        ids = sorted(set(result_ids))
        if not ids:
            return {}
        rows = self._read(f"SELECT id, machine_load FROM results WHERE id IN "
                          f"({', '.join('?' * len(ids))})", tuple(ids))
        return {row["id"]: machine_loads_from_json(row["machine_load"])[0] for row in rows}

    def probed_bandwidths(self, result_ids: Iterable[int]) -> dict[int, float | None]:
        """Each result's read bandwidth probed around it, bytes/s (None: not probed)."""
        ids = sorted(set(result_ids))
        out: dict[int, float | None] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self._read("SELECT id, measured_bandwidth_bytes_per_s AS bw FROM results "
                              f"WHERE id IN ({', '.join('?' * len(chunk))})", tuple(chunk))
            out.update({row["id"]: row["bw"] for row in rows})
        return out

    def probed_results(self, host: str
                       ) -> list[tuple[ProbedResult, tuple[SampleFigures, ...]]]:
        """Every result of ``host``'s runs stored with a bandwidth probe and repetitions,
        with their figures, in one query."""
        out: list[tuple[ProbedResult, list[SampleFigures]]] = []
        for row in self._read(_PROBED, (host,)):
            figures = SampleFigures(*(row.pop(name) for name in _SAMPLE_ALIASES))
            if not out or out[-1][0].result_id != row["result_id"]:
                out.append((ProbedResult(**row), []))
            out[-1][1].append(figures)
        return [(result, tuple(figures)) for result, figures in out]

    def gate_verdicts(self, result_ids: Iterable[int]) -> dict[int, tuple[GateVerdict, ...]]:
        """The stored gate verdicts of these results, by result id (metric order)."""
        ids = list(result_ids)
        out: dict[int, list[GateVerdict]] = {i: [] for i in ids}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._read(f"SELECT * FROM gate_verdicts WHERE result_id IN ({marks})"
                                  " ORDER BY result_id, metric", tuple(chunk)):
                out[row["result_id"]].append(GateVerdict(**row))
        return {i: tuple(v) for i, v in out.items()}

    def acceptances(self, series_key: str | None = None) -> list[Acceptance]:
        """Accepted levels, oldest first; of one series when ``series_key`` is given."""
        sql = "SELECT * FROM acceptances"
        params: tuple[object, ...] = ()
        if series_key is not None:
            sql += " WHERE series_key = ?"
            params = (series_key,)
        return [Acceptance(**row) for row in self._read(sql + " ORDER BY accepted_at, id", params)]

    def latest_per_series(self) -> list[HistoryRow]:
        rows = self._read("SELECT * FROM latest_results ORDER BY series_key")
        return [HistoryRow(**row) for row in rows]

    def runs(self) -> list[StoredRun]:
        rows = self._read(
            "SELECT runs.*, (SELECT count(*) FROM results WHERE results.run_id = runs.run_id)"
            " AS result_count FROM runs ORDER BY started_at, run_id"
        )
        return [StoredRun(run_from_row(r), r["finished_at"], r["result_count"]) for r in rows]

    def samples(self, result_id: int) -> tuple[Sample, ...]:
        rows = self._read(
            "SELECT * FROM samples WHERE result_id = ? ORDER BY repetition", (result_id,)
        )
        return tuple(sample_from_row(r) for r in rows)

    def result(self, result_id: int) -> StoredResult:
        """Everything ``record`` stored for ``result_id``, rebuilt as value types."""
        found = self._read("SELECT * FROM results WHERE id = ?", (result_id,))
        if not found:
            raise StorageError(f"no result {result_id!r} in {str(self.path)!r}")
        row = found[0]
        env = with_result_columns(
            self._read("SELECT * FROM environments WHERE id = ?", (row["environment_id"],))[0],
            row)
        run = self._read("SELECT * FROM runs WHERE run_id = ?", (row["run_id"],))[0]
        samples = self._read(
            "SELECT * FROM samples WHERE result_id = ? ORDER BY repetition", (result_id,)
        )
        return StoredResult(
            result_id=result_id,
            run=run_from_row(run),
            test_id=row["test_id"],
            series_key=row["series_key"],
            created_at=row["created_at"],
            result=bench_result_from_rows(row, env, samples),
            model=model_from_row(env),
            hardware=hardware_from_row(env),
            ceiling=ceiling_from_row(row),
            efficiency=row["efficiency"],
            verdict=row["verdict"],
        )
