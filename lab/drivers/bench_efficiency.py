"""Decode efficiency against the measured bandwidth ceiling, at several KV depths.

    .venv/bin/python lab/drivers/bench_efficiency.py [--model main] [--depths 64,1024,3072]

Starts llama-server with the default generated model (~1.1 GB F16, memory-bound on
this CPU) and, for each depth (the prompt length; decode then reads the KV cache of
every earlier token), probes read bandwidth right before and right after the
decode runs, computes the ceiling at the mean KV depth during decode, and prints
efficiency = decode / ceiling against both probes. Everything in one run, side by
side, because this machine's bandwidth drifts +/-15-20% within minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pytest_tokperf.ceiling import compute_ceiling
from pytest_tokperf.bench.ceilings import mean_decode_depth
from pytest_tokperf.hardware.probe import probe_read_bandwidth
from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.results import Workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.settings import resolve


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="main")
    parser.add_argument("--depths", default="64,1024,3072")
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", default=str(os.cpu_count() or 1))
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    cli = {"engine": "llama-server", "model": args.model, "threads": args.threads,
           "ctx_size": str(max(depths) + args.generate + 64)}
    settings = resolve(cli=cli.get, ini=lambda _: None, env={}, rootdir=Path.cwd())
    session = EngineSession(settings, log_dir=Path("/tmp/tokperf-bench"),
                            progress=lambda m: print(f"# {m}", file=sys.stderr))
    threads = int(args.threads)
    rows = []
    try:
        engine = session.engine()
        assert session.model_path is not None
        model = load_gguf(session.model_path)
        for depth in depths:
            before = probe_read_bandwidth(threads=threads)
            workload = Workload(depth, args.generate, repetitions=args.reps, warmup=1)
            result = run_workload(engine, workload, MeasureOptions(salt_base=depth))
            after = probe_read_bandwidth(threads=threads)
            fp = footprint(model, depth_tokens=mean_decode_depth(workload))
            decode = result.decode_tokens_per_s.median if result.decode_tokens_per_s else 0.0
            engine_decode = (result.engine_decode_tokens_per_s.median
                             if result.engine_decode_tokens_per_s else 0.0)
            ceilings = [compute_ceiling(fp, p.bandwidth).decode_tokens_per_s for p in (before, after)]
            rows.append((depth, fp, before, after, ceilings, decode, engine_decode))
    finally:
        session.close()
    print(f"model {session.model_path} ({model.file_bytes / 1e9:.2f} GB), threads {threads}, "
          f"{args.generate} tokens x {args.reps} reps per depth")
    print(f"{'depth':>6}  {'weights GB':>10}  {'KV MB':>7}  {'BW before':>9}  {'BW after':>9}  "
          f"{'ceiling':>15}  {'decode':>7}  {'engine':>7}  {'efficiency':>11}")
    for depth, fp, before, after, ceilings, decode, engine_decode in rows:
        lo, hi = sorted(ceilings)
        print(f"{depth:>6}  {fp.weights_bytes / 1e9:>10.3f}  {fp.kv_bytes / 1e6:>7.2f}  "
              f"{before.bandwidth.bytes_per_s / 1e9:>7.1f}GB  {after.bandwidth.bytes_per_s / 1e9:>7.1f}GB  "
              f"{lo:>6.1f}-{hi:<6.1f}tok/s  {decode:>7.2f}  {engine_decode:>7.2f}  "
              f"{decode / hi:>4.0%}-{decode / lo:<4.0%}")
    print("efficiency = client decode / ceiling; the range spans the probes before and after.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
