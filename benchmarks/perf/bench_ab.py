"""How well the same-run A/B judges real engines on this machine, beside today's gates.

Cases (each an A/B of a baseline and a candidate llama-server, ``--threads`` each):

* ``null``: the same binary and model on both sides (A/A): any flag is a false alarm;
* ``bytes6``: the same binary serving two generated models that differ only in their layer
  count (16 vs 17 layers at the default width): the candidate streams ~5.8% more bytes per
  token, so its decode is that much slower (physics, not a guess): must be "regression";
* ``bytes3``: 32 vs 33 layers (~3%): "regression" or "inconclusive", never "unchanged";
* ``avx2``: b11434 built with ``-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF`` against
  the default build on the default model: decode unchanged or inconclusive, prefill/TTFT
  a regression.

Each run starts both servers, measures ``--pairs`` ABBA pairs (``bench.ab``) and prints
per metric the verdict, the interval's width and the wall time. Beside each A/B run, with
the same servers started one at a time (sequential sessions): today's history gate
(``stats.compare`` of the candidate session against the baseline sessions as earlier
versions) and llama.cpp's compare-commits figure (ratio of the two sessions' means).
For the bytes cases a longer run gives an independent speed ratio (more tokens, more
pairs, pooled) to compare with the bytes ratio.

Run::

    PYTHONPATH=$PWD python benchmarks/perf/bench_ab.py --case null --case bytes6 --runs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_tokperf.bench.ab import ABResult, ab_document, pair_metrics, pairs_of, run_paired_ab
from pytest_tokperf.bench.measure import MeasureOptions, attach_process_clock, run_workload
from pytest_tokperf.builds.identity import build_changes
from pytest_tokperf.builds.install import cmake_flags, installed_llama_server
from pytest_tokperf.engines.base import Engine
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.launch.process import LaunchSpec, start_llama_server
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
from pytest_tokperf.model.writer import MAIN_MODEL, cached_model
from pytest_tokperf.results import Workload, judged_decode_values
from pytest_tokperf.stats.comparing import compare
from pytest_tokperf.stats.metric import DECODE, TTFT
from pytest_tokperf.stats.paired import judge_ab
from pytest_tokperf.stats.verdict import Comparison

AVX2_OFF = ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF")


def layered(n: int) -> Path:
    spec = MAIN_MODEL if n == MAIN_MODEL.n_layer else dataclasses.replace(
        MAIN_MODEL, n_layer=n, name=f"tokperf-main-L{n}")
    return cached_model(spec)


def avx2_off_binary() -> Path | None:
    flags = tuple(f for f in cmake_flags() if not f.startswith("-DGGML_NATIVE")) + AVX2_OFF
    found = installed_llama_server(flags=flags)
    return found.binary if found else None


@contextmanager
def servers(sides: list[tuple[Path, Path]], threads: int, logs: Path) -> Iterator[list[Engine]]:
    started = []
    try:
        for i, (binary, model) in enumerate(sides):
            spec = LaunchSpec(binary=binary, model=model, threads=threads, parallel=1,
                              context_size=1024, log_path=logs / f"side{i}-{time.time_ns()}.log",
                              startup_timeout_s=300)
            started.append(start_llama_server(spec))
        engines = [create_engine("llama-server", s.url) for s in started]
        for engine, server in zip(engines, started, strict=True):
            attach_process_clock(engine, server.process.pid)
        yield engines
        for e in engines:
            e.close()
    finally:
        for s in started:
            s.stop()


@contextmanager
def neighbours(n: int) -> Iterator[None]:
    """``n`` processes spinning on the CPUs for as long as the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def sequential(binary: Path, model: Path, workload: Workload, threads: int, logs: Path,
               salt: int) -> tuple[list[float], list[float]]:
    """One session alone: start, measure, stop; (decode values, TTFT values)."""
    with servers([(binary, model)], threads, logs) as (engine,):
        r = run_workload(engine, workload, MeasureOptions(salt_base=salt))
    return judged_decode_values(r.samples), [s.ttft_s for s in r.samples]


def wall_verdicts(ab: ABResult) -> list[Comparison]:
    """The same pairs judged on the wall clock (what the A/B judged before the engines'
    own clock): one repetition per side per pair, in order."""
    rounds = [([b], [c]) for b, c in zip(ab.baseline.samples, ab.candidate.samples, strict=True)]
    pairs = {m.name: pairs_of(rounds, m, net=False) for m in pair_metrics()}
    return list(judge_ab({k: p for k, p in pairs.items() if p.n}).values())


def bytes_ratio(a: Path, b: Path) -> float:
    return footprint(load_gguf(b)).weights_bytes / footprint(load_gguf(a)).weights_bytes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", choices=["null", "bytes6", "bytes3", "avx2"])
    p.add_argument("--runs", type=int, default=3, help="A/B runs per case")
    p.add_argument("--pairs", type=int, default=8, help="ABBA pairs per A/B run")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-sequential", action="store_true",
                   help="skip the history-gate / compare-commits sessions beside each run")
    p.add_argument("--long-pairs", type=int, default=0,
                   help="bytes cases: one extra long A/B of this many pairs of 4x the tokens "
                   "for an independent speed ratio (0: skip)")
    p.add_argument("--neighbours", type=int, default=0,
                   help="busy-loop processes kept running during each A/B (a shared runner's "
                   "other jobs): the wall-clock and the net-of-wait verdicts are printed side by side")
    p.add_argument("--save", default="/tmp/tokperf-bench-ab",
                   help="folder for each A/B's per-pair figures (bench.ab.ab_document JSON)")
    a = p.parse_args(argv)
    save = Path(a.save)
    save.mkdir(parents=True, exist_ok=True)
    default = installed_llama_server()
    if default is None:
        print("llama-server is not built: run `tokperf install-engine llama-server`")
        return 2
    logs = Path(tempfile.mkdtemp(prefix="tokperf-bench-ab-"))
    workload = Workload(prompt_tokens=a.prompt, generate_tokens=a.tokens,
                        repetitions=a.pairs, warmup=1)
    print(f"{a.runs} runs x {a.pairs} pairs, prompt {a.prompt}, {a.tokens} tokens, "
          f"threads {a.threads}, {a.neighbours} busy neighbours; logs {logs}")
    for case in a.case or ["null", "bytes6"]:
        base_bin = cand_bin = default.binary
        base_model = cand_model = layered(MAIN_MODEL.n_layer)
        if case == "bytes6":
            base_model, cand_model = layered(16), layered(17)
        elif case == "bytes3":
            base_model, cand_model = layered(32), layered(33)
        elif case == "avx2":
            found = avx2_off_binary()
            if found is None:
                print(f"\n== {case}: skipped, the AVX2-off build is not cached")
                continue
            cand_bin = found
        ratio = bytes_ratio(base_model, cand_model)
        print(f"\n== {case}: baseline {base_model.name}, candidate {cand_model.name}; "
              f"bytes per token candidate/baseline {ratio:.4f} (decode expected "
              f"{1 / ratio - 1:+.2%} if bandwidth-bound)")
        print(f"   changed: {build_changes(base_bin, cand_bin)}")
        counts: dict[str, Counter[str]] = {m: Counter() for m in ("decode", "prefill", "ttft")}
        wall_counts: dict[str, Counter[str]] = {m: Counter() for m in ("decode", "prefill", "ttft")}
        gate_counts: dict[str, Counter[str]] = {m: Counter() for m in ("decode", "ttft")}
        walls, ccr = [], []
        widths: dict[str, list[float]] = {m: [] for m in ("decode", "prefill", "ttft")}
        for run in range(a.runs):
            started = time.monotonic()
            with servers([(base_bin, base_model), (cand_bin, cand_model)], a.threads, logs) as (b, c), \
                    neighbours(a.neighbours):
                ab: ABResult = run_paired_ab(b, c, workload, MeasureOptions(salt_base=run * 1000),
                                             baseline_model_given=base_model != cand_model)
            wall = time.monotonic() - started
            walls.append(wall)
            (save / f"{case}-{time.strftime('%H%M%S')}-{run}.json").write_text(
                json.dumps(ab_document([(case, ab)]), indent=1))
            line = []
            for v in ab.verdicts:
                counts[v.metric][v.verdict] += 1
                width = (v.ci_high - v.ci_low) / 2
                widths[v.metric].append(width)
                line.append(f"{v.metric} {v.verdict} {v.relative_change:+.1%} (±{width:.1%})")
            print(f"   run {run + 1}: A/B {'; '.join(line)}; {ab.pairs} pairs, {wall:.0f} s",
                  flush=True)
            if ab.clock:
                wall_line = []
                for w in wall_verdicts(ab):
                    wall_counts[w.metric][w.verdict] += 1
                    wall_line.append(f"{w.metric} {w.verdict} {w.relative_change:+.1%} "
                                     f"(±{(w.ci_high - w.ci_low) / 2:.1%})")
                print(f"          {ab.clock}\n          the same pairs on the wall clock: "
                      f"{'; '.join(wall_line)}", flush=True)
            if a.no_sequential:
                continue
            # today's gate and compare-commits on sequential sessions of the same workload:
            # baseline, candidate, baseline (the history gate needs earlier versions).
            seq_w = dataclasses.replace(workload, repetitions=max(3, a.pairs // 2))
            s0 = time.monotonic()
            b1 = sequential(base_bin, base_model, seq_w, a.threads, logs, run * 1000 + 500)
            c1 = sequential(cand_bin, cand_model, seq_w, a.threads, logs, run * 1000 + 600)
            b2 = sequential(base_bin, base_model, seq_w, a.threads, logs, run * 1000 + 700)
            seq_wall = time.monotonic() - s0
            gate_line = []
            for i, metric in ((0, DECODE), (1, TTFT)):
                verdict = compare([b1[i], b2[i]], c1[i], metric)
                gate_counts[metric.name][verdict.verdict] += 1
                gate_line.append(f"{metric.name} {verdict.verdict} {verdict.relative_change:+.1%}")
            cc = statistics.fmean(c1[0]) / statistics.fmean(b1[0])
            ccr.append(cc)
            print(f"          history gate (2 baseline sessions, 1 candidate): "
                  f"{'; '.join(gate_line)}; compare-commits decode B/A {cc:.3f}; "
                  f"{seq_wall:.0f} s", flush=True)
        print(f"   A/B verdicts over {a.runs} runs: " + "; ".join(
            f"{m} {dict(c)}" for m, c in counts.items()))
        if any(wall_counts.values()):
            print("   the same pairs on the wall clock: " + "; ".join(
                f"{m} {dict(c)}" for m, c in wall_counts.items()))
        print(f"   A/B wall time per verdict: median {statistics.median(walls):.0f} s; interval "
              "half-width (99.8%) median: " + ", ".join(
                  f"{m} ±{statistics.median(w):.1%}" for m, w in widths.items() if w))
        if gate_counts["decode"]:
            print(f"   history gate over {a.runs} runs: " + "; ".join(
                f"{m} {dict(c)}" for m, c in gate_counts.items()))
        if ccr:
            spread = statistics.stdev(ccr) if len(ccr) > 1 else math.nan
            print("   compare-commits decode B/A: " + ", ".join(f"{x:.3f}" for x in ccr)
                  + f" (SD {spread:.3f})")
        if a.long_pairs and case.startswith("bytes"):
            long_w = dataclasses.replace(workload, generate_tokens=a.tokens * 4,
                                         repetitions=a.long_pairs)
            with servers([(base_bin, base_model), (cand_bin, cand_model)], a.threads, logs) as (b, c):
                ab = run_paired_ab(b, c, long_w, MeasureOptions(salt_base=99_000),
                                   baseline_model_given=True)
            lv = ab.verdict("decode")
            assert lv is not None
            print(f"   long run ({a.long_pairs} pairs x {a.tokens * 4} tokens): decode speed "
                  f"ratio {1 + lv.relative_change:.4f} [{1 + lv.ci_low:.4f}, {1 + lv.ci_high:.4f}] "
                  f"vs bytes-predicted {1 / ratio:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
