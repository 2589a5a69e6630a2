"""The machine's load is stored with its result (schema v8) and read back, per repetition."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pytest_tokperf.results import MachineLoad
from pytest_tokperf.storage.store import ResultStore
from tests.support.storage_factory import make_result, make_run, record_kwargs

BUSY = MachineLoad(wall_s=1.5, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.01,
                   steal=0.02, run_queue=4.5, run_queue_max=7, load_1m=4.2, samples=15)


def test_a_result_keeps_its_machine_load_and_each_repetitions(tmp_path: Path) -> None:
    plain = make_result()
    per_rep = [BUSY, None, MachineLoad.unknown("no /proc/stat on this platform")]
    samples = tuple(dataclasses.replace(s, load=x)
                    for s, x in zip(plain.samples, per_rep, strict=True))
    result = dataclasses.replace(plain, samples=samples, load=BUSY)
    with ResultStore.open(tmp_path / "r.db") as store:
        store.begin_run(make_run())
        recorded = store.record("run-1", "t::decode", result, **record_kwargs())
        quiet = store.record("run-1", "t::other", plain, **record_kwargs())
        stored = store.result(recorded.result_id)
        assert stored.result == result
        assert stored.result.load is not None and stored.result.load.loaded
        assert [s.load for s in stored.result.samples] == per_rep
        assert store.machine_loads([recorded.result_id, quiet.result_id]) == {
            recorded.result_id: BUSY, quiet.result_id: None}
        column = store.db.execute("SELECT machine_load FROM results WHERE id = ?",
                                  [recorded.result_id]).fetchone()[0]
        assert json.loads(column)["result"]["busy_cpus"] == 2.0
        assert store.result(quiet.result_id).result.load is None
