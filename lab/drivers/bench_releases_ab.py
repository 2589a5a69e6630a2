"""A release dataset the VM's phases cannot fool: every release A/B'd against one reference.

Across sessions this VM's memory bandwidth sits in phases (session means of one release
spread 12%), so releases measured in separate sessions cannot show a 5% step
(``bench_release_pairs.py``). Here every release is measured in a same-run A/B against
one fixed reference build (b11434, the default build), both servers up at once on the
default model: the phase falls on both sides of every pair and cancels, and what is
stored is the release's decode / prefill / TTFT relative to the reference.

Each release in ``--releases`` (a ``ReleaseIndex.select`` spec; default 30 releases spread
over the registry's range) is built (``builds.install``, cached; minutes each on 2 cores),
then measured, one release at a time, never while building. Each A/B is written at once
to ``--data/b<N>-<stamp>.json`` (a failure later loses nothing), and a release already in
``--data`` is skipped unless ``--again``: the dataset grows across sessions, and a fresh
VM rebuilds only what it still needs. ``--budget-min`` stops before starting a release
that would not finish in time (a build plus an A/B is about 14 minutes here).

``--report`` (also printed after measuring) judges the stored documents without measuring:
per release its change against the reference with the verdict, then each step between
consecutive releases: the difference of their two log-ratios, each release's A/Bs pooled by
``stats.paired.pool_runs`` with an A/B's own level (``--start-sd``) in every A/B's error.
By default that level is the upper 95% bound that the releases measured more than once put
on it (``stats.paired.start_spread``), else 1%. Steps are judged by ``stats.verdict.judge``
with a Bonferroni correction over all steps. A flagged step prints the upstream span it
narrows to and the ``tokperf bisect`` command that narrows it further.

Run::

    PYTHONPATH=$PWD python lab/drivers/bench_releases_ab.py --budget-min 90
    PYTHONPATH=$PWD python lab/drivers/bench_releases_ab.py --report
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import platform
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as sps
from pathlib import Path
from typing import Any

from bench_ab import attached_pids, layered, servers

from pytest_tokperf.bench.ab import pair_metrics, run_paired_ab
from pytest_tokperf.report.formats import ab_document
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.builds.identity import build_changes, build_identity
from pytest_tokperf.builds.install import LLAMA_BUILD_NUMBER, install_llama_server
from pytest_tokperf.builds.releases import ReleaseIndex, release_index
from pytest_tokperf.errors import TokperfError
from pytest_tokperf.model.writer import MAIN_MODEL
from pytest_tokperf.paths import cache_root
from pytest_tokperf.results import Workload
from pytest_tokperf.stats.metric import DEFAULT_ALPHA, interval_text
from pytest_tokperf.stats.paired import pool_runs
from pytest_tokperf.stats.shifts import Shift
from pytest_tokperf.stats.verdict import judge
from pytest_tokperf.versions.paired import judge_documents

DATA = Path("db/runs/releases-ab")
METRICS = {m.name: m for m in pair_metrics()}
DEFAULT_START_SD = 0.01
"""An A/B's own level when no release is measured twice: the fifth session's 11 A/As bound
it at about 0.9% (lab/2026-12-03-releases-ab.md)."""
PER_RELEASE_MIN = 14.0
"""A build (561-644 s measured here on 2 cores, ccache helping little across releases) plus
one A/B (about 213 s at 200 pairs): what --budget-min counts."""


def stored(data: Path) -> dict[int, list[Path]]:
    """The documents in ``data`` by release number, oldest first within a release."""
    found: dict[int, list[Path]] = defaultdict(list)
    for path in sorted(data.glob("b*.json")):
        match = re.fullmatch(r"b(\d+)-.*\.json", path.name)
        if match:
            found[int(match.group(1))].append(path)
    return dict(found)


def measure(number: int, reference: Path, a: argparse.Namespace, logs: Path,
            index: ReleaseIndex) -> Path:
    """Build release ``number``, A/B it against ``reference``; the path of its document."""
    started = time.monotonic()
    built = install_llama_server(number, index=index,
                                 progress=lambda s: print(f"   {s}", flush=True))
    build_s = time.monotonic() - started
    model = layered(MAIN_MODEL.n_layer)
    workload = Workload(prompt_tokens=a.prompt, generate_tokens=a.tokens,
                        repetitions=a.pairs, warmup=1)
    t0 = time.monotonic()
    with servers([(reference, model), (built.binary, model)], a.threads, logs) as (b, c):
        ab = run_paired_ab(b, c, workload, MeasureOptions(salt_base=number,
                                                             engine_pids=attached_pids(b, c)),
                           changed=build_changes(reference, built.binary))
    ab_s = time.monotonic() - t0
    ref_id, rel_id = build_identity(reference), build_identity(built.binary)
    doc: dict[str, Any] = {
        "format": "tokperf-release-ab/1",
        "release": number,
        "reference": {"label": ref_id.label, "sha256": ref_id.sha256,
                      "cmake_flags": list(ref_id.cmake_flags or ())},
        "candidate": {"label": rel_id.label, "sha256": rel_id.sha256,
                      "cmake_flags": list(rel_id.cmake_flags or ())},
        "model": model.name,
        "threads": a.threads,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"machine": platform.machine(), "system": platform.platform()},
        "load": ab.load_text(),
        "build_s": round(build_s, 1),
        "ab_s": round(ab_s, 1),
        **ab_document([(f"b{number}-vs-b{a.reference}", ab)]),
    }
    a.data.mkdir(parents=True, exist_ok=True)
    path = a.data / f"b{number}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"   b{number}: {ab.describe()}; build {build_s:.0f} s, A/B {ab_s:.0f} s -> {path}",
          flush=True)
    return path


def per_start(paths: list[Path]) -> dict[str, list[Shift]]:
    """Each document's own shift per metric, as its A/B judged it when it ran (a document is
    one start of both servers)."""
    out: dict[str, list[Shift]] = defaultdict(list)
    for path in paths:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for r in judge_documents([doc], list(METRICS)):
            if r.comparison.shift is not None and r.comparison.shift.std_error > 0:
                out[r.metric].append(r.comparison.shift)
    return out


def step(prev: Shift, cur: Shift, tests: int) -> Shift:
    """The change from one release to the next, both measured against the reference (each
    pooled shift already holds its starts' level)."""
    return Shift(log_shift=cur.log_shift - prev.log_shift,
                 std_error=math.hypot(prev.std_error, cur.std_error),
                 df=min(prev.df, cur.df), n_baseline=prev.n_current, n_current=cur.n_current,
                 method="pooled", noise_cv=math.nan, tests=tests)


@dataclass(frozen=True, slots=True)
class StartSpread:
    """How repeated A/B runs disagree beyond their pairs' error: Cochran's Q, the
    DerSimonian-Laird ``sd`` and its upper 95% bound ``sd_high`` (the level to allow)."""

    q: float
    df: int
    p_value: float
    sd: float
    sd_high: float
    groups: int


def _generalised_q(groups: Sequence[Sequence[Shift]], var: float) -> float:
    q = 0.0
    for shifts in groups:
        w = [1 / (s.std_error ** 2 + var) for s in shifts]
        mean = sum(wi * s.log_shift for wi, s in zip(w, shifts, strict=True)) / sum(w)
        q += sum(wi * (s.log_shift - mean) ** 2 for wi, s in zip(w, shifts, strict=True))
    return q


def start_spread(groups: Sequence[Sequence[Shift]]) -> StartSpread | None:
    """``StartSpread`` over ``groups`` of runs; None when no group has two runs (the package
    keeps only the DerSimonian-Laird SD, ``stats.paired.start_spread``)."""
    used = [list(g) for g in groups if len(g) >= 2]
    if not used:
        return None
    scale, df = 0.0, 0
    for shifts in used:
        w = [1 / s.std_error ** 2 for s in shifts]
        scale += sum(w) - sum(wi ** 2 for wi in w) / sum(w)
        df += len(shifts) - 1
    q = _generalised_q(used, 0.0)
    low_q = float(sps.chi2.ppf(0.025, df))
    if q <= low_q:
        high = 0.0
    else:  # Q(var) falls from q towards 0 as var grows: bracket, then bisect
        top = max(s.log_shift ** 2 + s.std_error ** 2 for g in used for s in g) + 1e-8
        while _generalised_q(used, top) > low_q:
            top *= 4
        lo, hi = 0.0, top
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _generalised_q(used, mid) > low_q else (lo, mid)
        high = math.sqrt(hi)
    return StartSpread(q=q, df=df, p_value=float(sps.chi2.sf(q, df)),
                       sd=math.sqrt(max(0.0, (q - df) / scale)), sd_high=high,
                       groups=len(used))


def start_level(shifts: dict[int, dict[str, list[Shift]]]) -> tuple[StartSpread | None, str]:
    """What the releases measured more than once say of an A/B's own level
    (``stats.paired.start_spread`` of their decode estimates), and that in words."""
    repeated = {n: by_metric["decode"] for n, by_metric in sorted(shifts.items())
                if len(by_metric.get("decode", ())) > 1}
    spread = start_spread(list(repeated.values()))
    if spread is None:
        return None, "no release is measured twice yet"
    runs_text = "; ".join(f"b{n} " + ", ".join(f"{math.expm1(s.log_shift):+.1%} (SE "
                                               f"{s.std_error:.2%})" for s in shifts)
                          for n, shifts in repeated.items())
    return spread, (f"repeated releases: {runs_text}: Cochran's Q {spread.q:.2f} on "
                    f"{spread.df} df (p = {spread.p_value:.2f}), an A/B's own level "
                    f"{spread.sd:.2%} SD, at most {spread.sd_high:.2%} (95%)")


def report(data: Path, start_sd: float | None, alpha: float) -> int:
    runs = stored(data)
    if not runs:
        print(f"{data}: no release A/B stored yet (run without --report to measure)")
        return 1
    shifts = {n: per_start(paths) for n, paths in sorted(runs.items())}  # each file read once
    spread, spread_text = start_level(shifts)
    if start_sd is not None:
        source = "--start-sd"
    elif spread is not None:
        start_sd, source = spread.sd_high, "the repeated releases' upper bound"
    else:
        start_sd, source = DEFAULT_START_SD, "the default: no release measured twice"
    tests_each = len(METRICS)
    by_release = {n: {name: judge(pool_runs(runs_of, start_sd, tests=tests_each), METRICS[name],
                                  alpha=alpha)
                      for name, runs_of in by_metric.items()}
                  for n, by_metric in shifts.items()}
    numbers = sorted(by_release)
    print(f"{len(numbers)} releases against the reference, {sum(map(len, runs.values()))} A/Bs"
          f" ({data}); change = release / reference - 1, paired per request:")
    print("| release | A/Bs | " + " | ".join(METRICS) + " |")
    print("|---|---|" + "---|" * len(METRICS))
    for n in numbers:
        cells = []
        for name in METRICS:
            c = by_release[n].get(name)
            cells.append("-" if c is None else f"{c.relative_change:+.1%} "
                         f"{interval_text(c.ci_low, c.ci_high)} {c.verdict}")
        print(f"| b{n} | {len(runs[n])} | " + " | ".join(cells) + " |")
    if len(numbers) < 2:
        print("\nsteps between consecutive releases: none yet (one release stored)")
        return 0
    tests = (len(numbers) - 1) * len(METRICS)
    print(f"\nsteps between consecutive releases ({tests} judged, Bonferroni; an A/B's own "
          f"level of {start_sd:.2%} SD ({source}) in each release's error; {spread_text}):")
    flagged = 0
    for prev, cur in itertools.pairwise(numbers):
        for name, metric in METRICS.items():
            a, b = by_release[prev].get(name), by_release[cur].get(name)
            if a is None or b is None or a.shift is None or b.shift is None:
                continue
            verdict = judge(step(a.shift, b.shift, tests), metric, alpha=alpha)
            if verdict.verdict in ("regression", "improvement"):
                flagged += 1
                print(f"   b{prev} -> b{cur} {name}: {verdict.verdict} "
                      f"{verdict.relative_change:+.1%} "
                      f"{interval_text(verdict.ci_low, verdict.ci_high)}: upstream builds b{prev + 1}..b{cur}; narrow it "
                      f"with `tokperf bisect --good {prev} --bad {cur}`")
    if not flagged:
        print("   none flagged")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--releases", default="9093..11434/30",
                   help="which releases (ReleaseIndex.select: 9093..11434/30, b9093,b10380, ...)")
    p.add_argument("--reference", type=int, default=LLAMA_BUILD_NUMBER,
                   help="the build every release is A/B'd against (its default build)")
    p.add_argument("--data", type=Path, default=DATA, help="where the A/B documents live")
    p.add_argument("--report", action="store_true", help="judge what is stored; measure nothing")
    p.add_argument("--again", action="store_true",
                   help="measure releases already stored once more (a between-session check)")
    p.add_argument("--budget-min", type=float, default=math.inf,
                   help=f"stop before a release that would end past this (about "
                   f"{PER_RELEASE_MIN:.0f} minutes each)")
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--prompt", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--start-sd", type=float, default=None,
                   help="an A/B's own level (log SD: both servers' starts) added to each "
                   "A/B's error (default: the upper 95%% bound the releases measured twice "
                   f"put on it, else {DEFAULT_START_SD * 100:.0f}%%)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    a = p.parse_args(argv)
    if a.report:
        return report(a.data, a.start_sd, a.alpha)
    started = time.monotonic()
    index = release_index(cache_root())
    chosen = [r.number for r in index.select(a.releases)]
    have = stored(a.data)
    todo = [n for n in chosen if a.again or n not in have]
    print(f"{len(chosen)} releases chosen ({index.source}); {len(chosen) - len(todo)} already "
          f"in {a.data}; {len(todo)} to build and measure against b{a.reference}")
    reference = install_llama_server(a.reference, index=index).binary
    logs = Path(tempfile.mkdtemp(prefix="tokperf-releases-ab-"))
    for n in todo:
        used = (time.monotonic() - started) / 60
        if used + PER_RELEASE_MIN > a.budget_min:
            print(f"stopping: {used:.0f} of {a.budget_min:.0f} minutes used; "
                  f"{len(todo) - todo.index(n)} releases left for a later session")
            break
        print(f"== b{n}", flush=True)
        try:
            measure(n, reference, a, logs, index)
        except TokperfError as exc:
            print(f"   b{n}: not measured: {exc}", flush=True)
    print()
    return report(a.data, a.start_sd, a.alpha)


if __name__ == "__main__":
    sys.exit(main())
