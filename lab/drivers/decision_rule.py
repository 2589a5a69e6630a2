"""How often each verdict is given under the decision rule, on simulated data.

Three tables: the same-run A/B's paired judge (one start, independent pairs whose log-ratio
has SD 6%), the history gate (5 earlier runs of 5 repetitions, repetition CV 2%, runs
that agree or spread 1%) and the gate on histories whose sessions sit in two machine
phases. Each cell counts the verdicts of --trials simulated comparisons.

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/decision_rule.py [--trials 400]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from pytest_tokperf.stats import DECODE, Metric, compare
from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT, Pairs, judge_pairs

AB_DECODE = Metric("decode", True, PAIRED_MIN_EFFECT)


def _counts(verdicts: list[str]) -> str:
    return ", ".join(f"{v} {verdicts.count(v)}" for v in
                     ("regression", "improvement", "unchanged", "inconclusive") if v in verdicts)


def paired(trials: int) -> None:
    print(f"paired judge, minimum effect {PAIRED_MIN_EFFECT:.0%}, pair SD 6%, {trials} A/Bs a cell")
    for n, step in ((200, 0.0), (200, -0.01), (300, -0.01), (400, -0.02), (400, -0.03),
                    (200, -0.05), (400, -0.05)):
        verdicts = []
        for seed in range(trials):
            rng = np.random.default_rng(seed)
            base = 40.0 * np.exp(rng.normal(0, 0.06 / math.sqrt(2), n))
            cand = 40.0 * (1 + step) * np.exp(rng.normal(0, 0.06 / math.sqrt(2), n))
            verdicts.append(judge_pairs(Pairs.of(AB_DECODE, list(base), list(cand))).verdict)
        print(f"  {n} pairs, true step {step:+.0%}: {_counts(verdicts)}")


def gate(trials: int) -> None:
    print(f"history gate, minimum effect {DECODE.min_effect:.0%}, 5 runs x 5 repetitions "
          f"(CV 2%), {trials} judgements a cell")
    for between in (0.0, 0.01):
        for step in (0.0, -0.05, -0.065, -0.08):
            rng = np.random.default_rng(7)
            verdicts = []
            for _ in range(trials):
                runs = [list(100 * math.exp(rng.normal(0, between))
                             * np.exp(rng.normal(0, 0.02, 5))) for _ in range(5)]
                level = 100 * (1 + step) * math.exp(rng.normal(0, between))
                current = list(level * np.exp(rng.normal(0, 0.02, 5)))
                verdicts.append(compare(runs, current, DECODE).verdict)
            print(f"  runs spread {between:.0%}, true step {step:+.1%}: {_counts(verdicts)}")


def two_phase(trials: int) -> None:
    """Step-free histories of 3-5 sessions (5 repetitions, CV 2%) whose machine sits in one
    of two phases (+-p, each session's at random), the current session too."""
    print(f"history gate on two-phase histories, 3-5 sessions, {trials} judgements a cell")
    for phase in (0.02, 0.03, 0.05, 0.075, 0.10):
        flagged = 0
        for seed in range(trials):
            rng = np.random.default_rng(seed)

            def level() -> float:
                return 100 * math.exp(phase * (1 if rng.random() < 0.5 else -1))

            runs = [list(level() * np.exp(rng.normal(0, 0.02, 5))) for _ in range(3 + seed % 3)]
            current = list(level() * np.exp(rng.normal(0, 0.02, 5)))
            flagged += compare(runs, current, DECODE).flagged
        print(f"  phases +-{phase:.1%}: {flagged / trials:.1%} flagged")


DECODE_PER_BANDWIDTH = 0.33
"""Decode follows bandwidth as ~bandwidth^0.33 on the project's VMs (physics.md)."""


def two_phase_probed(trials: int) -> None:
    """The two-phase histories again, each session with a bandwidth probe: the phase's
    bandwidth (decode's phase ratio to the power 1 / 0.33 around 47 GB/s) times a probe
    noise of SD 5%; the gate's flag withheld where the memory moved (``stats.moved``).
    Columns: no step (false flags), and a true -10% step (found)."""
    from pytest_tokperf.stats.moved import moved_verdict

    print(f"two-phase histories with probes (SD 5%), 3-5 sessions, {trials} judgements a cell")
    for phase in (0.02, 0.03, 0.05, 0.075, 0.10):
        found = {0.0: [0, 0], -0.10: [0, 0]}
        for step in found:
            for seed in range(trials):
                rng = np.random.default_rng(seed)

                def session(shift: float = 0.0) -> tuple[list[float], float]:
                    sign = 1 if rng.random() < 0.5 else -1
                    decode = 100 * math.exp(phase * sign + shift)
                    probe = 47e9 * math.exp(phase * sign / DECODE_PER_BANDWIDTH
                                            + rng.normal(0, 0.05))
                    return list(decode * np.exp(rng.normal(0, 0.02, 5))), probe

                history = [session() for _ in range(3 + seed % 3)]
                current, probe = session(step)
                verdict = compare([h for h, _ in history], current, DECODE)
                withheld = moved_verdict(verdict, [probe], [p for _, p in history])
                found[step][0] += verdict.flagged
                found[step][1] += withheld.flagged
        (f0, w0), (f1, w1) = found[0.0], found[-0.10]
        print(f"  phases +-{phase:.1%}: false flags {f0 / trials:.1%} -> {w0 / trials:.1%}"
              f" with probes; -10% step found {f1 / trials:.1%} -> {w1 / trials:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    paired(args.trials)
    gate(args.trials)
    two_phase(args.trials)
    two_phase_probed(args.trials)


if __name__ == "__main__":
    main()
