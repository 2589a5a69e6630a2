"""The gate replayed over real sessions, with and without the machine-moved rule.

Loads folders of run files (default ``db/runs/releases``: 9 llama.cpp releases x 3
sessions of the main job on a VM whose memory sat at ~37 or ~60 GB/s by the hour) and
judges each session of each decode series against the sessions before it, as the pytest
gate does (``judge_history`` over at most 20 earlier sessions, from the third on), and how
each series' level follows its sessions' probes (the host's decode-bandwidth relation). Prints
the flags, and the flags left once a flag that the memory moved with is withheld
(``stats.moved``, against the probes of the sessions it was judged against, with the
host's bound as the gate fits it: ``storage.history.bandwidth_exponents``; with
``--min-per-state N`` as it would with N runs of a build in each state), with each
session's probe.

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/moved_replay.py [FOLDER ...] [--min-per-state 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path

import numpy as np

from pytest_tokperf.stats import DECODE, judge_history, moved
from pytest_tokperf.stats.changepoints import Point
from pytest_tokperf.stats.moved import moved_verdict
from pytest_tokperf.storage.exchange import import_datasets
from pytest_tokperf.storage.history import (
    bandwidth_exponents,
    series_history,
    session_points,
)
from pytest_tokperf.storage.store import ResultStore


def _relation(points: list[Point], bw: list[float | None]) -> str:
    """How decode follows the probe here: the slope of log level on log probe within each
    version, and the exponent the two states' medians imply (split at 48 GB/s)."""
    rows = [(p.version, math.log(b), math.log(statistics.median(p.samples)))
            for p, b in zip(points, bw, strict=True) if b]
    x, y = (np.array([r[k] - np.mean([q[k] for q in rows if q[0] == r[0]]) for r in rows])
            for k in (1, 2))
    slow, fast = ([r for r in rows if (r[1] > math.log(48e9)) == up] for up in (False, True))
    states = [(np.median([r[1] for r in s]), np.median([r[2] for r in s])) for s in (slow, fast)]
    ratio = (states[1][1] - states[0][1]) / (states[1][0] - states[0][0])
    return (f"level ~ probe^{x @ y / (x @ x):.2f} within versions, ^{ratio:.2f} between the "
            f"states' medians ({math.exp(states[0][0]) / 1e9:.0f} vs "
            f"{math.exp(states[1][0]) / 1e9:.0f} GB/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[Path("db/runs/releases")])
    parser.add_argument("--min-per-state", type=int, default=moved.MIN_PER_STATE)
    args = parser.parse_args()
    moved.MIN_PER_STATE = args.min_per_state  # a study of the package's minimum
    folders = args.folders
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "r.db"
        import_datasets(db, folders)
        with ResultStore.open_read_only(db) as store:
            fits = {h: bandwidth_exponents(store, h)
                    for h, in store.tuples("SELECT DISTINCT host FROM runs")}
            for host, fit in fits.items():
                print(f"{host}: decode {fit.fitted['decode']}; ttft {fit.fitted['ttft']}")
            keys = [k for k, in store.tuples("SELECT DISTINCT series_key FROM results")]
            total = left = judged = 0
            for key in keys:
                entries = series_history(store, key, DECODE.name, since_accepted=False)
                points = session_points(entries)
                if len(points) != len(entries) or len(points) < 4:
                    continue
                probes = store.probed_bandwidths(e.row.result_id for e in entries)
                bw = [probes.get(e.row.result_id) for e in entries]
                print(f"{entries[0].row.test_id}: {len(points)} sessions; "
                      f"{_relation(points, bw)}")
                for i in range(3, len(points)):
                    gate = judge_history(points[max(0, i - 20):i], points[i].samples, DECODE)
                    verdict, before = gate.comparison, bw[max(0, i - 20):i]
                    kept = moved_verdict(verdict, [bw[i]], (  # the runs it was judged against
                        before[:len(gate.reference)] if gate.judged == "drift"
                        else before[len(before) - len(gate.baseline):]),
                        exponent=fits[entries[i].row.host].of(
                            DECODE.name, {e.row.host for e in entries[:i + 1]}))
                    judged += 1
                    total += verdict.flagged
                    left += kept.flagged
                    if verdict.flagged:
                        print(f"  {points[i].version} at {(bw[i] or 0) / 1e9:.0f} GB/s: "
                              f"{verdict.verdict} {verdict.relative_change:+.1%} -> "
                              f"{kept.verdict}")
            print(f"{judged} sessions judged: {total} flagged, {left} once the memory's "
                  f"moves are withheld")


if __name__ == "__main__":
    main()
