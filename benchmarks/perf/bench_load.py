"""What the machine-load sampler costs, and what it reads with a busy-loop neighbour.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/perf/bench_load.py [--seconds 2] [--spinners 2]

Prints, for a window of ``--seconds``: the sampler's own CPU (its run-queue poll thread,
``LoadSampler.cost_s``) per second of window, the wall time of one start + stop (what a
repetition pays), and the reading itself, first as the machine is, then with
``--spinners`` busy-loop processes running (killed at the end). No engine is started.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from pytest_tokperf.hardware.load import LoadSampler


def _window(seconds: float, pids: tuple[int, ...]) -> None:
    sampler = LoadSampler(pids)
    started = time.perf_counter()
    sampler.start()
    begin = time.perf_counter() - started
    time.sleep(seconds)
    ended = time.perf_counter()
    load = sampler.stop()
    end = time.perf_counter() - ended
    print(f"  start {begin * 1e3:.2f} ms, stop {end * 1e3:.2f} ms, poll CPU "
          f"{sampler.cost_s / load.wall_s * 1e3:.2f} ms per s ({load.samples} samples)")
    print(f"  {load.describe()}; busy {load.busy_cpus:.2f}, engine {load.engine_cpus}, "
          f"own {load.own_cpus:.3f}, loaded: {load.loaded}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--spinners", type=int, default=2)
    args = parser.parse_args()
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        costs = []
        for _ in range(20):  # start + stop of an empty window: a repetition's overhead
            t = time.perf_counter()
            LoadSampler((idle.pid,)).start().stop()
            costs.append(time.perf_counter() - t)
        print(f"empty window start+stop: median {statistics.median(costs) * 1e3:.2f} ms "
              f"(20 runs)")
        print("as the machine is (an idle process standing in for the engine):")
        _window(args.seconds, (idle.pid,))
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(args.spinners)]
        time.sleep(0.3)
        print(f"with {args.spinners} busy-loop neighbours:")
        _window(args.seconds, (idle.pid,))
    finally:
        for p in (*spinners, idle):
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
