"""The machine-moved rule on simulated histories: what it withholds and what it finds.

Sessions of 5 repetitions at CV 2% in one of two machine states, as on the project's VMs:
fast memory (probe ~60 GB/s) or slow (~37 GB/s), where decode runs ``--state-drop`` lower
(default -20.5%: the main job's ~31 against ~39 tok/s). Each session's probe is its
state's bandwidth times a probe noise of SD 5%. Each judgement is the gate's:
``judge_history`` over the earlier sessions, then ``moved_verdict`` against the probes of
the sessions it was judged against, with the rule's ``--exponent`` (1: the bound; ``host``:
as the package does, the host's upper bound fitted for each judgement by
``stats.moved.host_exponent`` from a stored history of ``--host-sessions`` sessions of one
build, each in a state at random, ``--host-mismatch`` of their probes catching the other
state; ``--host-confidence`` and ``--host-outliers`` are the estimator's, ``inf``: plain
least squares). Every cell also shows the same draws without the rule and under the earlier rule
(any flag the way every history probe moved withheld, whatever its size).

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/moved_rule.py [--trials 1000]
        [--exponent 1|host] [--state-drop -0.205] [--host-sessions 20] [--host-mismatch 0]
        [--host-confidence 0.975] [--host-outliers 3.5]
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from pytest_tokperf.stats import DECODE, Comparison, judge_history
from pytest_tokperf.stats.changepoints import Point
from pytest_tokperf.stats.moved import (
    HOST_CONFIDENCE,
    OUTLIER_SDS,
    BandwidthExponent,
    host_exponent,
    moved,
    moved_verdict,
)

BANDWIDTH = {"fast": 60e9, "slow": 37e9}
Session = tuple[list[float], float]
Exponent = Callable[[np.random.Generator], float | BandwidthExponent]
"""The exponent of one judgement, drawn after its history (a fit, or a constant)."""


def _judged(history: list[Session], current: Session, exponent: float | BandwidthExponent
            ) -> tuple[Comparison, Comparison, Comparison]:
    """(no rule, earlier rule, this rule) on one judgement, as the gate makes it."""
    points = [Point(f"v{i}", s) for i, (s, _) in enumerate(history)]
    judged = judge_history(points, current[0], DECODE, window=20)
    plain = judged.comparison
    probes = [p for _, p in history]
    against = (probes[:len(judged.reference)] if judged.judged == "drift"
               else probes[len(probes) - len(judged.baseline):])
    way = moved(current[1], probes)
    earlier = plain
    if plain.flagged and way != 0 and (way < 0) == (plain.verdict == "regression"):
        earlier = replace(plain, verdict="inconclusive")
    return plain, earlier, moved_verdict(plain, [current[1]], against, exponent=exponent)


def _cell(name: str, trials: int, draw: Callable[[np.random.Generator, int],
                                                  tuple[list[Session], Session]],
          count: Callable[[Comparison], bool], exponent: Exponent) -> None:
    counts = [0, 0, 0]
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        history, current = draw(rng, seed)  # the same draws at every --exponent
        for i, c in enumerate(_judged(history, current, exponent(rng))):
            counts[i] += count(c)
    plain, earlier, now = (f"{100 * n / trials:.1f}%" for n in counts)
    print(f"  {name}: no rule {plain}, earlier rule {earlier}, this rule {now}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--exponent", default="1", help="a number, or host (module doc)")
    parser.add_argument("--host-sessions", type=int, default=20)
    parser.add_argument("--host-mismatch", type=float, default=0.0)
    parser.add_argument("--host-confidence", type=float, default=HOST_CONFIDENCE)
    parser.add_argument("--host-outliers", type=float, default=OUTLIER_SDS)
    parser.add_argument("--state-drop", type=float, default=-0.205)
    parser.add_argument("--mismatch", type=float, default=0.10,
                        help="share of probes that catch the other state (last table)")
    args = parser.parse_args()
    level = {"fast": 100.0, "slow": 100.0 * (1 + args.state_drop)}

    def session(rng: np.random.Generator, state: str, engine: float = 0.0,
                probe_state: str | None = None) -> Session:
        samples = level[state] * (1 + engine) * np.exp(rng.normal(0, 0.02, 5))
        probe = BANDWIDTH[probe_state or state] * math.exp(rng.normal(0, 0.05))
        return list(samples), probe

    def coin(rng: np.random.Generator, slow: float = 0.5) -> str:
        return "slow" if rng.random() < slow else "fast"

    def fast_then(state: str, engine: float, probe: str | None = None) -> Callable[
            [np.random.Generator, int], tuple[list[Session], Session]]:
        def draw(rng: np.random.Generator, seed: int) -> tuple[list[Session], Session]:
            return ([session(rng, "fast") for _ in range(3 + seed % 3)],
                    session(rng, state, engine, probe))
        return draw

    def two_phase(both: bool) -> Callable[[np.random.Generator, int],
                                          tuple[list[Session], Session]]:
        def draw(rng: np.random.Generator, seed: int) -> tuple[list[Session], Session]:
            while True:
                states = [coin(rng) for _ in range(3 + seed % 3)]
                if not both or len(set(states)) == 2:
                    break
            return [session(rng, s) for s in states], session(rng, coin(rng))
        return draw

    def mixed(engine: float) -> Callable[[np.random.Generator, int],
                                         tuple[list[Session], Session]]:
        def draw(rng: np.random.Generator, seed: int) -> tuple[list[Session], Session]:
            history = [session(rng, coin(rng, 0.3)) for _ in range(3 + seed % 10)]
            return history, session(rng, coin(rng, 0.3), engine)
        return draw

    def probed_badly(rng: np.random.Generator, seed: int) -> tuple[list[Session], Session]:
        def one(engine: float = 0.0) -> Session:
            return session(rng, "fast", engine, "slow" if rng.random() < args.mismatch else None)
        return [one() for _ in range(3 + seed % 3)], one(-0.10)

    def regression(c: Comparison) -> bool:
        return c.verdict == "regression"

    def flagged(c: Comparison) -> bool:
        return c.flagged

    def improvement(c: Comparison) -> bool:
        return c.verdict == "improvement"

    fits: list[BandwidthExponent] = []

    def host_fit(rng: np.random.Generator) -> BandwidthExponent:
        runs = []
        for _ in range(args.host_sessions):
            state = coin(rng)
            other = "fast" if state == "slow" else "slow"
            samples, probe = session(rng, state, probe_state=other if rng.random()
                                     < args.host_mismatch else None)
            runs.append(("b0", probe, statistics.median(samples)))
        fits.append(host_exponent(runs, args.host_confidence, args.host_outliers))
        return fits[-1]

    t = args.trials
    e: Exponent = host_fit if args.exponent == "host" else lambda _: float(args.exponent)
    explained = ("the host's fitted bound" if args.exponent == "host" else
                 f"{(37 / 60) ** float(args.exponent) - 1:+.1%} (bandwidth^{args.exponent})")
    print(f"states: 60 vs 37 GB/s (x{37 / 60:.3f}), decode {args.state_drop:+.1%} in the slow "
          f"one; the rule explains up to {explained}; "
          f"{t} judgements a cell, 3-5 sessions unless said")
    print("history on fast memory, current on slow:")
    _cell("-30% engine regression found", t, fast_then("slow", -0.30), regression, e)
    _cell("-10% engine regression found", t, fast_then("slow", -0.10), regression, e)
    _cell("state-only drop flagged", t, fast_then("slow", 0.0), flagged, e)
    print("step-free two-phase histories (each session's state at random), probes follow:")
    _cell("flagged", t, two_phase(False), flagged, e)
    _cell("flagged, some sessions in each state", t, two_phase(True), flagged, e)
    print("mixed histories of 3-12 sessions, 30% of sessions slow, current at random:")
    _cell("A/A called improvement", t, mixed(0.0), improvement, e)
    _cell("-10% regression called improvement", t, mixed(-0.10), improvement, e)
    _cell("-10% regression found", t, mixed(-0.10), regression, e)
    print(f"every session on fast memory, {args.mismatch:.0%} of probes catching the slow state:")
    _cell("-10% engine regression found", t, probed_badly, regression, e)
    if fits:
        values = sorted(f.value for f in fits)
        print(f"host bound over {len(fits)} fits of {args.host_sessions} sessions "
              f"({args.host_mismatch:.0%} of probes catching the other state; "
              f"{args.host_confidence:.1%} bound, outliers {args.host_outliers:g} SDs): median "
              f"{statistics.median(values):.2f}, 5-95% {values[len(values) // 20]:.2f}-"
              f"{values[-len(values) // 20 - 1]:.2f}, the bound 1 in "
              f"{sum(f.runs == 0 for f in fits) / len(fits):.1%}")


if __name__ == "__main__":
    main()
