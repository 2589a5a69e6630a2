"""Turn streamed generations into figures: TTFT, prefill and steady-state decode.

The definitions and the adaptive stopping rule are docs/writing-tests.md's. A warm prefix
is sent first, unmeasured, so the measured request may take it from the prefix cache;
cold prompts are salted. Warm-up runs are discarded; every repetition keeps its figures.
"""

from __future__ import annotations

import math
import statistics
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_tokperf.engines.base import Engine, prompt_cache_off
from pytest_tokperf.engines.speculation import with_observed_speculation
from pytest_tokperf.engines.values import checked_timings
from pytest_tokperf.engines.wire import SALT_LINE_TOKENS
from pytest_tokperf.errors import ConfigError, MeasurementError, TokperfError
from pytest_tokperf.hardware.load import BusyWatch, LoadSampler
from pytest_tokperf.hardware.process_clock import (
    ProcessClock,
    ThreadTimes,
    WindowTimes,
    window,
    working,
)
from pytest_tokperf.results import (
    BenchResult,
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    Progress,
    Sample,
    Summary,
    Workload,
    combine_loads,
    judged_decode_values,
)

if TYPE_CHECKING:
    from pytest_tokperf.settings import Settings

DEFAULT_AGREEMENT_TOLERANCE = 0.05
"""Client and engine decode tok/s must agree within 5% or the result says so."""

CLIENT_COST_FRACTION = 0.25
"""The client's time per event, as a share of the interval between events, worth a note."""
DEFAULT_TARGET_INTERVAL = 0.02
DEFAULT_MIN_REPETITIONS = 3
DEFAULT_MAX_REPETITIONS = 10
DEFAULT_MAX_CV = 0.05

_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201,
          2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
          2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student's t, two-sided 95%, for 1..30 degrees of freedom (1.96 beyond)."""


@dataclass(frozen=True, slots=True)
class MeasureOptions:
    agreement_tolerance: float = DEFAULT_AGREEMENT_TOLERANCE
    timeout_s: float = 600.0
    salt_base: int = 0
    adaptive: bool = False
    """Stop once the decode is known to ``target_interval`` (False: all the repetitions)."""
    target_interval: float = DEFAULT_TARGET_INTERVAL
    min_repetitions: int = DEFAULT_MIN_REPETITIONS
    max_cv: float = DEFAULT_MAX_CV
    max_cv_option: str = "ini tokperf_max_cv"
    """How the user sets ``max_cv`` (``Settings.option_name``): the unstable note names it."""
    budget_s: float | None = None
    """A same-run A/B stops at the next even pair count once this many seconds have passed
    since it began (warm-up included). None: no limit (``Workload.repetitions`` pairs)."""
    engine_pids: tuple[int, ...] = ()
    """The server processes tokperf started: their CPU time is told from the neighbours'."""
    sample_load: bool = True
    """Read the machine's load (/proc) around every measured repetition."""
    load_sampler: Callable[[tuple[int, ...]], LoadSampler] = LoadSampler
    watch: BusyWatch | None = None
    """Stops the measurement, mid-request too, once it reads busy (``MeasuredBusy``)."""

    @classmethod
    def of(cls, settings: Settings) -> MeasureOptions:
        """The options a run's settings ask for (adaptivity is decided per call)."""
        return cls(agreement_tolerance=settings.agreement, timeout_s=settings.request_timeout,
                   target_interval=settings.target_interval,
                   min_repetitions=settings.min_repetitions, max_cv=settings.max_cv,
                   max_cv_option=settings.option_name("max_cv"), budget_s=settings.ab_budget)


def decode_interval(values: list[float]) -> float | None:
    """Relative half-width of the 95% interval of the mean of ``values`` (Student's t):
    0.02 means the mean is known to +/-2%. None below 2 values or at a mean <= 0."""
    n = len(values)
    mean = statistics.fmean(values) if n >= 2 else 0.0
    if mean <= 0:
        return None
    t = _T_975[n - 2] if n - 1 <= len(_T_975) else 1.96
    return t * statistics.stdev(values) / math.sqrt(n) / mean


def is_unstable(result: BenchResult, max_cv: float) -> bool:
    """Did the judged decode vary more than ``max_cv`` (CV) over the repetitions?"""
    spread = result.judged_decode_tokens_per_s
    return spread is not None and spread.n >= 2 and spread.cv > max_cv


def _judged_name(samples: list[Sample]) -> str:
    engine = bool(samples) and all(s.engine_decode_tokens_per_s for s in samples)
    return "engine's" if engine else "client's"


def repetition_notes(result: BenchResult, options: MeasureOptions) -> list[str]:
    """What the count of repetitions bought: the target missed, a spread too wide."""
    notes = []
    samples = list(result.samples)
    values = judged_decode_values(samples)
    interval = decode_interval(values)
    n = result.workload.repetitions
    if options.adaptive and interval is not None and interval > options.target_interval:
        notes.append(f"adaptive: the {_judged_name(samples)} decode is known to +/-{interval:.1%} "
                     f"(95% interval of the mean) after the most repetitions, {n}; the target "
                     f"was +/-{options.target_interval:.1%}")
    if is_unstable(result, options.max_cv):
        spread = result.judged_decode_tokens_per_s
        assert spread is not None
        notes.append(f"unstable: the {_judged_name(samples)} decode varied by CV {spread.cv:.1%} "
                     f"over {spread.n} repetitions ({spread.minimum:.1f} to {spread.maximum:.1f} "
                     f"tok/s), above the {options.max_cv:.0%} limit ({options.max_cv_option}): the "
                     f"median stands, but not as a pass; the engine or the machine changed "
                     f"speed during the measurement")
    return notes


def validate_workload(workload: Workload) -> None:
    """Reject a workload that cannot be measured, before any request is sent."""
    for name, minimum in (("prompt_tokens", 1), ("generate_tokens", 2), ("repetitions", 1),
                          ("warmup", 0), ("depth_tokens", 0), ("concurrency", 1),
                          ("cached_prefix_tokens", 0)):
        value = getattr(workload, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            why = (" (decode speed needs at least 2 generated tokens)"
                   if name == "generate_tokens" else "")
            raise ConfigError(f"{name}={value!r} is not a whole number >= {minimum}{why}")
    if not isinstance(workload.chat, bool):
        raise ConfigError(f"chat={workload.chat!r} must be True or False")
    context = workload.depth_tokens + workload.prompt_tokens
    if workload.cached_prefix_tokens >= context:
        raise ConfigError(
            f"cached_prefix_tokens={workload.cached_prefix_tokens} must be below depth + prompt "
            f"({workload.depth_tokens} + {workload.prompt_tokens} = {context}): a warm TTFT "
            f"needs new tokens after the cached prefix; lower it or raise prompt_tokens"
        )


def check_context(workload: Workload, info: EngineInfo) -> None:
    """Depth + prompt + generated tokens must fit the engine's context, before generating."""
    needed = workload.depth_tokens + workload.prompt_tokens + workload.generate_tokens
    if info.context_size and needed > info.context_size:
        raise ConfigError(
            f"depth {workload.depth_tokens} + prompt {workload.prompt_tokens} + generate "
            f"{workload.generate_tokens} = {needed} tokens exceeds the engine's context of "
            f"{info.context_size}; lower the depth or raise --tokperf-ctx-size"
        )
    slots = dict(info.settings).get("total_slots")
    if slots and slots.isdigit() and workload.concurrency > int(slots):
        raise ConfigError(
            f"concurrency {workload.concurrency} needs {workload.concurrency} server slots but "
            f"{info.name} at {info.base_url} has {slots}; start it with --tokperf-parallel "
            f"{workload.concurrency} (llama-server -np {workload.concurrency})"
        )


def to_sample(generation: Generation) -> Sample:
    """One repetition's figures from what the client saw and what the engine said."""
    times = generation.chunk_times_s
    if not times:
        raise ConfigError("the engine returned no generated tokens; nothing to measure")
    ttft = times[0] - generation.sent_s
    prompt_tokens = generation.prompt_tokens or generation.request.prompt_tokens
    after_first = generation.generated_tokens - generation.chunk_tokens[0]
    span = times[-1] - times[0]
    decode = after_first / span if after_first > 0 and span > 0 else None
    gaps = tuple(
        (b - a) / n for a, b, n in zip(times, times[1:], generation.chunk_tokens[1:], strict=False)
    )
    engine = _engine_timings(generation)
    ttft_times, decode_times = _waits(generation)
    reasoning_tokens = answer_ttft = None
    if any(generation.chunk_reasoning):
        flags = generation.chunk_reasoning
        reasoning_tokens = sum(n for n, r in zip(generation.chunk_tokens, flags, strict=True) if r)
        answers = [t for t, r in zip(times, flags, strict=True) if not r]
        answer_ttft = answers[0] - generation.sent_s if answers else None
    return Sample(
        ttft_s=ttft,
        prefill_tokens_per_s=prompt_tokens / ttft if ttft > 0 else None,
        decode_tokens_per_s=decode,
        prompt_tokens=prompt_tokens,
        generated_tokens=generation.generated_tokens,
        inter_token_s=gaps,
        engine_prefill_s=engine.prefill_s if engine else None,
        engine_prefill_tokens_per_s=engine.prefill_tokens_per_s if engine else None,
        engine_decode_tokens_per_s=engine.decode_tokens_per_s if engine else None,
        cached_prompt_tokens=engine.cached_prompt_tokens if engine else None,
        speculative=bool(engine and engine.speculative),
        text_chars=len(generation.text),
        draft_tokens=engine.draft_tokens if engine else None,
        draft_accepted_tokens=engine.draft_accepted_tokens if engine else None,
        reasoning_tokens=reasoning_tokens,
        answer_ttft_s=answer_ttft,
        decode_wait_s=decode_times.wait_s if decode_times else None,
        decode_wait_share=decode_times.wait_share if decode_times else None,
        ttft_wait_s=ttft_times.wait_s if ttft_times else None,
    )


def _engine_timings(generation: Generation) -> EngineTimings | None:
    """The engine's own account, each figure held to ``engines.values``' rules."""
    if generation.engine is None:
        return None
    return checked_timings(generation.engine, generation.request.generate_tokens)


def engine_values_note(info: EngineInfo, generations: list[Generation]) -> str | None:
    """A note when the engine sent values that could not be used (None when it did not)."""
    dropped = [t.dropped for t in map(_engine_timings, generations) if t is not None]
    hit = [d for d in dropped if d]
    if not hit:
        return None
    said = list(dict.fromkeys(note for d in hit for note in d))
    more = f"; {len(said) - 4} more" if len(said) > 4 else ""
    return (f"{info.name} at {info.base_url} sent unusable values in {len(hit)} of "
            f"{len(generations)} responses ({'; '.join(said[:4])}{more}): the engine's own "
            f"figures from them were dropped and the client's measurement kept")


def _waits(generation: Generation) -> tuple[WindowTimes | None, WindowTimes | None]:
    """The engine's threads before the first token and during decode (None: no clock)."""
    if generation.clock_marks is None:
        return None, None
    (t0, sent), (t1, first), (t2, end) = generation.clock_marks
    if not (isinstance(sent, ThreadTimes) and isinstance(first, ThreadTimes)
            and isinstance(end, ThreadTimes)):
        return None, None
    decode = window(first, end, t2 - t1)
    if decode is None:
        # A starved client read the decode in one burst, after the threads did their work:
        # take the request's working threads, so the repetition keeps a net figure
        decode = window(first, end, t2 - t1, among=working(sent, end, t2 - t0))
    return window(sent, first, t1 - t0), decode


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile, as ``numpy.percentile`` interpolates; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _disagreement_note(samples: list[Sample], agreement: float, tolerance: float) -> str:
    """Say which way client and engine disagree, and what that usually means."""
    head = (f"client and engine decode tok/s differ by {agreement:.1%} (median), more than "
            f"{tolerance:.0%}")
    faster = sum(1 for s in samples if s.decode_tokens_per_s and s.engine_decode_tokens_per_s
                 and s.decode_tokens_per_s > s.engine_decode_tokens_per_s)
    if faster * 2 > len(samples):  # faster than the engine made them: delivered in bursts
        return (f"{head}: the client read tokens in bursts, faster than the engine made them; "
                "the client or the server's HTTP front end was starved of CPU (engine "
                "threads on every core, or a busy machine), or something buffered the "
                "stream. Leave the client and the server a core with --tokperf-threads, or "
                "judge the engine's own figure")
    return f"{head}: the client or the connection is adding latency"


def _token_notes(workload: Workload, samples: list[Sample]) -> list[str]:
    """Fewer tokens generated than asked; a prompt the engine counted otherwise."""
    notes: list[str] = []
    short = [s.generated_tokens for s in samples if s.generated_tokens != workload.generate_tokens]
    if short:
        notes.append(
            f"asked for {workload.generate_tokens} tokens, got {sorted(set(short))} in "
            f"{len(short)} of {len(samples)} repetitions"
        )
    asked = workload.depth_tokens + workload.prompt_tokens
    counted = sorted({s.prompt_tokens for s in samples})
    if counted and not workload.cached_prefix_tokens and any(
            abs(s.prompt_tokens - asked) > (s.cached_prompt_tokens or 0) for s in samples):
        span = f"{counted[0]}" if len(counted) == 1 else f"{counted[0]}-{counted[-1]}"
        notes.append(f"the engine counted {span} prompt tokens for the {asked} asked"
                     + (" (the chat template's included)" if workload.chat else ""))
    return notes


def _cache_note(workload: Workload, samples: list[Sample]) -> str | None:
    """A warm prefix the engine did not serve, or a cold prompt it did."""
    offered = workload.cached_prefix_tokens
    if offered:
        served = [s.cached_prompt_tokens for s in samples if s.cached_prompt_tokens is not None]
        if served and min(served) < 0.9 * offered:
            return (
                f"engine served only {min(served)} of {offered} primed prefix tokens from its "
                "cache: its prompt cache is off, too small, or evicted the prefix, so this "
                "TTFT is not warm"
            )
        return None
    # A shared start-of-text token (mlx_lm, SGLang), or the chat template's role header
    # before the salted line, may come from a cache in a cold prompt
    allowed = SALT_LINE_TOKENS if workload.chat else 1
    cached = [s.cached_prompt_tokens for s in samples
              if s.cached_prompt_tokens
              and s.cached_prompt_tokens > max(allowed, s.prompt_tokens // 100)]
    if cached:
        return f"engine reused {max(cached)} cached prompt tokens: prefill is not cold"
    return None


def _reasoning_note(samples: list[Sample]) -> str | None:
    """How much of the output a reasoning model spent thinking."""
    thought = [s.reasoning_tokens for s in samples if s.reasoning_tokens is not None]
    if not thought:
        return None
    answered = [s.answer_ttft_s for s in samples if s.answer_ttft_s is not None]
    return (
        f"{statistics.median(thought):.0f} of {statistics.median(s.generated_tokens for s in samples):.0f} "
        f"generated tokens were reasoning (median); "
        + (f"first answer token after {statistics.median(answered):.2f} s" if answered
           else "no answer token arrived: all of it was thinking")
    )


def summarize(
    workload: Workload,
    engine: EngineInfo,
    samples: list[Sample],
    tolerance: float = DEFAULT_AGREEMENT_TOLERANCE,
) -> BenchResult:
    """Medians, dispersion, percentiles and the sanity notes for a set of samples."""
    engine = with_observed_speculation(engine, samples)  # drafting seen moves the series
    notes = _token_notes(workload, samples)
    notes += [n for n in (_cache_note(workload, samples), _reasoning_note(samples)) if n]
    if any(s.speculative for s in samples):
        notes.append("speculative decoding was active: this is not the base decode speed")
    differences = [
        abs(s.decode_tokens_per_s - s.engine_decode_tokens_per_s) / s.engine_decode_tokens_per_s
        for s in samples
        if s.decode_tokens_per_s and s.engine_decode_tokens_per_s
    ]
    agreement = statistics.median(differences) if differences else None
    if agreement is not None and agreement > tolerance:
        notes.append(_disagreement_note(samples, agreement, tolerance))
    ttft_gaps = [s.ttft_s - s.engine_prefill_s for s in samples
                 if s.ttft_s is not None and s.engine_prefill_s is not None]
    itl = [gap for s in samples for gap in s.inter_token_s]
    load = combine_loads(list({id(s.load): s.load for s in samples if s.load}.values()))
    warning = load.warning() if load is not None else None
    if warning is not None:
        notes.append(warning)
    ttft = Summary.of([s.ttft_s for s in samples])
    assert ttft is not None  # samples is never empty here
    return BenchResult(
        workload=workload,
        engine=engine,
        samples=tuple(samples),
        ttft_s=ttft,
        decode_tokens_per_s=Summary.of([s.decode_tokens_per_s for s in samples]),
        prefill_tokens_per_s=Summary.of([s.prefill_tokens_per_s for s in samples]),
        engine_decode_tokens_per_s=Summary.of([s.engine_decode_tokens_per_s for s in samples]),
        engine_prefill_tokens_per_s=Summary.of([s.engine_prefill_tokens_per_s for s in samples]),
        inter_token_p50_s=percentile(itl, 0.50),
        inter_token_p90_s=percentile(itl, 0.90),
        inter_token_p99_s=percentile(itl, 0.99),
        decode_agreement=agreement,
        ttft_minus_engine_prefill_s=statistics.median(ttft_gaps) if ttft_gaps else None,
        notes=tuple(notes),
        load=load,
    )


def client_cost_note(generations: list[Generation]) -> str | None:
    """A note when the client's own cost per event nears the interval between events (a
    busy client stamps the events waiting in the socket late)."""
    shares: list[tuple[float, float, float]] = []
    for g in generations:
        times = g.chunk_times_s
        cost = g.client_s_per_event
        if cost is None or len(times) < 3 or times[-1] <= times[0]:
            continue
        interval = (times[-1] - times[0]) / (len(times) - 1)
        shares.append((cost / interval, cost, interval))
    if not shares:
        return None
    share, cost, interval = sorted(shares)[len(shares) // 2]
    if share < CLIENT_COST_FRACTION:
        return None
    return (f"client cost: reading and parsing took {cost * 1e6:.1f} us per streamed event, "
            f"{share:.0%} of the {interval * 1e6:.1f} us between events (median stream): "
            f"token times carry up to that much client delay, and near 100% the client, not "
            f"the engine, sets the decode speed; judge the engine's own figure")


_CLOCKS: weakref.WeakKeyDictionary[Engine, ProcessClock] = weakref.WeakKeyDictionary()


def attach_process_clock(engine: Engine, pid: int) -> None:
    """Read ``pid``'s threads around each decode window measured on ``engine``, so each
    repetition knows how long the engine waited for a CPU (``Sample.decode_wait_s``)."""
    _CLOCKS[engine] = ProcessClock(pid)


def tagged_progress(progress: Progress | None, tag: str) -> Progress | None:
    """``progress`` with each line's lead-in replaced by ``tag``."""
    if progress is None:
        return None
    return lambda message: progress(f"{tag}: {message.split(': ', 1)[-1]}")


def _round(engine: Engine, requests: list[GenerationRequest]) -> list[Generation]:
    if len(requests) == 1:
        return [engine.generate(requests[0])]
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(engine.generate, requests))


def _wall_s(generations: list[Generation]) -> float | None:
    """A round's wall time: the first send to the last token of any stream."""
    ends = [g.chunk_times_s[-1] for g in generations if g.chunk_times_s]
    span = max(ends, default=0.0) - min(g.sent_s for g in generations)
    return span if ends and span > 0 else None


def aggregate_tokens_per_s(generations: list[Generation]) -> float | None:
    """Output tokens of all streams / wall time from the first send to the last token."""
    span = _wall_s(generations)
    return sum(g.generated_tokens for g in generations) / span if span else None


def _refuse_what_the_engine_cannot_serve(engine: Engine, workload: Workload,
                                         info: EngineInfo) -> None:
    """A chat workload on an adapter without a chat route; a warm one with the cache off."""
    if workload.chat and not getattr(engine, "supports_chat", False):
        raise ConfigError(
            f"chat workloads (chat=True) are not built for {info.name} yet (its adapter has "
            f"no chat route); drop chat=True to measure the raw prompt"
        )
    off = prompt_cache_off(engine) if workload.cached_prefix_tokens else None
    if off is not None:
        raise ConfigError(
            f"a warm workload (cached_prefix_tokens={workload.cached_prefix_tokens}) needs "
            f"{info.name}'s prompt cache, which is off at {info.base_url} ({off}); drop "
            f"cached_prefix_tokens, or start the engine with its cache on "
            f"(--tokperf-server-arg)"
        )


def _measure_round(engine: Engine, workload: Workload, options: MeasureOptions,
                   index: int) -> tuple[list[Generation], list[Sample]]:
    """Round ``index``, one request per stream, each with its own salt: the warm prefix
    first (unmeasured), the load read past warm-up."""
    n, clock = workload.concurrency, _CLOCKS.get(engine)
    requests = [GenerationRequest(prompt_tokens=workload.depth_tokens + workload.prompt_tokens,
                                  generate_tokens=workload.generate_tokens,
                                  salt=options.salt_base + index * n + stream,
                                  timeout_s=options.timeout_s,
                                  reuse_prefix=workload.cached_prefix_tokens > 0,
                                  chat=workload.chat,
                                  clock=clock.read if clock is not None else None,
                                  stop=options.watch.stopping if options.watch else None)
                for stream in range(n)]
    if workload.cached_prefix_tokens > 0:
        # Unmeasured: the same salt makes these prompts the measured ones' prefix.
        _round(engine, [replace(r, prompt_tokens=workload.cached_prefix_tokens,
                                generate_tokens=1) for r in requests])
    sampler = (options.load_sampler(options.engine_pids).start()
               if options.sample_load and index >= workload.warmup else None)
    try:
        generations = _round(engine, requests)
    finally:
        load = sampler.stop() if sampler is not None else None
    return generations, [replace(to_sample(g), load=load) for g in generations]


def _progress_line(workload: Workload, options: MeasureOptions, index: int,
                   round_samples: list[Sample], aggregate: float | None,
                   interval: float | None) -> str:
    warming = index < workload.warmup
    phase = "warm-up" if warming else "rep"
    done = index + 1 if warming else index + 1 - workload.warmup
    of = workload.warmup if warming else workload.repetitions
    of_text = f"{of}" if warming or not options.adaptive else f"<={of}"
    rates = judged_decode_values(round_samples)
    rate = f"{statistics.median(rates):.1f} tok/s" if rates else "-"
    n = workload.concurrency
    streams = f" x{n} streams, aggregate {aggregate:.1f} tok/s" if n > 1 and aggregate else ""
    known = f", decode +/-{interval:.1%}" if interval is not None else ""
    ttft = round_samples[0].ttft_s
    return (f"{phase} {done}/{of_text}: decode {rate}{streams}, "
            f"TTFT {'-' if ttft is None else f'{ttft * 1e3:.0f}'} ms{known}")


def _result_of(workload: Workload, info: EngineInfo, options: MeasureOptions,
               samples: list[Sample], aggregates: list[float],
               measured: list[Generation]) -> BenchResult:
    """The measured rounds summarized, with the notes only the whole run can give."""
    n = workload.concurrency
    result = replace(summarize(workload, info, samples, options.agreement_tolerance),
                     aggregate_tokens_per_s=Summary.of(aggregates))
    result = replace(result, notes=(*result.notes, *repetition_notes(result, options)))
    agg, per_stream = result.aggregate_tokens_per_s, result.judged_decode_tokens_per_s
    if n > 1 and agg is not None and per_stream is not None:
        note = (f"{n} concurrent streams: aggregate {agg.median:.1f} tok/s output, "
                f"{per_stream.median:.1f} tok/s decode per stream")
        result = replace(result, notes=(*result.notes, note))
    notes = (client_cost_note(measured), engine_values_note(info, measured))
    return replace(result, notes=(*result.notes, *(n for n in notes if n is not None)))


def run_workload(
    engine: Engine,
    workload: Workload,
    options: MeasureOptions = MeasureOptions(),
    progress: Progress | None = None,
) -> BenchResult:
    """Warm up, then measure ``workload.repetitions`` rounds of ``concurrency`` streams;
    ``options.watch`` reading busy stops it mid-request (``MeasuredBusy``, rounds kept)."""
    validate_workload(workload)
    info = engine.info()
    check_context(workload, info)
    _refuse_what_the_engine_cannot_serve(engine, workload, info)
    samples: list[Sample] = []
    aggregates: list[float] = []
    measured: list[Generation] = []
    total = workload.warmup + workload.repetitions
    rounds = 0
    for index in range(total):
        try:
            generations, round_samples = _measure_round(engine, workload, options, index)
        except TokperfError as exc:
            done = replace(workload, repetitions=rounds)  # what a failure keeps
            partial = summarize(done, info, samples, options.agreement_tolerance) if samples else None
            stopped = options.watch.stopped(exc, partial) if options.watch else None
            if stopped is not None:
                raise stopped from exc
            raise MeasurementError(
                f"repetition {index + 1} of {total} failed: {exc}", partial=partial
            ) from exc
        aggregate = aggregate_tokens_per_s(generations)
        interval = None
        if index >= workload.warmup:
            wall = _wall_s(generations)
            round_samples = [replace(s, round_index=index - workload.warmup, round_wall_s=wall)
                             for s in round_samples]
            rounds += 1
            samples.extend(round_samples)
            measured.extend(generations)
            if aggregate is not None:
                aggregates.append(aggregate)
            if options.adaptive:
                interval = decode_interval(judged_decode_values(samples))
        if progress is not None:
            progress(_progress_line(workload, options, index, round_samples, aggregate,
                                    interval))
        if (interval is not None and rounds >= options.min_repetitions
                and interval <= options.target_interval):
            break
    return _result_of(replace(workload, repetitions=rounds), info, options, samples,
                      aggregates, measured)
