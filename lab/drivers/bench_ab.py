"""How well the same-run A/B judges real engines on this machine, beside today's gates.

Cases (each an A/B of a control and a candidate llama-server, ``--threads`` each):

* ``null``: the same binary and model on both sides (A/A): any flag is a false alarm;
* ``bytes6``: the same binary serving two generated models that differ only in their layer
  count (16 vs 17 layers at the default width): the candidate streams ~5.8% more bytes per
  token, so its decode is that much slower (physics, not a guess): must be "regression".
  The two servers load their models with ``--load-mode none`` (``--mmap`` to map them):
  mapped from the page cache, the two files are backed by 2 MiB pages to different degrees;
* ``bytes3``: 32 vs 33 layers (~3%): "regression" or "inconclusive", never "unchanged";
* ``avx2``: b11434 built with ``-DGGML_NATIVE=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF`` against
  the default build on the default model: prefill/TTFT a regression; the issue expects
  decode unchanged or inconclusive and the table scores a decode flag as false, but decode
  here is partly core-bound and loses ~4% at 2 threads, ~8% at 1
  (lab/2026-12-02-ab-twenty-run-rates.md).

Each run starts both servers, measures ``--pairs`` ABBA pairs (``bench.ab``) and prints
per metric the verdict, the interval's width and the wall time; the cases take turns run
by run, and the end prints a table per case: verdicts found / false / missed per metric,
the decode change and half-width, the wall time per A/B. The defaults (200 pairs of 8
tokens after a 4-token prompt, 2 threads a side: about 3 minutes a run) are the
configuration measured in lab/2026-12-02-ab-page-cache-and-defaults.md: on this VM the
level moves within a second, so many short pairs resolve more per minute than few long
ones. ``--budget-s 570`` instead stops each run by the clock (server starts included), as
a CI job with a time limit would: as many pairs as the machine fits, at most ``--pairs``.
Beside each A/B run, with the same servers started one at a time (sequential sessions):
today's history gate (``stats.compare`` of the candidate session against the baseline
sessions as earlier versions) and llama.cpp's compare-commits figure (ratio of the two sessions' means).
For the bytes cases a longer run gives an independent speed ratio (more tokens, more
pairs, pooled) to compare with the bytes ratio.

Run::

    PYTHONPATH=$PWD python lab/drivers/bench_ab.py --case null --case bytes6 --runs 10 \
        --no-sequential
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
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scipy.stats import chi2

from pytest_tokperf.bench.ab import ABResult, pair_metrics, pairs_of, run_paired_ab
from pytest_tokperf.report.formats import ab_document
from pytest_tokperf.bench.measure import (
    MeasureOptions,
    attach_process_clock,
    run_workload,
)
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
from pytest_tokperf.stats.metric import DECODE, TTFT, pct
from pytest_tokperf.stats.paired import judge_ab
from pytest_tokperf.stats.verdict import Comparison
from pytest_tokperf.versions.paired import judge_documents

AVX2_OFF = ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF")


def layered(n: int) -> Path:
    spec = MAIN_MODEL if n == MAIN_MODEL.n_layer else dataclasses.replace(
        MAIN_MODEL, n_layer=n, name=f"tokperf-main-L{n}")
    return cached_model(spec)


def avx2_off_flags() -> tuple[str, ...]:
    return tuple(f for f in cmake_flags() if not f.startswith("-DGGML_NATIVE")) + AVX2_OFF


def avx2_off_binary() -> Path | None:
    found = installed_llama_server(flags=avx2_off_flags())
    return found.binary if found else None


_PIDS: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()


def attached_pids(*engines: Engine) -> tuple[int, ...]:
    """The server processes ``servers`` started for ``engines`` (others are left out), for
    ``MeasureOptions.engine_pids``: their CPU time is told apart from the neighbours'."""
    return tuple(pid for pid in (_PIDS.get(e) for e in engines) if pid is not None)


@contextmanager
def servers(sides: list[tuple[Path, Path]], threads: int, logs: Path,
            extra: tuple[str, ...] = ()) -> Iterator[list[Engine]]:
    started = []
    try:
        for i, (binary, model) in enumerate(sides):
            spec = LaunchSpec(binary=binary, model=model, threads=threads, parallel=1,
                              context_size=1024, log_path=logs / f"side{i}-{time.time_ns()}.log",
                              startup_timeout_s=300, extra_args=extra)
            started.append(start_llama_server(spec))
        engines = [create_engine("llama-server", s.url) for s in started]
        for engine, server in zip(engines, started, strict=True):
            attach_process_clock(engine, server.process.pid)
            _PIDS[engine] = server.process.pid
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
        r = run_workload(engine, workload, MeasureOptions(salt_base=salt,
                                                           engine_pids=attached_pids(engine)))
    return judged_decode_values(r.samples), [s.ttft_s for s in r.samples]


def wall_verdicts(ab: ABResult) -> list[Comparison]:
    """The same pairs judged on the wall clock (what the A/B judged before the engines'
    own clock): one repetition per side per pair, in order."""
    rounds = [([b], [c]) for b, c in zip(ab.control.samples, ab.candidate.samples, strict=True)]
    pairs = {m.name: pairs_of(rounds, m, net=False) for m in pair_metrics()}
    return list(judge_ab({k: p for k, p in pairs.items() if p.n}).values())


def bytes_ratio(a: Path, b: Path) -> float:
    return footprint(load_gguf(b)).weights_bytes / footprint(load_gguf(a)).weights_bytes


@dataclasses.dataclass(frozen=True)
class Case:
    """One A/B case: its two sides, and which verdicts count as found / as false alarms."""

    name: str
    ctrl_bin: Path
    ctrl_model: Path
    cand_bin: Path
    cand_model: Path

    @property
    def bytes_ratio(self) -> float:
        return bytes_ratio(self.ctrl_model, self.cand_model)

    def scored(self, metric: str, verdict: str) -> str:
        """'found' (the known step called as it is), 'false' (a change flagged where there
        is none), 'missed' (a step called unchanged) or '' (honest: inconclusive)."""
        flagged = verdict in ("regression", "improvement")
        if self.name == "null" or (self.name == "avx2" and metric == "decode"):
            return "false" if flagged else ""
        if verdict == "regression":
            return "found"
        if verdict == "improvement":
            return "false"
        return "missed" if verdict == "unchanged" else ""


def decode_shift(ab: ABResult) -> tuple[float, float]:
    """The run's decode log-ratio and its standard error, as the A/B judged them."""
    verdict = ab.verdict("decode")
    shift = verdict.shift if verdict is not None else None
    return (shift.log_shift, shift.std_error) if shift is not None else (math.nan, math.nan)


def between_starts(shifts: list[tuple[float, float]]) -> str:
    """Do the runs (each a fresh start of both servers) agree as their own intervals say?
    The spread of the run estimates against the mean in-run variance: a ratio well above 1
    means each start carries a level of its own, and one start per A/B is overconfident."""
    if len(shifts) < 3:
        return "fewer than 3 runs: the spread between starts is not estimated"
    means = [m for m, _ in shifts]
    between = statistics.variance(means)
    within = statistics.fmean(se * se for _, se in shifts)
    ratio = between / within
    p = float(chi2.sf(ratio * (len(means) - 1), len(means) - 1))
    part = math.sqrt(max(0.0, between - within))
    return (f"run-to-run SD of the decode log-ratio {math.sqrt(between):.2%} against "
            f"{math.sqrt(within):.2%} inside a run: variance ratio {ratio:.2f} "
            f"(p={p:.2g}); a start's own level ~{part:.2%} SD")


def cases(names: list[str], default: Path) -> list[Case]:
    out = []
    main_model = layered(MAIN_MODEL.n_layer)
    for name in names:
        if name == "bytes6":
            out.append(Case(name, default, layered(16), default, layered(17)))
        elif name == "bytes3":
            out.append(Case(name, default, layered(32), default, layered(33)))
        elif name == "avx2":
            found = avx2_off_binary()
            if found is None:
                print(f"== {name}: skipped, the AVX2-off build is not cached; build it "
                      "(minutes; tokperf install-engine has no flags option) with\n"
                      "   PYTHONPATH=$PWD:lab/drivers python -c 'from bench_ab import "
                      "avx2_off_flags; from pytest_tokperf.builds.install import "
                      "install_llama_server; install_llama_server(flags=avx2_off_flags())'")
                continue
            out.append(Case(name, default, main_model, found, main_model))
        else:
            out.append(Case(name, default, main_model, default, main_model))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", choices=["null", "bytes6", "bytes3", "avx2"])
    p.add_argument("--runs", type=int, default=3,
                   help="A/B runs per case; the cases take turns, run by run, so a machine "
                   "phase falls on all of them alike")
    p.add_argument("--pairs", type=int, default=200, help="ABBA pairs per A/B run")
    p.add_argument("--budget-s", type=float, default=None,
                   help="each A/B run, its two server starts included, measures pairs until "
                   "this many seconds have passed (at most --pairs): a CI job's time limit. "
                   "Default: exactly --pairs pairs")
    p.add_argument("--starts", type=int, default=1,
                   help="server starts per run, the pairs (and --budget-s) split between them "
                   "and the starts pooled as compare-builds --rounds pools its sessions: a "
                   "start whose two sides read their own memory can carry a level of its own "
                   "(lab/2026-12-03-ab-ten-minute-budget.md)")
    p.add_argument("--tokens", type=int, default=8,
                   help="tokens generated per request: the machine's level moves within a "
                   "second here, so many short pairs resolve more per minute than few long ones")
    p.add_argument("--prompt", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-sequential", action="store_true",
                   help="skip the history-gate / compare-commits sessions beside each run")
    p.add_argument("--long-pairs", type=int, default=0,
                   help="bytes cases: one extra long A/B of this many pairs of 4x the tokens "
                   "for an independent speed ratio (0: skip)")
    p.add_argument("--neighbours", type=int, default=0,
                   help="busy-loop processes kept running during each A/B (a shared runner's "
                   "other jobs): the wall-clock and the net-of-wait verdicts are printed side by side")
    p.add_argument("--mmap", action="store_true",
                   help="bytes cases: map the models from the page cache (llama-server's "
                   "default) instead of --load-mode none; the kernel backs each file's page "
                   "cache with 2 MiB pages to its own, changing degree, which measured here "
                   "moved the 16 vs 17 layer ratio between -6%% and -1%% "
                   "(lab/2026-12-02-ab-page-cache-and-defaults.md)")
    p.add_argument("--own-memory", action="store_true",
                   help="every case loads with --load-mode none, the null case too: an A/A "
                   "where each side reads its own copy of one file, to see whether own memory "
                   "alone gives a server start a level of its own "
                   "(lab/2026-12-03-ab-ten-minute-budget.md)")
    p.add_argument("--save", default="/tmp/tokperf-bench-ab",
                   help="folder for each A/B's per-pair figures (report.formats.ab_document JSON)")
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
    if a.mmap and a.own_memory:
        p.error("--mmap and --own-memory ask for opposite loads; give one")
    if a.starts < 1:
        p.error(f"--starts {a.starts}: give 1 or more server starts per run")
    if a.budget_s is not None and not (math.isfinite(a.budget_s) and a.budget_s > 0):
        p.error(f"--budget-s {a.budget_s}: give a positive number of seconds (e.g. 570 for "
                f"runs of at most 10 minutes), or leave it out for exactly --pairs pairs")
    budget = "" if a.budget_s is None else f" or {a.budget_s:.0f} s a run, whichever first"
    print(f"{a.runs} runs x {a.pairs} pairs{budget}, prompt {a.prompt}, {a.tokens} tokens, "
          f"threads {a.threads}, {a.neighbours} busy neighbours; "
          f"{'every case' if a.own_memory else 'bytes cases'} "
          f"{'mapped from the page cache' if a.mmap else 'loaded with --load-mode none'}; "
          f"logs {logs}")
    todo = cases(a.case or ["null", "bytes6"], default.binary)
    # two model files: each server reads its own into its own memory (b11434 spells
    # --no-mmap as --load-mode none); one file on both sides shares its pages either way
    own = ("--load-mode", "none")
    for case in todo:
        ratio = case.bytes_ratio
        print(f"== {case.name}: control {case.ctrl_model.name}, candidate {case.cand_model.name}; "
              f"bytes per token candidate/control {ratio:.4f} (decode expected "
              f"{1 / ratio - 1:+.2%} if bandwidth-bound); changed: "
              f"{build_changes(case.ctrl_bin, case.cand_bin)}")
    metrics = ("decode", "prefill", "ttft")
    counts = {c.name: {m: Counter[str]() for m in metrics} for c in todo}
    wall_counts = {c.name: {m: Counter[str]() for m in metrics} for c in todo}
    gate_counts = {c.name: {m: Counter[str]() for m in ("decode", "ttft")} for c in todo}
    walls: dict[str, list[float]] = {c.name: [] for c in todo}
    ccr: dict[str, list[float]] = {c.name: [] for c in todo}
    widths = {c.name: {m: list[float]() for m in metrics} for c in todo}
    changes = {c.name: {m: list[float]() for m in metrics} for c in todo}
    shifts: dict[str, list[tuple[float, float]]] = {c.name: [] for c in todo}
    for run in range(a.runs):
        for case in (todo if run % 2 == 0 else todo[::-1]):
            name = case.name
            started = time.monotonic()
            starts: list[ABResult] = []
            docs: list[dict[str, Any]] = []
            per_start = max(4, a.pairs // a.starts)
            for start in range(a.starts):
                with servers([(case.ctrl_bin, case.ctrl_model), (case.cand_bin, case.cand_model)],
                             a.threads, logs, own if a.own_memory or (
                                 not a.mmap and name.startswith("bytes")) else ()
                             ) as (b, c), neighbours(a.neighbours):
                    # each start gets its share of the run's budget, what an earlier one
                    # left unspent included
                    left = None if a.budget_s is None else max(
                        1.0, a.budget_s * (start + 1) / a.starts - (time.monotonic() - started))
                    options = MeasureOptions(salt_base=run * 1000 + start * 100_000,
                                             engine_pids=attached_pids(b, c), budget_s=left)
                    one: ABResult = run_paired_ab(
                        b, c, dataclasses.replace(workload, repetitions=per_start), options,
                        control_model_given=case.ctrl_model != case.cand_model)
                starts.append(one)
                shifts[name].append(decode_shift(one))
                docs.append(ab_document([(name, one)]))
                suffix = f"-s{start}" if a.starts > 1 else ""
                (save / f"{name}-{time.strftime('%H%M%S')}-{run}{suffix}.json").write_text(
                    json.dumps(docs[-1], indent=1))
            wall = time.monotonic() - started
            walls[name].append(wall)
            ab = starts[0]
            if a.starts == 1:
                verdicts = list(ab.verdicts)
            else:  # the starts pooled as compare-builds --rounds pools its sessions
                verdicts = [r.comparison for r in judge_documents(docs, metrics)]
            pairs = sum(one.pairs for one in starts)
            line = []
            for v in verdicts:
                counts[name][v.metric][v.verdict] += 1
                width = (v.ci_high - v.ci_low) / 2
                widths[name][v.metric].append(width)
                changes[name][v.metric].append(v.relative_change)
                line.append(f"{v.metric} {v.verdict} {v.relative_change:+.1%} (±{width:.1%})")
            over = f" over {a.starts} starts" if a.starts > 1 else ""
            print(f"   {name} run {run + 1}: A/B {'; '.join(line)}; {pairs} pairs{over}, "
                  f"{wall:.0f} s", flush=True)
            if a.starts > 1:
                print("          each start: " + "; ".join(
                      f"{pct(v.relative_change)} ({one.pairs} pairs)"
                      for one in starts if (v := one.verdict("decode")) is not None), flush=True)
            elif ab.clock:
                wall_line = []
                for w in wall_verdicts(ab):
                    wall_counts[name][w.metric][w.verdict] += 1
                    wall_line.append(f"{w.metric} {w.verdict} {w.relative_change:+.1%} "
                                     f"(±{(w.ci_high - w.ci_low) / 2:.1%})")
                print(f"          {ab.clock}\n          the same pairs on the wall clock: "
                      f"{'; '.join(wall_line)}", flush=True)
            if a.no_sequential:
                continue
            # today's gate and compare-commits on sequential sessions of the same workload:
            # control, candidate, control (the history gate needs earlier versions).
            seq_w = dataclasses.replace(workload, repetitions=max(3, a.pairs // 2))
            s0 = time.monotonic()
            b1 = sequential(case.ctrl_bin, case.ctrl_model, seq_w, a.threads, logs, run * 1000 + 500)
            c1 = sequential(case.cand_bin, case.cand_model, seq_w, a.threads, logs, run * 1000 + 600)
            b2 = sequential(case.ctrl_bin, case.ctrl_model, seq_w, a.threads, logs, run * 1000 + 700)
            seq_wall = time.monotonic() - s0
            gate_line = []
            for i, metric in ((0, DECODE), (1, TTFT)):
                verdict = compare([b1[i], b2[i]], c1[i], metric)
                gate_counts[name][metric.name][verdict.verdict] += 1
                gate_line.append(f"{metric.name} {verdict.verdict} {verdict.relative_change:+.1%}")
            cc = statistics.fmean(c1[0]) / statistics.fmean(b1[0])
            ccr[name].append(cc)
            print(f"          history gate (2 baseline sessions, 1 candidate): "
                  f"{'; '.join(gate_line)}; compare-commits decode B/A {cc:.3f}; "
                  f"{seq_wall:.0f} s", flush=True)
    for case in todo:
        name = case.name
        print(f"\n== {name} over {a.runs} runs")
        print("   A/B verdicts: " + "; ".join(f"{m} {dict(c)}" for m, c in counts[name].items()))
        if any(wall_counts[name].values()):
            print("   the same pairs on the wall clock: " + "; ".join(
                f"{m} {dict(c)}" for m, c in wall_counts[name].items()))
        print(f"   A/B wall time per verdict: median {statistics.median(walls[name]):.0f} s; interval "
              "half-width (99.8%) median: " + ", ".join(
                  f"{m} ±{statistics.median(w):.1%}" for m, w in widths[name].items() if w))
        print(f"   between server starts: {between_starts(shifts[name])}")
        if any(gate_counts[name].values()):
            print("   history gate: " + "; ".join(
                f"{m} {dict(c)}" for m, c in gate_counts[name].items()))
        if ccr[name]:
            spread = statistics.stdev(ccr[name]) if len(ccr[name]) > 1 else math.nan
            print("   compare-commits decode B/A: " + ", ".join(f"{x:.3f}" for x in ccr[name])
                  + f" (SD {spread:.3f})")
        if a.long_pairs and name.startswith("bytes"):
            long_w = dataclasses.replace(workload, generate_tokens=a.tokens * 4,
                                         repetitions=a.long_pairs)
            with servers([(case.ctrl_bin, case.ctrl_model), (case.cand_bin, case.cand_model)],
                         a.threads, logs) as (b, c):
                ab = run_paired_ab(b, c, long_w, MeasureOptions(salt_base=99_000,
                                                                engine_pids=attached_pids(b, c)),
                                   control_model_given=True)
            lv = ab.verdict("decode")
            assert lv is not None
            print(f"   long run ({a.long_pairs} pairs x {a.tokens * 4} tokens): decode speed "
                  f"ratio {1 + lv.relative_change:.4f} [{1 + lv.ci_low:.4f}, {1 + lv.ci_high:.4f}] "
                  f"vs bytes-predicted {1 / case.bytes_ratio:.4f}")
    print("\n| case | runs | " + " | ".join(f"{m}: found / false / missed" for m in metrics)
          + " | decode change, median (range) | decode half-width, median | wall per A/B |")
    print("|---|---|" + "---|" * (len(metrics) + 3))
    for case in todo:
        name = case.name
        cells = []
        for m in metrics:
            score = Counter(case.scored(m, v) for v, k in counts[name][m].items() for _ in range(k))
            cells.append(f"{score['found']} / {score['false']} / {score['missed']}")
        ch = changes[name]["decode"]
        print(f"| {name} | {len(walls[name])} | " + " | ".join(cells)
              + f" | {statistics.median(ch):+.1%} ({min(ch):+.1%} to {max(ch):+.1%})"
              f" | ±{statistics.median(widths[name]['decode']):.1%}"
              f" | {statistics.median(walls[name]):.0f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
