"""Where the bottleneck moves: per-stream and aggregate speed at 1, 2, 4 concurrent streams.

    .venv/bin/python lab/drivers/bench_concurrency.py [--model main] [--levels 1,2,4]

One decode step reads the weights once for every stream, so aggregate tokens/s should
grow with the number of streams while memory is the wall; per stream the ceiling is
bandwidth / (weights + streams x KV). When aggregate stops growing, compute (here: two
CPU cores) has become the wall. Bandwidth is probed before and after each level.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pytest_tokperf.bench.ceilings import CeilingSource
from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.results import Workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.settings import resolve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="main")
    parser.add_argument("--levels", default="1,2,4")
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", default=str(os.cpu_count() or 1))
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    cli = {"engine": "llama-server", "model": args.model, "threads": args.threads,
           "parallel": str(max(levels)), "ctx_size": "1024"}
    settings = resolve(cli=cli.get, ini=lambda _: None, env={}, rootdir=Path.cwd())
    session = EngineSession(settings, log_dir=Path("/tmp/tokperf-bench"),
                            progress=lambda m: print(f"# {m}", file=sys.stderr))
    ceilings = CeilingSource(threads=int(args.threads))
    rows = []
    try:
        engine = session.engine()
        for n in levels:
            ceilings.probe()
            workload = Workload(64, args.generate, concurrency=n, repetitions=args.reps, warmup=1)
            result = run_workload(engine, workload, MeasureOptions(salt_base=1000 * n))
            ceiling = ceilings.ceiling_for(result, session.model_path)
            rows.append((n, result, ceiling))
    finally:
        session.close()
    print(f"model {session.model_path}, threads {args.threads}, prompt 64, "
          f"{args.generate} tokens per stream, {args.reps} reps per level")
    print(f"{'streams':>7}  {'per-stream decode':>17}  {'aggregate tok/s':>15}  "
          f"{'per-stream ceiling':>18}  {'efficiency':>10}  {'aggregate / 1 stream':>20}")
    base = None
    for n, result, ceiling in rows:
        per = result.decode_tokens_per_s.median if result.decode_tokens_per_s else 0.0
        agg = result.aggregate_tokens_per_s.median if result.aggregate_tokens_per_s else 0.0
        base = base or agg
        c = ceiling.decode_tokens_per_s if ceiling else float("nan")
        print(f"{n:>7}  {per:>17.2f}  {agg:>15.2f}  {c:>18.2f}  {per / c:>10.0%}  "
              f"{agg / base:>19.2f}x")
    print("aggregate = output tokens of all streams / wall time (prefill included); "
          "efficiency = per-stream decode / per-stream ceiling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
