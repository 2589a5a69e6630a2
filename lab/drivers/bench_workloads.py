"""Warm vs cold prefix TTFT, and speculative decoding A/B, on one started llama-server.

    .venv/bin/python lab/drivers/bench_workloads.py [--model main] [--prompt 1024]
        [--cached 960] [--drafts self,small] [--generate 64] [--reps 3]

Prefix: the same prompt length measured cold (salted, ``cache_prompt: false``) and
warm (the first ``--cached`` tokens primed by an unmeasured request, so the slot's KV
serves them), rounds alternating so drift hits both; prints TTFT of each and the
ratio. Speculation: for each draft, base and drafting server alternate rounds on the
same prompts; prints decode of each side, the multiplier and the acceptance rate.
All figures come from one run, side by side (this machine drifts 15-20%).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.results import BenchResult, Workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.settings import resolve
from pytest_tokperf.bench.speculative import run_speculative_ab


def _median(result: BenchResult, name: str) -> float:
    summary = getattr(result, name)
    return float(summary.median) if summary is not None else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="main")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--cached", type=int, default=960)
    parser.add_argument("--drafts", default="self,small")
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", default=str(os.cpu_count() or 1))
    args = parser.parse_args()
    cli = {"engine": "llama-server", "model": args.model, "threads": args.threads,
           "ctx_size": str(args.prompt + args.generate + 64)}
    settings = resolve(cli=cli.get, ini=lambda _: None, env={}, rootdir=Path.cwd())
    session = EngineSession(settings, log_dir=Path("/tmp/tokperf-bench"),
                            progress=lambda m: print(f"# {m}", file=sys.stderr))
    cold_warm: dict[str, list[BenchResult]] = {"cold": [], "warm": []}
    ab_rows = []
    try:
        engine = session.engine()
        for rep in range(args.reps + 1):  # the first round of each is a warm-up
            for kind, cached in (("cold", 0), ("warm", args.cached)):
                workload = Workload(args.prompt, 8, cached_prefix_tokens=cached,
                                    repetitions=1, warmup=0)
                result = run_workload(engine, workload, MeasureOptions(salt_base=100 * rep))
                if rep:
                    cold_warm[kind].append(result)
        for draft in [d for d in args.drafts.split(",") if d]:
            spec_engine, name = session.speculative_engine(draft)
            ab = run_speculative_ab(engine, spec_engine,
                                    Workload(16, args.generate, repetitions=args.reps, warmup=1),
                                    MeasureOptions(salt_base=10_000 + len(ab_rows) * 100))
            ab_rows.append((draft, name, ab))
    finally:
        session.close()

    print(f"model {session.model_path}, threads {args.threads}, {args.reps} reps per side")
    print(f"\nprefix cache: prompt {args.prompt} tokens, warm = first {args.cached} primed")
    print(f"{'':>5}  {'TTFT ms':>9}  {'engine prefill ms':>17}  {'tokens processed':>16}  "
          f"{'cached':>6}")
    ttft = {}
    for kind, results in cold_warm.items():
        samples = [s for r in results for s in r.samples]
        ttft[kind] = sorted(s.ttft_s for s in samples)[len(samples) // 2]
        prefill = sorted(s.engine_prefill_s or 0.0 for s in samples)[len(samples) // 2]
        print(f"{kind:>5}  {ttft[kind] * 1e3:>9.1f}  {prefill * 1e3:>17.1f}  "
              f"{samples[0].prompt_tokens:>16}  {samples[0].cached_prompt_tokens or 0:>6}")
    print(f"warm TTFT = {ttft['warm'] / ttft['cold']:.3f} x cold "
          f"(new tokens: {args.prompt - args.cached} of {args.prompt})")

    print(f"\nspeculative decoding: prompt 16, generate {args.generate}")
    print(f"{'draft':>28}  {'base tok/s':>10}  {'spec tok/s':>10}  {'multiplier':>10}  "
          f"{'engine mult.':>12}  {'acceptance':>10}")
    for draft, name, ab in ab_rows:
        rate = ab.acceptance_rate
        print(f"{draft + ' (' + name[:18] + ')':>28}  "
              f"{_median(ab.base, 'decode_tokens_per_s'):>10.2f}  "
              f"{_median(ab.accelerated, 'decode_tokens_per_s'):>10.2f}  "
              f"{ab.multiplier or float('nan'):>10.3f}  {ab.engine_multiplier or float('nan'):>12.3f}  "
              f"{'-' if rate is None else f'{rate:.0%}':>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
