"""The paired judge over server starts, simulated: false flags, power and "unchanged".

Each simulated A/B has ``starts`` server starts a side of ``pairs`` pairs each; a start
carries a level of its own (normal, SD ``--level``), a pair a log-ratio noise of SD
``--pair-sd`` with lag-1 autocorrelation ``--ar`` inside a start, and the candidate is
``step`` off. Judged as the A/B judges decode (``stats.paired.judge_pairs`` at alpha/3,
the Bonferroni share of one of its three metrics), ``--runs`` A/Bs a cell. Prints per
design: A/A flagged, A/A "unchanged", each step found (regression).

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/start_level.py --level 0.02 \\
        --design 1x400 --design 4x100 --design 16x25 --runs 1000
"""

from __future__ import annotations

import argparse

import numpy as np

from pytest_tokperf.stats.metric import DEFAULT_ALPHA, Metric
from pytest_tokperf.stats.paired import Pairs, judge_pairs, judge_windows

DECODE = Metric("decode", True, 0.02)


def simulate(rng: np.random.Generator, starts: int, pairs: int, level: float, pair_sd: float,
             ar: float, step: float, window: float = 0.0, windows: int = 1) -> Pairs:
    d, blocks = [], []
    shift = [rng.normal(0, window) for _ in range(windows)]
    for s in range(starts):
        e = rng.normal(0, pair_sd, pairs)
        for i in range(1, pairs):  # AR(1) with the same marginal SD
            e[i] = ar * e[i - 1] + np.sqrt(1 - ar * ar) * e[i]
        d += list(step + shift[s * windows // starts] + rng.normal(0, level) + e)
        blocks += [s] * pairs
    ratios = np.exp(np.asarray(d))
    return Pairs.of(DECODE, [1.0] * len(ratios), list(ratios), blocks)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--design", action="append", default=[],
                   help="STARTSxPAIRS (pairs a start), repeatable; default 1x400 4x100 16x25")
    p.add_argument("--level", type=float, default=0.02, help="start level, log SD")
    p.add_argument("--window", type=float, default=0.0,
                   help="a level per machine window shared by its starts (log SD)")
    p.add_argument("--windows", type=int, default=1, help="windows the starts fall into")
    p.add_argument("--pooled", action="store_true",
                   help="each window is an A/B of the whole design of its own (the watch's "
                   "first A/B and its confirmation), judged window by window and pooled, each "
                   "window allowed --window-sd (stats.paired.judge_windows)")
    p.add_argument("--window-sd", type=float, default=0.025)
    p.add_argument("--pair-sd", type=float, default=0.06)
    p.add_argument("--ar", type=float, default=0.0)
    p.add_argument("--steps", default="-0.03,-0.05")
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    designs = [tuple(int(x) for x in d.split("x")) for d in (a.design or ["1x400", "4x100", "16x25"])]
    steps = [float(x) for x in a.steps.split(",") if x]
    alpha = DEFAULT_ALPHA / 3
    print(f"start level {a.level:.1%}, window level {a.window:.1%} over {a.windows} window(s), "
          f"pair SD {a.pair_sd:.1%}, AR {a.ar}, {a.runs} A/Bs a cell, alpha {alpha:.4f}")
    head = " | ".join(f"{s:+.0%} found" for s in steps)
    print(f"| design | A/A flagged | A/A unchanged | {head} |")
    print("|---|---|---|" + "---|" * len(steps))
    for starts, pairs in designs:
        rng = np.random.default_rng(a.seed)
        cells = []
        for step in (0.0, *steps):
            if a.pooled:
                verdicts = [judge_windows(
                    [{"decode": simulate(rng, starts, pairs, a.level, a.pair_sd, a.ar,
                                         step + rng.normal(0, a.window))}
                     for _ in range(a.windows)], window_sd=a.window_sd,
                    alpha=DEFAULT_ALPHA)["decode"].verdict for _ in range(a.runs)]
            else:
                verdicts = [judge_pairs(simulate(rng, starts, pairs, a.level, a.pair_sd, a.ar,
                                                 step, a.window, a.windows), alpha=alpha).verdict
                            for _ in range(a.runs)]
            if step == 0.0:
                cells.append(f"{sum(v in ('regression', 'improvement') for v in verdicts) / a.runs:.1%}")
                cells.append(f"{verdicts.count('unchanged') / a.runs:.1%}")
            else:
                cells.append(f"{verdicts.count('regression') / a.runs:.1%}")
        print(f"| {starts} x {pairs} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
