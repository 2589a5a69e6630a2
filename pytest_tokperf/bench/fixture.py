"""``TokBench``: what a benchmark test calls, and the result it gets back.

Its collaborators are injected (an engine getter, a recorder, a progress callback); it
never reaches back into pytest. Each call is recorded the moment it finishes, before any
assertion runs, so a failing floor never loses the figures.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from pytest_tokperf.bench.measure import (
    DEFAULT_MAX_REPETITIONS,
    MeasureOptions,
    decode_interval,
    is_unstable,
    run_workload,
    validate_workload,
)
from pytest_tokperf.bench.speculative import SpeculativeResult, run_speculative_ab
from pytest_tokperf.ceiling import (
    EfficiencyCheck,
    check_efficiency,
    check_ttft,
    check_usable,
    decode_efficiency,
)
from pytest_tokperf.engines.base import Engine
from pytest_tokperf.errors import (
    ConfigError,
    MeasuredBusy,
    MeasurementError,
    TokperfWarning,
)
from pytest_tokperf.hardware.load import BusyWatch, wait_for_quiet
from pytest_tokperf.results import (
    BUSY_NOTE,
    BenchResult,
    Ceiling,
    Progress,
    Summary,
    Verdict,
    Workload,
    judged_decode_values,
)

if TYPE_CHECKING:
    from pytest_tokperf.bench.ab import ABResult, Restart

Revise = Callable[[Verdict], None]
"""Replaces a stored result's verdict with the test's own, worse one (an explicit assert)."""

Recorder = Callable[[BenchResult, "Ceiling | None", Verdict], "Revise | None"]
"""Stores one result with its ceiling and verdict; returns how to revise it (None: not stored)."""
T = TypeVar("T")


NO_DECODE = ("no decode speed was measured: fewer than 2 tokens per run, or each run's "
             "tokens arrived at once (one read: a starved client) and the engine timed none")


@dataclass(frozen=True, slots=True)
class ABPlan:
    """Turns every call of a ``TokBench`` into a same-run A/B (``bench.ab``)."""

    control: Callable[[], Engine]
    """The control engine (started on first use, beside the candidate)."""
    min_effect: float
    control_model_given: bool = False
    changed: Callable[[], str] = lambda: ""
    """What changed between the two builds, once both are started."""
    on_result: Callable[[ABResult], None] = lambda _: None
    starts: int = 1
    """Server starts a side each call's budget is split over (ini ``tokperf_ab_starts``)."""
    restart: Callable[[], Restart | None] = lambda: None
    """Once both are started: how to start both anew (None: one cannot be restarted)."""


@dataclass(frozen=True, slots=True)
class TokBenchResult:
    """A measured workload with its ceiling; offers the assertions tests want."""

    result: BenchResult
    ceiling: Ceiling | None = None
    ab: ABResult | None = None
    """The same-run A/B this result is the candidate side of (``--tokperf-ab-engine``)."""
    revise: Revise | None = field(default=None, compare=False, repr=False)
    """Called with the verdict when an assertion decides, so the stored one is final."""
    judge_busy: bool = False
    """True: checks decide even when measured busy; False: they raise ``MeasuredBusy``."""

    def _decided(self, verdict: Verdict) -> None:
        if self.revise is not None:
            self.revise(verdict)

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Median judged decode (the engine's own timing where every repetition has it,
        else the client's; ``BenchResult.judged_decode_tokens_per_s``)."""
        return _median(self.result.judged_decode_tokens_per_s)

    @property
    def client_decode_tokens_per_s(self) -> float | None:
        """Median decode on the client's clock: ``(N - 1) / (t_last - t_first)``."""
        return _median(self.result.decode_tokens_per_s)

    @property
    def prefill_tokens_per_s(self) -> float | None:
        return _median(self.result.prefill_tokens_per_s)

    @property
    def chars_per_s(self) -> float | None:
        """Median characters per second of steady decode (what a reader feels)."""
        return _median(self.result.chars_per_s)

    @property
    def ttft_s(self) -> float:
        assert self.result.ttft_s is not None  # a tok_bench run measures it (not an import)
        return self.result.ttft_s.median

    @property
    def reasoning_tokens(self) -> float | None:
        """Median generated tokens the engine marked as thinking (chat workloads)."""
        return _median(Summary.of([sample.reasoning_tokens for sample in self.result.samples]))

    @property
    def answer_ttft_s(self) -> float | None:
        """Median time to the first non-thinking token: the wait for a visible answer."""
        return _median(Summary.of([sample.answer_ttft_s for sample in self.result.samples]))

    @property
    def efficiency(self) -> float | None:
        return decode_efficiency(self.result, self.ceiling)

    @property
    def decode_cv(self) -> float | None:
        """Coefficient of variation of the judged decode over the repetitions."""
        s = self.result.judged_decode_tokens_per_s
        return s.cv if s is not None and s.n > 1 else None

    @property
    def decode_interval(self) -> float | None:
        """Relative half-width of the 95% interval of the mean judged decode (0.02: +/-2%)."""
        return decode_interval(judged_decode_values(self.result.samples))

    def _busy(self) -> str:
        """What a failed check adds when the neighbours had the machine, or when the
        ceiling rests on a bandwidth reached only on a busy machine ("" when neither)."""
        from pytest_tokperf.hardware.reached import LOADED_ONLY

        load = self.result.load
        said = (load.warning() if load is not None else None) or ""
        if not said and self.ceiling is not None and LOADED_ONLY in self.ceiling.bandwidth.detail:
            said = (f"{BUSY_NOTE} the ceiling's bandwidth was {LOADED_ONLY}, so it may be far "
                    "too low: this check cannot tell")
        return said

    def _refuse_busy(self, message: str) -> None:
        """A check measured on a busy machine decides nothing: ``MeasuredBusy``."""
        __tracebackhide__ = True
        busy = "" if self.judge_busy else self._busy()
        if busy:
            self._decided("busy")
            raise MeasuredBusy(f"{busy}; neither a pass nor a fail: {message.splitlines()[0]}; "
                               "rerun on a quiet machine (--tokperf-busy fail counts it)")

    def _no_decode(self) -> NoReturn:
        """No decode to check: when measured busy neither a pass nor a fail, else a fail."""
        __tracebackhide__ = True
        self._refuse_busy(NO_DECODE)
        self._decided("fail")
        raise AssertionError(NO_DECODE)

    def check_efficiency(self, min_fraction: float) -> EfficiencyCheck:
        """Compare the median decode to the ceiling; the message shows the arithmetic."""
        __tracebackhide__ = True
        if self.ceiling is None:
            raise AssertionError(
                "no decode ceiling is known for this result: the model file is not readable "
                "here or no bandwidth is known; pass --tokperf-model PATH and/or "
                "--tokperf-bandwidth 1008GB/s"
            )
        if self.decode_tokens_per_s is None:
            raise AssertionError(NO_DECODE)
        return check_efficiency(self.decode_tokens_per_s, self.ceiling, min_fraction)

    def assert_efficiency(self, min_fraction: float = 0.6) -> None:
        """Fail when decode is below ``min_fraction`` of the bandwidth ceiling; a decode far
        above it (a wrong ceiling) warns with ``TokperfWarning`` instead of passing."""
        __tracebackhide__ = True
        if self.ceiling is not None and self.decode_tokens_per_s is None:
            self._no_decode()
        check = self.check_efficiency(min_fraction)
        if check.status in ("pass", "fail"):
            self._refuse_busy(check.message)
        self._decided(check.status)
        if check.status == "fail":
            first, _, rest = check.message.partition("\n")
            busy = self._busy()
            raise AssertionError(first + (f"\n{busy}" if busy else "") + (f"\n{rest}" if rest else ""))
        if check.status == "suspect":
            warnings.warn(check.message, TokperfWarning, stacklevel=2)

    def assert_ttft(self, max_s: float) -> None:
        """Fail when the median time to first token is above ``max_s`` seconds."""
        __tracebackhide__ = True
        check = check_ttft(self.ttft_s, max_s, self.result.workload.prompt_tokens)
        self._refuse_busy(check.message)
        if not check.ok:
            self._decided("fail")
            message = f"{check.message} (median of {len(self.result.samples)})"
            raise AssertionError("; ".join(filter(None, (message, self._busy()))))

    def assert_usable(self, min_tokens_per_s: float = 5.0) -> None:
        """Fail when decode is slower than a reader can bear (default 5 tok/s)."""
        __tracebackhide__ = True
        decode = self.decode_tokens_per_s
        if decode is None:
            self._no_decode()
        check = check_usable(decode, min_tokens_per_s)
        self._refuse_busy(check.message)
        if not check.ok:
            self._decided("fail")
            raise AssertionError("; ".join(filter(None, (check.message, self._busy()))))


def _median(summary: Summary | None) -> float | None:
    return summary.median if summary else None


WORKLOAD_DEFAULTS: dict[str, int | bool] = {
    "prompt_tokens": 64, "generate_tokens": 128, "depth_tokens": 0, "concurrency": 1,
    "cached_prefix_tokens": 0, "chat": False}
"""The workload a bare ``tok_bench()`` measures; each is also a marker argument."""

FIXED_REPETITIONS = 5
"""A speculative A/B's fixed count, unless the call, marker or option names another."""


@dataclass
class TokBench:
    """Callable fixture value: ``tok_bench(prompt_tokens=..., generate_tokens=...)``."""

    engine: Callable[[], Engine]
    record: Recorder
    repetitions: int | None = None
    """Exactly this many per call; None: adaptive (``options``), at most ``max_repetitions``."""
    warmup: int = 1
    options: MeasureOptions = MeasureOptions()
    progress: Progress | None = None
    ceiling_for: Callable[[BenchResult], Ceiling | None] | None = None
    before_measure: Callable[[], object] | None = None
    min_efficiency: float | None = None
    calls: int = 0
    workload_defaults: tuple[tuple[str, int | bool], ...] = ()
    """Defaults for the workload arguments (from a ``tokperf(...)`` marker)."""
    max_repetitions: int = DEFAULT_MAX_REPETITIONS

    speculative_engine: Callable[[str | None], Engine] | None = None
    """Returns the drafting engine for ``speculative()`` (the session starts it)."""
    ab: ABPlan | None = None
    """Set: every call measures the control too, in ABBA pairs, and judges the ratio."""
    engine_pids: Callable[[], tuple[int, ...]] | None = None
    """The server processes tokperf started (read after they start), told from neighbours."""
    judge_busy: bool = False
    """Measure to the end and let floors decide even when busy (``--tokperf-busy judge``);
    False: a call still busy a minute in stops, and one measured busy raises ``MeasuredBusy``."""
    busy_wait_s: float = 0.0
    """A call measured busy waits up to this long for a quiet window and measures once
    more (the busy try is stored beside it as ``busy``); 0: no second try."""
    busy_wait_option: str = "ini tokperf_busy_wait"
    """How the user sets ``busy_wait_s`` (``Settings.option_name``), for the note."""
    wait_quiet: Callable[[float, tuple[int, ...]], float | None] | None = None
    """How to wait for a quiet window (``hardware.load.wait_for_quiet``; tests swap it)."""

    def __call__(
        self,
        prompt_tokens: int | None = None,
        generate_tokens: int | None = None,
        *,
        depth_tokens: int | None = None,
        concurrency: int | None = None,
        cached_prefix_tokens: int | None = None,
        chat: bool | None = None,
        repetitions: int | None = None,
        warmup: int | None = None,
    ) -> TokBenchResult:
        """Measure one workload (docs/writing-tests.md).

        ``depth_tokens`` of context precede the prompt; ``concurrency`` streams run at
        once; ``cached_prefix_tokens`` of depth + prompt are primed first (warm TTFT);
        ``chat=True`` goes through the chat template, thinking tokens counted apart. An
        argument left out comes from the ``tokperf(...)`` marker, else ``WORKLOAD_DEFAULTS``.
        ``repetitions=N`` runs exactly N; unset, until the judged decode is known to
        ``tokperf_target_interval``.
        """
        __tracebackhide__ = True
        fixed = repetitions if repetitions is not None else self.repetitions
        workload = self._workload(prompt_tokens=prompt_tokens, generate_tokens=generate_tokens,
                                  depth_tokens=depth_tokens, concurrency=concurrency,
                                  cached_prefix_tokens=cached_prefix_tokens, chat=chat,
                                  repetitions=fixed if fixed is not None else self.max_repetitions,
                                  warmup=warmup)
        options = replace(self._next_options(), adaptive=fixed is None)
        engine = self.engine()
        if self.ab is not None:
            return self._paired(self.ab, engine, workload, options)
        again = replace(self._next_options(), adaptive=options.adaptive)
        result = self._again_if_busy(
            lambda o: run_workload(engine, workload, self._with_pids(o, True), self.progress),
            options, again)
        return self._judge_and_record(result)

    def _again_if_busy(self, measure: Callable[[MeasureOptions], BenchResult],
                       options: MeasureOptions, again: MeasureOptions) -> BenchResult:
        """``measure(options)``; read busy (stopped early, or at its end): once more with
        ``again`` after a quiet window (``busy_wait_s``), the busy try stored as ``busy``.
        No quiet window in time: the busy try stands (stopped: its ``MeasuredBusy``)."""
        try:
            first: BenchResult | MeasuredBusy = self._measure(lambda: measure(options))
        except MeasuredBusy as stopped:  # its partial is stored as busy
            first = stopped
        quiet = isinstance(first, BenchResult) and not (first.load and first.load.loaded)
        if quiet or self.judge_busy or not self.busy_wait_s > 0:
            return _stands(first)
        if self.progress is not None:
            self.progress(f"measured busy: waiting up to {self.busy_wait_s:g} s for a quiet "
                          "window to measure again")
        waited = (self.wait_quiet or wait_for_quiet)(self.busy_wait_s, self._pids())
        if waited is None:
            return _stands(first if isinstance(first, MeasuredBusy) else replace(first, notes=(
                *first.notes, (f"no quiet window within {self.busy_wait_s:g} s to measure "
                               f"again ({self.busy_wait_option})"))))
        if isinstance(first, BenchResult):
            ceiling = self.ceiling_for(first) if self.ceiling_for is not None else None
            self.record(replace(first, notes=(*first.notes, "measured again after a quiet "
                                              "window: this busy try is kept, not judged")),
                        ceiling, "busy")
        second = self._measure(lambda: measure(again))  # stopped busy again: raised
        return replace(second, notes=(*second.notes, (
            f"the second try, after {waited:.0f} s of waiting for a quiet window: the first "
            "was measured busy and is stored beside it as busy")))

    def _paired(self, plan: ABPlan, engine: Engine, workload: Workload,
                options: MeasureOptions) -> TokBenchResult:
        """The call as a same-run A/B: the candidate's result is judged (floor included)
        and recorded as the test's; the control's is recorded beside it, unchecked."""
        __tracebackhide__ = True
        from pytest_tokperf.bench.ab import ABResult, run_paired_ab

        control = plan.control()
        options = self._with_pids(options)
        try:
            ab = self._measure(lambda: run_paired_ab(
                control, engine, workload, options, min_effect=plan.min_effect,
                progress=self.progress, control_model_given=plan.control_model_given,
                changed=plan.changed(), starts=plan.starts, restart=plan.restart()))
        except MeasurementError as exc:
            if isinstance(exc.partial, ABResult):
                self.record(exc.partial.control, None, "error")
                self.record(exc.partial.candidate, None, "error")
                plan.on_result(exc.partial)
            raise
        plan.on_result(ab)
        self.record(ab.control, None, "unchecked")
        outcome = replace(self._judge_and_record(ab.candidate, assert_floor=False), ab=ab)
        if self.min_efficiency is not None:
            outcome.assert_efficiency(self.min_efficiency)
        return outcome

    def speculative(
        self,
        draft: str | None = None,
        prompt_tokens: int | None = None,
        generate_tokens: int | None = None,
        *,
        depth_tokens: int | None = None,
        repetitions: int | None = None,
        warmup: int | None = None,
    ) -> SpeculativeOutcome:
        """Speculative decoding A/B on the same prompts: base engine, then drafting engine.

        ``draft``: a GGUF path sharing the model's vocabulary, ``"self"`` or ``"small"``
        (default: ``--tokperf-draft-model``), refused before anything starts when
        llama-server could not pair it. Both sides are recorded; only the base is judged
        against the ceiling, the accelerated side is ``unchecked``.
        """
        __tracebackhide__ = True
        fixed = repetitions if repetitions is not None else self.repetitions
        workload = self._workload(prompt_tokens=prompt_tokens, generate_tokens=generate_tokens,
                                  depth_tokens=depth_tokens,
                                  repetitions=fixed if fixed is not None else FIXED_REPETITIONS,
                                  warmup=warmup)
        if self.speculative_engine is None:
            raise ConfigError("this tok_bench has no way to start a drafting engine")
        options = self._next_options()
        base = self.engine()
        accelerated = self.speculative_engine(draft)
        options = self._with_pids(options, True)  # the drafting server's too, once started
        ab = self._measure(
            lambda: run_speculative_ab(base, accelerated, workload, options, self.progress))
        base_outcome = self._judge_and_record(ab.base, assert_floor=False)
        revise_accelerated = self.record(ab.accelerated, None, "unchecked")
        if self.min_efficiency is not None:  # after both sides are recorded
            base_outcome.assert_efficiency(self.min_efficiency)
        return SpeculativeOutcome(ab=ab, base=base_outcome,
                                  accelerated=TokBenchResult(result=ab.accelerated,
                                                             revise=revise_accelerated,
                                                             judge_busy=self.judge_busy))

    def _measure(self, run: Callable[[], T]) -> T:
        """Probe, then ``run``; a failed measurement's partial result is recorded first."""
        if self.before_measure is not None:
            self.before_measure()
        try:
            return run()
        except (MeasurementError, MeasuredBusy) as exc:
            if isinstance(exc.partial, BenchResult):
                self.record(exc.partial, None,
                            "busy" if isinstance(exc, MeasuredBusy) else "error")
            raise

    def _pids(self) -> tuple[int, ...]:
        return self.engine_pids() if self.engine_pids is not None else ()

    def _with_pids(self, options: MeasureOptions, watch: bool = False) -> MeasureOptions:
        """With the PIDs; ``watch``: a ``BusyWatch`` from now (none when busy is judged)."""
        pids = self._pids()
        return replace(options, engine_pids=pids,
                       watch=BusyWatch(pids) if watch and not self.judge_busy else None)

    def _workload(self, *, repetitions: int, warmup: int | None,
                  **given: int | bool | None) -> Workload:
        marked = dict(self.workload_defaults)
        chosen: dict[str, Any] = {
            name: given[name] if given.get(name) is not None else marked.get(name, default)
            for name, default in WORKLOAD_DEFAULTS.items()}
        workload = Workload(**chosen, repetitions=repetitions,
                            warmup=self.warmup if warmup is None else warmup)
        validate_workload(workload)
        return workload

    def _next_options(self) -> MeasureOptions:
        """This call's options: its own salts, so no call reuses another's prompts."""
        options = replace(self.options, salt_base=self.options.salt_base + 1000 * self.calls)
        self.calls += 1
        return options

    def _judge_and_record(self, result: BenchResult, assert_floor: bool = True) -> TokBenchResult:
        __tracebackhide__ = True
        ceiling = self.ceiling_for(result) if self.ceiling_for is not None else None
        outcome = TokBenchResult(result=result, ceiling=ceiling, judge_busy=self.judge_busy)
        check = None
        floor = self.min_efficiency if ceiling is not None else None
        if floor is not None and outcome.decode_tokens_per_s is not None:
            check = outcome.check_efficiency(floor)
        # No decode to check is a fail (busy: neither), stored before it is raised
        verdict: Verdict = (check.status if check else
                            "fail" if floor is not None else "unchecked")
        if verdict in ("pass", "fail") and not self.judge_busy and outcome._busy():
            verdict = "busy"  # neither: the neighbours had the machine (assert_efficiency)
        busy = (assert_floor and self.min_efficiency is None and not self.judge_busy
                and bool(result.load and result.load.loaded))
        if verdict in ("pass", "unchecked") and is_unstable(result, self.options.max_cv):
            verdict = "unstable"  # too wide a spread to stand as a pass (see its note)
        outcome = replace(outcome, revise=self.record(result, ceiling, "busy" if busy else verdict))
        if busy:  # no floor to refuse: the call itself is neither a pass nor a fail
            outcome._refuse_busy("its figures are stored as busy")
        if self.min_efficiency is not None and assert_floor:
            outcome.assert_efficiency(self.min_efficiency)
        return outcome


@dataclass(frozen=True, slots=True)
class SpeculativeOutcome:
    """``tok_bench.speculative()``'s answer: both sides and the A/B figures."""

    ab: SpeculativeResult
    base: TokBenchResult
    accelerated: TokBenchResult

    @property
    def multiplier(self) -> float | None:
        return self.ab.multiplier

    @property
    def acceptance_rate(self) -> float | None:
        return self.ab.acceptance_rate


def _stands(result: BenchResult | MeasuredBusy) -> BenchResult:
    """``result``; a measurement stopped busy: its ``MeasuredBusy``, raised."""
    if isinstance(result, MeasuredBusy):
        raise result
    return result
