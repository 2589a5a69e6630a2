"""Does this machine's phase belong to the time or to the server process?

Two llama-servers on the same model file (one slot, ``--threads`` each) are up at once;
repetitions alternate A B B A ... (never both generating at the same moment; the idle one
waits). After every block of ``--pairs`` pairs both servers are stopped and started
again. Printed per block: each side's mean decode, the mean paired log-ratio B/A; then
the spread of block means against what the spread inside blocks predicts for them
(one-way ANOVA on the per-pair log-ratios, blocks as groups):

* if the block means of the *ratio* spread no more than the pairs inside a block
  predict, a server start carries no level of its own: pairs are the unit and one start
  per side is enough;
* if they spread more (F test), each start carries its own level, so a same-run A/B needs
  several starts per side and an interval built from block means.

Run::

    PYTHONPATH=$PWD python lab/drivers/bench_ab_phase.py --blocks 4 --pairs 6
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from scipy import stats as sps

from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.launch.process import LaunchSpec, resolve_server_binary, start_llama_server
from pytest_tokperf.model.writer import MAIN_MODEL, cached_model
from pytest_tokperf.results import Workload, judged_decode_values


def one(engine: object, workload: Workload, salt: int) -> tuple[float, float]:
    """(judged decode tok/s, TTFT s) of one repetition."""
    result = run_workload(engine, workload, MeasureOptions(salt_base=salt))  # type: ignore[arg-type]
    return statistics.fmean(judged_decode_values(result.samples)), result.ttft_s.median


def anova(groups: list[list[float]]) -> tuple[float, float, float, float]:
    """(F, p, SD of block means, SD of block means that the within-block spread predicts)."""
    means = [statistics.fmean(g) for g in groups]
    within = statistics.fmean([statistics.variance(g) for g in groups])
    n = statistics.fmean([len(g) for g in groups])
    between = statistics.variance(means)
    f = between * n / within if within > 0 else math.inf
    df1, df2 = len(groups) - 1, sum(len(g) - 1 for g in groups)
    return f, float(sps.f.sf(f, df1, df2)), math.sqrt(between), math.sqrt(within / n)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", type=int, default=4, help="server starts (both sides restarted)")
    p.add_argument("--pairs", type=int, default=6, help="pairs per block (ABBA order)")
    p.add_argument("--tokens", type=int, default=32, help="generated tokens per repetition")
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default=None, help="GGUF (default: the generated main model)")
    p.add_argument("--bin", default=None, help="llama-server binary (default: the cached build)")
    a = p.parse_args(argv)
    binary = resolve_server_binary(a.bin)
    model = Path(a.model) if a.model else cached_model(MAIN_MODEL)
    workload = Workload(prompt_tokens=a.prompt, generate_tokens=a.tokens, repetitions=1, warmup=0)
    logs = Path(tempfile.mkdtemp(prefix="tokperf-ab-phase-"))
    print(f"binary {binary}\nmodel {model.name}  threads {a.threads}  {a.blocks} blocks x "
          f"{a.pairs} pairs, {a.tokens} tokens")
    ratios: list[list[float]] = []
    levels: dict[str, list[list[float]]] = {"A": [], "B": []}
    ttft_ratios: list[list[float]] = []
    started = time.monotonic()
    salt = 0
    for block in range(a.blocks):
        servers = {}
        try:
            for side in "AB":
                spec = LaunchSpec(binary=binary, model=model, threads=a.threads, parallel=1,
                                  context_size=1024,
                                  log_path=logs / f"{side}-{block}.log")
                servers[side] = start_llama_server(spec)
            engines = {s: create_engine("llama-server", servers[s].url) for s in "AB"}
            for s in "AB":  # warm-up: first request after start is slow
                one(engines[s], replace(workload, generate_tokens=8), 10**6 + block)
            dec: dict[str, list[float]] = {"A": [], "B": []}
            ttft: dict[str, list[float]] = {"A": [], "B": []}
            for i in range(a.pairs):
                order = "AB" if i % 2 == 0 else "BA"
                for s in order:
                    d, t = one(engines[s], workload, salt)
                    dec[s].append(d)
                    ttft[s].append(t)
                salt += 1
            for e in engines.values():
                e.close()
        finally:
            for server in servers.values():
                server.stop()
        r = [math.log(b / x) for x, b in zip(dec["A"], dec["B"])]
        rt = [math.log(b / x) for x, b in zip(ttft["A"], ttft["B"])]
        ratios.append(r)
        ttft_ratios.append(rt)
        for s in "AB":
            levels[s].append([math.log(v) for v in dec[s]])
        print(f"block {block + 1}: A {statistics.fmean(dec['A']):6.2f} tok/s  "
              f"B {statistics.fmean(dec['B']):6.2f} tok/s  B/A {math.expm1(statistics.fmean(r)):+.2%}"
              f"  (pair SD {statistics.stdev(r):.2%})  TTFT B/A {math.expm1(statistics.fmean(rt)):+.2%}",
              flush=True)
    print(f"\n{time.monotonic() - started:.0f} s in all")
    for name, groups in (("decode level, side A", levels["A"]), ("decode level, side B", levels["B"]),
                         ("decode ratio B/A", ratios), ("TTFT ratio B/A", ttft_ratios)):
        f, pv, sd_b, sd_pred = anova(groups)
        print(f"{name:22s}: SD of block means {sd_b:6.2%}, predicted by the spread inside "
              f"blocks {sd_pred:6.2%}  (F={f:.2f}, p={pv:.3g})")
    a_means = [statistics.fmean(g) for g in levels["A"]]
    b_means = [statistics.fmean(g) for g in levels["B"]]
    if len(a_means) > 2:
        print(f"block means of A and B move together: r={statistics.correlation(a_means, b_means):+.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
