"""Which A/B workload resolves the most per minute on this machine, and what a start costs.

For each configuration (threads a side x tokens generated a request) two llama-servers of
one binary serve the test model (an A/A), take turns in ABBA pairs for ``--seconds``, and
the decode log-ratios give: the pair SD, the lag-1 autocorrelation, seconds a pair, and
the half-width a minute of pairs buys (``resolution``: 1.96 x SD x sqrt(serial factor /
pairs a minute)). Restarting both servers is timed too (``start_s``). Configurations
take turns ``--rounds`` times so the machine's drift hits all alike; each round is one
server start, and the spread of a configuration's round means beyond their pairs' error
is its start level.

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/ab_workload_choice.py --seconds 60 --rounds 3
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from pytest_tokperf.bench.ab import PairedAB, pairs_of
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.launch.process import LaunchSpec, resolve_server_binary, start_llama_server
from pytest_tokperf.model.spec import TEST_MODEL
from pytest_tokperf.model.writer import cached_model
from pytest_tokperf.results import Workload
from pytest_tokperf.stats.metric import DECODE
from pytest_tokperf.stats.paired import serial_factor


def one(binary: Path, model: Path, threads: int, generate: int, seconds: float,
        logs: Path, salt: int) -> dict[str, float]:
    began = time.monotonic()
    started = []
    try:
        for side in range(2):
            spec = LaunchSpec(binary=binary, model=model, threads=threads, parallel=1,
                              context_size=1024, startup_timeout_s=120,
                              log_path=logs / f"t{threads}-g{generate}-{side}-{salt}.log")
            started.append(start_llama_server(spec))
        start_s = time.monotonic() - began
        engines = [create_engine("llama-server", s.url) for s in started]
        infos = {"control": engines[0].info(), "candidate": engines[1].info()}
        ab = PairedAB(engines[0], engines[1],
                      MeasureOptions(salt_base=salt, budget_s=seconds, sample_load=False),
                      infos=infos)
        ab.run(Workload(prompt_tokens=16, generate_tokens=generate, repetitions=100000,
                        warmup=2))
        pairs = pairs_of(ab._rounds, DECODE)
        for e in engines:
            e.close()
    finally:
        for s in started:
            s.stop()
    d = np.asarray(pairs.log_ratios)
    spent = time.monotonic() - began - start_s
    r = float(np.corrcoef(d[1:], d[:-1])[0, 1]) if len(d) > 3 else math.nan
    return {"pairs": len(d), "mean": float(d.mean()), "sd": float(d.std(ddof=1)),
            "lag1": r, "serial": serial_factor(d), "s_pair": spent / len(d),
            "start_s": start_s}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--generate", default="8,32,128")
    a = p.parse_args()
    binary = resolve_server_binary(None, None)
    model = cached_model(TEST_MODEL)
    configs = [(int(t), int(g)) for t in a.threads.split(",") for g in a.generate.split(",")]
    got: dict[tuple[int, int], list[dict[str, float]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for k, (t, g) in enumerate(configs if r % 2 == 0 else configs[::-1]):
                row = one(binary, model, t, g, a.seconds, Path(tmp), salt=1000 * r + k)
                got[(t, g)].append(row)
                print(f"round {r + 1} threads {t} gen {g}: " + " ".join(
                    f"{key} {value:.4g}" for key, value in row.items()), flush=True)
    print("\n| threads | gen | pairs | s/pair | pair SD | lag-1 | serial | ±95% per minute "
          "| start s | start level |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (t, g), rows in got.items():
        sd = statistics.fmean(x["sd"] for x in rows)
        serial = statistics.fmean(x["serial"] for x in rows)
        s_pair = statistics.fmean(x["s_pair"] for x in rows)
        per_min = 1.96 * sd * math.sqrt(serial * s_pair / 60)
        means = [x["mean"] for x in rows]
        within = statistics.fmean(x["sd"] ** 2 * x["serial"] / x["pairs"] for x in rows)
        level = (math.sqrt(max(0.0, statistics.variance(means) - within))
                 if len(means) > 1 else math.nan)
        print(f"| {t} | {g} | {sum(x['pairs'] for x in rows):.0f} | {s_pair:.2f} | {sd:.1%} "
              f"| {statistics.fmean(x['lag1'] for x in rows):.2f} | {serial:.2f} "
              f"| {per_min:.1%} | {statistics.fmean(x['start_s'] for x in rows):.1f} "
              f"| {level:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
