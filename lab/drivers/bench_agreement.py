"""Is the client the noisy part? Client vs engine figures on the default model.

    .venv/bin/python lab/drivers/bench_agreement.py [--model main|test|PATH] [--reps 8]

Starts llama-server with the default (generated, ~1.1 GB F16) model, runs the same
workload several times, and prints per repetition the client's decode tok/s
((N - 1) / (t_last - t_first) over SSE) beside the engine's own
((predicted_n - 1) / predicted_ms), and TTFT on the client minus the engine's
prompt time. Figures are measured side by side in one run, so the ratios hold even
on a noisy machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.results import Workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.settings import resolve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="main")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--threads", default=str(os.cpu_count() or 1))
    args = parser.parse_args()
    cli = {"engine": "llama-server", "model": args.model, "threads": args.threads}
    settings = resolve(cli=cli.get, ini=lambda _: None, env={}, rootdir=Path.cwd())
    session = EngineSession(settings, log_dir=Path("/tmp/tokperf-bench"),
                            progress=lambda m: print(f"# {m}", file=sys.stderr))
    try:
        workload = Workload(args.prompt, args.generate, repetitions=args.reps, warmup=1)
        result = run_workload(session.engine(), workload, MeasureOptions())
    finally:
        session.close()
    print(f"engine {result.engine.build}, model {session.model_path}, threads {args.threads}")
    print(f"{'rep':>3}  {'client tok/s':>12}  {'engine tok/s':>12}  {'rel diff':>8}  "
          f"{'TTFT ms':>8}  {'engine prompt ms':>16}  {'TTFT - engine ms':>16}")
    diffs, gaps = [], []
    for i, s in enumerate(result.samples, 1):
        client, engine = s.decode_tokens_per_s, s.engine_decode_tokens_per_s
        assert client is not None and engine is not None and s.engine_prefill_s is not None
        diff = (client - engine) / engine
        gap = s.ttft_s - s.engine_prefill_s
        diffs.append(abs(diff))
        gaps.append(gap)
        print(f"{i:>3}  {client:>12.3f}  {engine:>12.3f}  {diff:>+8.3%}  {s.ttft_s * 1e3:>8.1f}  "
              f"{s.engine_prefill_s * 1e3:>16.1f}  {gap * 1e3:>16.2f}")
    print(f"median |client - engine| / engine decode: {statistics.median(diffs):.3%}")
    print(f"TTFT client - engine prompt time: median {statistics.median(gaps) * 1e3:.2f} ms, "
          f"range {min(gaps) * 1e3:.2f} to {max(gaps) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
