"""Does `tokperf changes` name a slow ramp whose total reaches the minimum effect, and
stay quiet on flat histories?

Simulated histories of 10 versions (repetition noise log-normal): a ramp of -1% a version
(-8.6% from the first to the last) and of -0.5% (-4.4%: under the 5% minimum), and flat
histories of 10 and 20 versions: repetition CV 2% or 5%, or runs that spread 1% or 2%
(each version's level drawn apart) at repetition CV 1%. Each history is read as `changes`
reads it: its steps (``change_points``) before this change, its steps and drifts
(``stats.drift.drifts``) after; the same histories both times.

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/drift_naming.py [--trials 400] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from pytest_tokperf.stats import DECODE, change_points
from pytest_tokperf.stats.changepoints import Point
from pytest_tokperf.stats.drift import drifts

REPS = (3, 5, 10)
RAMPS = (-0.01, -0.005)
FLAT = {"CV 2%": (0.02, 0.0), "CV 5%": (0.05, 0.0), "runs spread 1%": (0.01, 0.01),
        "runs spread 2%": (0.01, 0.02)}
"""Flat models: (repetition CV, SD of each version's level)."""


def history(rng: np.random.Generator, versions: int, reps: int, slope: float, cv: float,
            spread: float) -> list[Point]:
    return [Point(f"v{i}", tuple(100 * (1 + slope) ** i * math.exp(spread * rng.normal())
                                 * np.exp(cv * rng.standard_normal(reps))))
            for i in range(versions)]


def cell(versions: int, reps: int, slope: float, cv: float, spread: float, trials: int,
         seed: int) -> tuple[int, int, int]:
    """(flagged by the steps alone, by steps or drifts, named as a drift): for a ramp, a
    regression; for a flat history, any flag."""
    rng = np.random.default_rng(seed)
    want = ("regression",) if slope else ("regression", "improvement")
    before = after = drift = 0
    for _ in range(trials):
        points = history(rng, versions, reps, slope, cv, spread)
        steps = any(c.verdict in want for c in change_points(points, DECODE))
        named = any(c.verdict in want for c in drifts(points, DECODE))
        before += steps
        after += steps or named
        drift += named
    return before, after, drift


def margin(p: float, n: int) -> float:
    return 1.96 * math.sqrt(max(p * (1 - p), 1 / n) / n)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=400, help="histories a ramp cell")
    parser.add_argument("--flat-trials", type=int, default=4000, help="histories a flat cell")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    ramps = [(10, r, s, 0.02, 0.0, args.trials, i) for i, (s, r) in
             enumerate((s, r) for s in RAMPS for r in REPS)]
    flats = [(k, r, 0.0, cv, sd, args.flat_trials, 100 + i) for i, (k, r, (cv, sd)) in
             enumerate((k, r, m) for k in (10, 20) for r in (3, 5) for m in FLAT.values())]
    with ProcessPoolExecutor(args.jobs) as pool:
        done = [pool.submit(cell, *c) for c in ramps + flats]
        results = [d.result() for d in done]
    n, n0 = args.trials, args.flat_trials
    print(f"Ramps over 10 versions, repetition CV 2%, {n} histories a cell (95% margin "
          f"±{margin(0.9, n):.1%} at 90%): a regression named, steps alone -> steps and "
          "drifts (of which a drift)")
    for (_, reps, slope, *_), (b, a, d) in zip(ramps, results):
        total = (1 + slope) ** 9 - 1
        print(f"  {slope:+.1%}/version ({total:+.1%}), {reps:>2} reps: {b / n:6.1%} -> "
              f"{a / n:6.1%} ({d / n:.1%})")
    print(f"\nFlat histories, {n0} a cell (95% margin ±{margin(0.005, n0):.2%} at 0.5%): "
          "any flag, steps alone -> steps and drifts (of which a drift)")
    for (k, reps, _, cv, sd, *_), (b, a, d) in zip(flats, results[len(ramps):]):
        name = next(m for m, v in FLAT.items() if v == (cv, sd))
        print(f"  {k} versions, {reps} reps, {name:<15}: {b / n0:6.2%} -> {a / n0:6.2%} "
              f"({d / n0:.2%})")


if __name__ == "__main__":
    main()
