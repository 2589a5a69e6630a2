"""The same-run A/B's paired judge on simulated pairs: how often each verdict is given.

Cells follow issue 45's outside check: pair log-ratio SD 6%, minimum effect 2%, decode
judged alone (alpha 0.05) or as one of three metrics (alpha 0.05 / 3, the A/B's family).
- start level: one server start a side whose log-ratio level is off by N(0, s);
- AR(1): pairs in a row correlated at phi;
- stalls: a share of pairs with one side (either, at random) 10x slow;
- adaptive: pairs measured two at a time from 6, stopped once the pairs' 95% interval
  is within +-2% (as PairedAB does), at most the cell's count;
- order: a disturbance of +-5% in step with the fixed ABBA order, against randomised
  blocks.

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/paired_judge.py [--trials 1000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from pytest_tokperf.stats.metric import DEFAULT_ALPHA, Metric
from pytest_tokperf.stats.paired import (
    PAIRED_MIN_EFFECT,
    Pairs,
    judge_pairs,
    paired_shift,
    sequential_interval,
    set_aside_stalled_pairs,
)

DECODE = Metric("decode", True, PAIRED_MIN_EFFECT)
SD = 0.06


def ratio_interval(pairs: Pairs, confidence: float = 0.95) -> float | None:
    """Relative half-width of the pairs' own t-interval of the ratio (0.02: +/-2%; no start
    level, stalls set aside): the old adaptive stop. None without spread."""
    shift = paired_shift(set_aside_stalled_pairs(pairs)[0], start_sd=0.0)
    if not shift.std_error > 0:
        return None
    lo, hi = shift.interval(1 - confidence)
    return (math.expm1(hi) - math.expm1(lo)) / 2


def _ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = rng.normal(0, SD * math.sqrt(1 - phi * phi), n)
    x = np.empty(n)
    x[0] = rng.normal(0, SD)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


def _judge(d: np.ndarray, alpha: float, sequential: int = 0) -> str:
    base = np.full(len(d), 40.0)
    return judge_pairs(Pairs.of(DECODE, list(base), list(base * np.exp(d))), alpha=alpha,
                       sequential=sequential).verdict


def _flags(verdicts: list[str]) -> str:
    n = len(verdicts)
    reg, imp = verdicts.count("regression"), verdicts.count("improvement")
    unc = verdicts.count("unchanged")
    return (f"flagged {100 * (reg + imp) / n:5.1f}% (regression {reg}, improvement {imp}), "
            f"unchanged {100 * unc / n:5.1f}%")


def cell(label: str, trials: int, make, alpha: float, sequential: int = 0) -> None:
    runs = [make(np.random.default_rng(seed)) for seed in range(trials)]
    verdicts = [_judge(d, alpha, sequential) for d in runs]
    pairs = f", median {np.median([len(d) for d in runs]):.0f} pairs" if sequential else ""
    print(f"  {label:<52} {_flags(verdicts)}{pairs}")


def adaptive(rng: np.random.Generator, n_max: int, step: float, flagged: bool = True
             ) -> np.ndarray:
    """PairedAB's adaptive stop (``flagged``): once the pairs' anytime-valid interval is
    within +-2% or the anytime-valid judgement flags the decode; the old stop: once the
    pairs' t-interval is within +-2%."""
    d = rng.normal(math.log1p(step), SD, n_max)
    for k in range(6, n_max + 1, 2):
        pairs = Pairs.of(DECODE, [40.0] * k, list(40.0 * np.exp(d[:k])))
        width = sequential_interval(pairs, n_max) if flagged else ratio_interval(pairs)
        if width is not None and width <= 0.02:
            return d[:k]
        if flagged and judge_pairs(pairs, alpha=DEFAULT_ALPHA / 3, sequential=n_max).flagged:
            return d[:k]
    return d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    t = parser.parse_args().trials
    for alpha, family in ((DEFAULT_ALPHA, "decode alone"), (DEFAULT_ALPHA / 3, "1 of 3 metrics")):
        print(f"alpha {alpha:.4f} ({family}), pair SD {SD:.0%}, m {PAIRED_MIN_EFFECT:.0%}, "
              f"{t} A/Bs a cell")
        for s in (0.01, 0.02):
            cell(f"A/A, 200 pairs, one start, level SD {s:.0%}", t,
                 lambda r, s=s: r.normal(0, SD, 200) + r.normal(0, s), alpha)
        for phi in (0.3, 0.6):
            cell(f"A/A, 300 pairs, AR(1) {phi}", t, lambda r, phi=phi: _ar1(r, 300, phi), alpha)
        for n in (200, 400):
            cell(f"-5% step, {n} pairs, level SD 1%", t,
                 lambda r, n=n: r.normal(math.log(0.95), SD, n) + r.normal(0, 0.01), alpha)
            cell(f"-5% step, {n} pairs, 5% of pairs stalled 10x", t,
                 lambda r, n=n: _stalled(r, n, 0.05, math.log(0.95)), alpha)
        cell("A/A, 400 pairs, 5% of pairs stalled 10x", t,
             lambda r: _stalled(r, 400, 0.05, 0.0), alpha)
        cell("-1% step, 400 pairs (m 2%)", t, lambda r: r.normal(math.log(0.99), SD, 400), alpha)
        cell("A/A, fixed 400 pairs", t, lambda r: r.normal(0, SD, 400), alpha)
        cell("A/A, adaptive stop (6..400 pairs), anytime-valid", t,
             lambda r: adaptive(r, 400, 0.0), alpha, sequential=400)
        cell("A/A, width stop only, judged as if fixed (the old way)", t,
             lambda r: adaptive(r, 400, 0.0, flagged=False), alpha)
        cell("-5% step, adaptive stop, anytime-valid", t,
             lambda r: adaptive(r, 400, -0.05), alpha, sequential=400)
        cell("-5% step, width stop only, judged as if fixed", t,
             lambda r: adaptive(r, 400, -0.05, flagged=False), alpha)
        cell("A/A, 200 pairs, +-5% in step with fixed ABBA", t, lambda r: _in_step(r, 200, True), alpha)
        cell("A/A, 200 pairs, +-5% disturbance, randomised blocks", t,
             lambda r: _in_step(r, 200, False), alpha)


def _stalled(rng: np.random.Generator, n: int, share: float, step: float) -> np.ndarray:
    d = rng.normal(step, SD, n)
    hit = rng.random(n) < share
    d[hit] += np.where(rng.random(hit.sum()) < 0.5, -1, 1) * math.log(10)
    return d


def _in_step(rng: np.random.Generator, n: int, fixed: bool) -> np.ndarray:
    """A machine disturbance in step with the fixed order: slots 0 and 3 of every four
    (A B B A) run 5% slow. Fixed ABBA puts the control in them every time; randomised
    blocks (each block of two pairs AB BA or BA AB at random, as PairedAB now measures)
    put either side there."""
    d = rng.normal(0, SD, n)
    flips = np.zeros(n // 2, bool) if fixed else rng.random(n // 2) < 0.5
    for i in range(n):
        a_first = (i % 2 == 0) != flips[i // 2]
        a_slot = 2 * i + (0 if a_first else 1)
        a_slow = a_slot % 4 in (0, 3)
        b_slow = (a_slot + (1 if a_first else -1)) % 4 in (0, 3)
        d[i] += (0.05 if a_slow else 0.0) - (0.05 if b_slow else 0.0)
    return d


if __name__ == "__main__":
    main()
