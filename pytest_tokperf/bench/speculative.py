"""Speculative decoding A/B: base and drafting engine on the same prompts, interleaved.

Only the base side is compared to the ceiling (a draft changes tokens per pass, not how
fast the weights stream); the accelerated side gives the multiplier and the acceptance rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pytest_tokperf.bench.measure import (
    MeasureOptions,
    run_workload,
    summarize,
    tagged_progress,
    validate_workload,
)
from pytest_tokperf.engines.base import Engine
from pytest_tokperf.errors import MeasuredBusy, MeasurementError
from pytest_tokperf.results import BenchResult, Progress, Sample, Summary, Workload


@dataclass(frozen=True, slots=True)
class SpeculativeResult:
    """The two sides of one A/B, each a full ``BenchResult``."""

    base: BenchResult
    accelerated: BenchResult

    @property
    def engine_clock(self) -> bool:
        """Whether every repetition of both sides has the engine's decode timing: then the
        multiplier is the engine's ratio, as the ceiling judges the engine's figure."""
        both = (*self.base.samples, *self.accelerated.samples)
        return bool(self.base.samples and self.accelerated.samples) and all(
            s.engine_decode_tokens_per_s for s in both)

    @property
    def multiplier(self) -> float | None:
        """Accelerated over base median decode tok/s (2.0 = twice as fast), on one clock
        for both sides: the engine's where ``engine_clock``, else the client's."""
        return self.engine_multiplier if self.engine_clock else self.client_multiplier

    @property
    def client_multiplier(self) -> float | None:
        """The same ratio from the client's clock (time after the first token)."""
        return _ratio(self.accelerated.decode_tokens_per_s, self.base.decode_tokens_per_s)

    @property
    def engine_multiplier(self) -> float | None:
        """The same ratio from the engine's own decode timings."""
        return _ratio(self.accelerated.engine_decode_tokens_per_s,
                      self.base.engine_decode_tokens_per_s)

    @property
    def drafted_tokens(self) -> int | None:
        return _total(self.accelerated.samples, "draft_tokens")

    @property
    def accepted_tokens(self) -> int | None:
        return _total(self.accelerated.samples, "draft_accepted_tokens")

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens over all accelerated repetitions, if reported."""
        drafted, accepted = self.drafted_tokens, self.accepted_tokens
        return accepted / drafted if drafted and accepted is not None else None

    def describe(self) -> str:
        multiplier = self.multiplier
        engine = self.engine_clock
        base, fast = ((self.base.engine_decode_tokens_per_s,
                       self.accelerated.engine_decode_tokens_per_s) if engine else
                      (self.base.decode_tokens_per_s, self.accelerated.decode_tokens_per_s))
        text = "speculative A/B: "
        if multiplier is not None and base is not None and fast is not None:
            text += (f"{multiplier:.2f}x the base decode ({fast.median:.1f} vs "
                     f"{base.median:.1f} tok/s, {'engine' if engine else 'client'} clock)")
        else:
            missing = [name for name, side in (("base", base), ("speculative", fast))
                       if side is None]
            sides = f"{' and '.join(missing)} side{'s' if len(missing) > 1 else ''}"
            text += (f"no multiplier: the {sides if missing else 'base side'} timed no "
                     "decode (its tokens arrived at once, in one read on a starved machine, or "
                     "one token, and the engine gave no decode timing)")
        rate = self.acceptance_rate
        if rate is not None:
            text += f", draft acceptance {rate:.0%} ({self.accepted_tokens} of {self.drafted_tokens})"
        else:
            text += ", the engine reported no draft counts"
        return text


def _ratio(a: Summary | None, b: Summary | None) -> float | None:
    return a.median / b.median if a is not None and b is not None and b.median > 0 else None


def _total(samples: tuple[Sample, ...], name: str) -> int | None:
    values = [getattr(s, name) for s in samples]
    if not values or any(v is None for v in values):
        return None
    return int(sum(values))


def run_speculative_ab(
    base: Engine,
    accelerated: Engine,
    workload: Workload,
    options: MeasureOptions = MeasureOptions(),
    progress: Progress | None = None,
) -> SpeculativeResult:
    """Warm both up, then one measured round on each, alternating which goes first; a
    failure raises ``MeasurementError`` whose ``partial`` is the base side so far."""
    validate_workload(workload)
    sides = (("base", base), ("speculative", accelerated))
    if workload.warmup:
        for name, engine in sides:
            warm = replace(workload, repetitions=workload.warmup, warmup=0)
            run_workload(engine, warm, replace(options, salt_base=options.salt_base + 10**6),
                         tagged_progress(progress, f"{name} warm-up"))
    samples: dict[str, list[Sample]] = {"base": [], "speculative": []}
    one = replace(workload, repetitions=1, warmup=0)
    for index in range(workload.repetitions):
        salted = replace(options, salt_base=options.salt_base + index * workload.concurrency)
        for name, engine in (sides if index % 2 == 0 else sides[::-1]):
            tag = f"{name} {index + 1}/{workload.repetitions}"
            try:
                result = run_workload(engine, one, salted, tagged_progress(progress, tag))
            except (MeasurementError, MeasuredBusy) as exc:  # the base side so far is kept
                done = samples["base"]
                partial = summarize(workload, base.info(), done, options.agreement_tolerance) if done else None
                raise type(exc)(f"speculative A/B, {name} side: {exc}", partial=partial) from exc
            samples[name].extend(result.samples)
    results = {name: summarize(workload, engine.info(), samples[name], options.agreement_tolerance)
               for name, engine in sides}
    outcome = SpeculativeResult(base=results["base"], accelerated=results["speculative"])
    accelerated_result = replace(outcome.accelerated,
                                 notes=(*outcome.accelerated.notes, outcome.describe()))
    return replace(outcome, accelerated=accelerated_result)
