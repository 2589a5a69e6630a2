"""Same-run paired A/B: control and candidate engines up at once, measured in ABBA pairs.

Each pair runs both engines back to back on the same salted prompts, so the per-pair
log-ratio cancels the machine's phase (``stats.paired`` judges it). Blocks of two pairs,
AB BA or BA AB, are drawn from the run's salt (``ABResult.orders``). The candidate's
``BenchResult`` is the test's. A side that fails raises ``MeasurementError`` naming the
side, with the pairs measured so far as its ``partial``.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pytest_tokperf.bench.measure import (
    MeasureOptions,
    run_workload,
    summarize,
    tagged_progress,
    validate_workload,
)
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.engines.base import Engine
from pytest_tokperf.errors import ConfigError, MeasurementError, TokperfError
from pytest_tokperf.results import BenchResult, EngineInfo, Progress, Sample, Workload
from pytest_tokperf.stats.metric import (
    DECODE,
    DEFAULT_ALPHA,
    PREFILL,
    TTFT,
    Metric,
    pct,
)
from pytest_tokperf.stats.paired import (
    PAIRED_MIN_EFFECT,
    Pairs,
    judge_ab,
    judge_pairs,
    sequential_interval,
)
from pytest_tokperf.stats.verdict import Comparison

Side = Literal["control", "candidate"]
MIN_PAIRS = 4
"""Adaptive A/Bs measure at least two ABBA blocks."""
MIN_START_S = 2.5
"""The least share of the budget a server start gets: a 10 s budget is 4 starts at most."""

LIKE_FOR_LIKE = ("threads", "ctx_size", "parallel", "server_args", "total_slots", "draft_model")
"""Settings both sides must share (as configured: a build's changed default is the change)."""


@dataclass(frozen=True, slots=True)
class ABResult:
    """Both sides of one A/B, the verdict per metric and what differed between them."""

    control: BenchResult
    candidate: BenchResult
    verdicts: tuple[Comparison, ...]
    pairs: int
    stopped: str = ""
    """Why the pairs stopped (interval reached, the most pairs, a side failed)."""
    models_differ: str = ""
    """Non-empty when the two sides serve different models on purpose (--tokperf-ab-model)."""
    changed: str = ""
    """What changed between the two builds (release, binary, build flags)."""
    wall_s: float = 0.0
    rounds: tuple[tuple[tuple[float | None, ...], tuple[float | None, ...]], ...] = ()
    """Per pair, (control, candidate) figures in ``PAIR_METRICS`` order: decode tok/s,
    prefill tok/s, TTFT s (None where a side lacks one), as judged (see ``clock``)."""
    clock: str = ""
    """"" for wall time; else which metrics are net of the engines' wait for a CPU."""
    orders: tuple[str, ...] = ()
    """Per pair, which side ran first: "AB" (control first) or "BA"."""
    sequential: int = 0
    """The planned pair count of an adaptive A/B (anytime-valid verdicts); 0: a fixed count."""
    starts: tuple[int, ...] = ()
    """Per pair, the server start (both servers started anew) it was measured in."""

    def verdict(self, metric: str) -> Comparison | None:
        return next((v for v in self.verdicts if v.metric == metric), None)

    @property
    def decode_ratio(self) -> float | None:
        """Candidate / control decode (geometric mean of the pairs; 0.95 = 5% slower)."""
        v = self.verdict("decode")
        return None if v is None or math.isnan(v.relative_change) else 1 + v.relative_change

    @property
    def regressed(self) -> bool:
        """A regression among the verdicts, busy or not (``decides`` says whether it counts)."""
        return any(v.regressed for v in self.verdicts)

    @property
    def busy(self) -> bool:
        """Either side measured while the neighbours took a notable share of the machine."""
        return any(r.load is not None and r.load.loaded for r in (self.control, self.candidate))

    def decides(self, busy: BusyPolicy = BusyPolicy()) -> bool:
        """Whether this A/B fails a gate: a regression measured quiet; measured busy as
        the ``busy`` policy says ('judge': its figures decide; 'fail': it fails)."""
        return busy.fails(self.busy, self.regressed)

    def load_text(self) -> str:
        ctrl, cand = (r.load.brief() if r.load is not None else "unknown"
                      for r in (self.control, self.candidate))
        return f"machine: control {ctrl}; candidate {cand}"

    def describe(self) -> str:
        """One line: the verdict per metric with its interval, the pairs, what differs."""
        busy = " (measured busy)" if self.busy else ""
        parts = [f"{v.metric} {v.verdict}{busy if v.flagged else ''} {pct(v.relative_change)} "
                 f"{_interval(v)}" for v in self.verdicts]
        ctrl = self.control.engine
        against = ctrl.build or ctrl.version or ctrl.base_url
        level = f", {self.verdicts[0].confidence:.1%} intervals" if self.verdicts else ""
        flagged_busy = self.busy and any(v.flagged for v in self.verdicts)
        then = (f"changed: {self.changed}" if self.changed else "", self.models_differ,
                self.load_text(),
                "measured busy: a reading, not a gate's verdict (--tokperf-busy judge lets it "
                "decide); rerun on a quiet machine" if flagged_busy else "",
                self.clock, self.stopped)
        starts = len(set(self.starts))
        over = f" over {starts} server starts a side" if starts > 1 else ""
        return "; ".join((f"same-run A/B against control {against}: {'; '.join(parts)} "
                          f"({self.pairs} ABBA pairs{over}{level})", *(t for t in then if t)))


def _clock_text(nets: Mapping[str, bool], shares: tuple[float, float] | None) -> str:
    judged = [m for m in PAIR_METRICS if nets.get(m)]
    if not judged:
        return ""
    text = (f"{', '.join(judged)} judged net of the engines' wait for a CPU "
            "(hardware.process_clock)")
    if shares is not None:
        text += (f": other processes held the CPU for {shares[0]:.0%} of the control's and "
                 f"{shares[1]:.0%} of the candidate's decode time")
    return text


def _interval(v: Comparison) -> str:
    """The interval as text; "(interval not resolved)" beyond halving or doubling."""
    if not (v.ci_low > -0.5 and v.ci_high < 1.0):
        return "(interval not resolved)"
    return f"[{pct(v.ci_low)}, {pct(v.ci_high)}]"


PAIR_METRICS = ("decode", "prefill", "ttft")


def pair_metrics(min_effect: float = PAIRED_MIN_EFFECT) -> tuple[Metric, ...]:
    """decode, prefill and TTFT with the A/B's minimum effect."""
    return tuple(Metric(m.name, m.higher_is_better, min_effect) for m in (DECODE, PREFILL, TTFT))


def _figure(samples: tuple[Sample, ...] | list[Sample], metric: str, net: bool = False
            ) -> float | None:
    """One pair side's figure, the mean over the round's streams (``net``: net of the wait)."""
    if net:
        values: list[float | None] = [
            s.net_decode_tokens_per_s if metric == "decode" else
            s.net_prefill_tokens_per_s if metric == "prefill" else s.net_ttft_s
            for s in samples]
    elif metric == "decode":
        engine = [s.engine_decode_tokens_per_s for s in samples]
        values = list(engine) if all(engine) else [s.decode_tokens_per_s for s in samples]
    elif metric == "prefill":
        engine = [s.engine_prefill_tokens_per_s for s in samples]
        values = list(engine) if all(engine) else [s.prefill_tokens_per_s for s in samples]
    else:
        values = [s.ttft_s for s in samples]
    got = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return statistics.fmean(got) if got and len(got) == len(values) else None


Rounds = list[tuple[list[Sample], list[Sample]]]
Restart = Callable[[bool], tuple[Engine, Engine, tuple[int, ...]]]


def net_clock(rounds: Rounds, metric: str = "decode") -> bool:
    """Whether every side of every round has ``metric`` net of the engine's wait for a CPU."""
    return bool(rounds) and all(
        _figure(side, metric, net=True) is not None for pair in rounds for side in pair)


def wait_shares(rounds: Rounds) -> tuple[float, float] | None:
    """Mean share of the decode windows each side's engine waited for a CPU."""
    shares = [[s.decode_wait_share for side in sides for s in side
               if s.decode_wait_share is not None] for sides in zip(*rounds, strict=True)]
    if len(shares) < 2 or not shares[0] or not shares[1]:
        return None
    return statistics.fmean(shares[0]), statistics.fmean(shares[1])


def pairs_of(rounds: Rounds, metric: Metric, net: bool | None = None,
             blocks: list[int] | None = None) -> Pairs:
    """The pairs of ``metric`` where both sides of a round have the figure, each in its
    server start (``blocks``); net of the engines' wait for a CPU when ``net`` (None:
    whenever ``net_clock`` says it can be)."""
    if net is None:
        net = net_clock(rounds, metric.name)
    starts = blocks if blocks is not None else [0] * len(rounds)
    sides = [(_figure(ctrl, metric.name, net), _figure(cand, metric.name, net), b)
             for (ctrl, cand), b in zip(rounds, starts, strict=True)]
    kept = [(x, y, b) for x, y, b in sides if x is not None and y is not None]
    return Pairs.of(metric, [x for x, _, _ in kept], [y for _, y, _ in kept],
                    [b for _, _, b in kept])


def like_for_like(control: EngineInfo, candidate: EngineInfo, *,
                  control_model_given: bool) -> str:
    """"" when the two sides may be compared, else ``ConfigError`` saying what differs; a
    model named on purpose for the control may differ, and the text returned says so."""
    differ = []
    model_b, model_c = model_name(control), model_name(candidate)
    models = ""
    if model_b and model_c and model_b != model_c:
        models = (f"the models differ: control {model_b!r}, candidate {model_c!r} (each side "
                  f"reads its own weights, so one server start can carry a level of its own: "
                  f"repeat over starts before trusting a few percent, docs/ci-and-builds.md)")
        if not control_model_given:
            differ.append(f"model: control {model_b!r}, candidate {model_c!r}")
    sb, sc = dict(control.settings), dict(candidate.settings)
    for key in LIKE_FOR_LIKE:
        if key in sb and key in sc and sb[key] != sc[key]:
            differ.append(f"{key}: control {sb[key]!r}, candidate {sc[key]!r}")
    if "ctx_size" not in sb or "ctx_size" not in sc:  # attached: what the engines report
        x, y = control.context_size, candidate.context_size
        if x is not None and y is not None and x != y:
            differ.append(f"context_size: control {x!r}, candidate {y!r}")
    if differ:
        raise ConfigError(
            "same-run A/B refused before measuring: control "
            f"({control.base_url}) and candidate ({candidate.base_url}) are not a like-for-like "
            f"pair: {'; '.join(differ)}. Serve the same model with the same settings on both, "
            "or name the control's model with --tokperf-ab-model PATH to compare "
            "two models on purpose")
    return models


def _seconds(value: float) -> str:
    """Whole seconds from 10 s, two figures below (a budget of 0.5 s is not "0 s")."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def model_name(info: EngineInfo) -> str:
    name = info.model_path or info.model_name or ""
    return Path(name).name if name else ""


@dataclass
class PairedAB:
    control: Engine
    candidate: Engine
    options: MeasureOptions = MeasureOptions()
    min_effect: float = PAIRED_MIN_EFFECT
    alpha: float = DEFAULT_ALPHA
    progress: Progress | None = None
    models_differ: str = ""
    changed: str = ""
    infos: Mapping[Side, EngineInfo] = field(default_factory=dict)
    starts: int = 1
    """Server starts a side the budget is split over (1: one start, pairs as before)."""
    restart: Restart | None = None
    """Restarts both servers (candidate first when given True): the new control and
    candidate engines and their processes. None: they cannot be restarted (attached)."""
    _rounds: list[tuple[list[Sample], list[Sample]]] = field(default_factory=list, init=False)
    _orders: list[str] = field(default_factory=list, init=False)
    _blocks: list[int] = field(default_factory=list, init=False)
    _sequential: int = field(default=0, init=False)

    def run(self, workload: Workload) -> ABResult:
        """Warm both up, then measure pairs until the budget (``options.budget_s``) is spent,
        split evenly over ``starts`` starts of both servers where they can be restarted
        (``restart``, in a random order; each start warmed up anew); without a budget,
        ``workload.repetitions`` pairs from one start (fewer where adaptive, ``_settled``)."""
        validate_workload(workload)
        budget = self.options.budget_s
        if budget is not None and not (math.isfinite(budget) and budget > 0):
            raise ConfigError(f"an A/B's time budget must be a positive number of seconds, "
                              f"not {budget!r}; leave it unset for a fixed number of pairs")
        if self.starts < 1:
            raise ConfigError(f"tokperf_ab_starts {self.starts!r}: give 1 or more server starts")
        started = time.monotonic()
        self._rounds, self._orders, self._blocks = [], [], []
        draw = random.Random(f"tokperf-ab-order-{self.options.salt_base}")
        starts = (min(self.starts, max(1, int(budget // MIN_START_S)))
                  if self.restart is not None and budget is not None else 1)
        self._sequential = (workload.repetitions if self.options.adaptive and budget is None
                            else 0)
        stopped, start = "", 0
        while start < starts:
            if start:
                self._restart(draw, start, started, workload)
            share = None if budget is None else budget * (start + 1) / starts
            stopped = self._start(workload, start, share, started, draw)
            start += 1
            spent = time.monotonic() - started
            if budget is not None and start < starts and spent > 1.25 * budget * start / starts:
                # starts dearer than their share (a big model's load): fewer of them
                starts = max(start, min(starts, start + int((budget - spent) * start / spent)))
        if starts > 1:
            stopped = f"{starts} server starts a side; {stopped}"
        return self._result(workload, stopped, started)

    def _restart(self, draw: random.Random, start: int, started: float,
                 workload: Workload) -> None:
        assert self.restart is not None
        try:
            self.control, self.candidate, pids = self.restart(draw.random() < 0.5)
        except TokperfError as exc:
            partial = self._partial(workload, "stopped: a restart failed", started)
            raise MeasurementError(f"same-run A/B: restarting the servers for start "
                                   f"{start + 1} of {self.starts} failed: {exc}",
                                   partial=partial) from exc
        if pids:
            self.options = replace(self.options, engine_pids=pids)

    def _start(self, workload: Workload, start: int, until: float | None, started: float,
               draw: random.Random) -> str:
        """One server start: warm-up, then ABBA pairs until ``until`` s since ``started``
        (None: the workload's repetitions, or fewer where adaptive); why it stopped."""
        sides: tuple[tuple[Side, Engine], ...] = (("control", self.control),
                                                  ("candidate", self.candidate))
        if workload.warmup:
            warm = replace(workload, repetitions=workload.warmup, warmup=0)
            warm_options = replace(self.options,
                                   salt_base=self.options.salt_base + 10**6 * (start + 1))
            for name, engine in sides:
                self._one(name, engine, warm, warm_options, started, workload)
        one = replace(workload, repetitions=1, warmup=0)
        least = (2 if start or self.restart is not None and self.starts > 1  # an ABBA block
                 else min(max(MIN_PAIRS, self.options.min_repetitions), workload.repetitions))
        order, first = "", len(self._rounds)
        for index in range(workload.repetitions if until is None else 10**6):
            k = len(self._rounds)
            salted = replace(self.options,
                             salt_base=self.options.salt_base + k * workload.concurrency)
            order = draw.choice(("AB", "BA")) if index % 2 == 0 else order[::-1]  # ABBA blocks
            got: dict[Side, list[Sample]] = {}
            for name, engine in (sides if order == "AB" else sides[::-1]):
                got[name] = self._one(name, engine, one, salted, started, workload,
                                      tag=f"pair {k + 1}")
            self._rounds.append((got["control"], got["candidate"]))
            self._orders.append(order)
            self._blocks.append(start)
            spent, k = time.monotonic() - started, len(self._rounds)
            if (index + 1) % 2:
                continue
            if until is not None:
                if spent >= until and k - first >= least:
                    return f"the time budget of {_seconds(until)} s was spent ({_seconds(spent)} s)"
            elif k >= least and self.options.adaptive and (
                    why := self._settled(workload.repetitions)):
                return why
        return ""

    def _settled(self, planned: int) -> str:
        """Why an adaptive A/B may stop now ("" to go on): the decode flagged, or its
        interval within the target, both anytime-valid (stopping keeps the error rate)."""
        pairs = pairs_of(self._rounds, DECODE)  # net where it can be
        k = len(self._rounds)
        verdict = judge_pairs(pairs, alpha=self.alpha / len(PAIR_METRICS), sequential=planned)
        if verdict.flagged:
            return f"stopped at {k} pairs: decode {verdict.verdict} settled (anytime-valid)"
        width = sequential_interval(pairs, planned)
        if width is not None and width <= self.options.target_interval:
            return f"stopped at {k} pairs: decode ratio known to ±{width:.1%} (anytime-valid, 95%)"
        return ""

    def _one(self, name: Side, engine: Engine, workload: Workload, options: MeasureOptions,
             started: float, full: Workload, tag: str = "warm-up") -> list[Sample]:
        tagged = tagged_progress(self.progress, f"A/B {tag} {name}")
        try:
            return list(run_workload(engine, workload, options, tagged).samples)
        except TokperfError as exc:
            partial = self._partial(full, f"stopped: the {name} side failed", started)
            kept = f"; {len(self._rounds)} pair(s) measured before are kept" if self._rounds else ""
            raise MeasurementError(
                f"same-run A/B, {name} side ({engine.base_url}) failed at {tag}: {exc}{kept}",
                partial=partial) from exc

    def _partial(self, workload: Workload, stopped: str, started: float) -> ABResult | None:
        """What a failed A/B measured before it stopped (None: no pair yet)."""
        return self._result(workload, stopped, started) if self._rounds else None

    def _result(self, workload: Workload, stopped: str, started: float) -> ABResult:
        done, infos = replace(workload, repetitions=len(self._rounds)), self.infos
        tol = self.options.agreement_tolerance
        ctrl = summarize(done, infos["control"], [s for b, _ in self._rounds for s in b], tol)
        cand = summarize(done, infos["candidate"], [s for _, c in self._rounds for s in c], tol)
        nets = {m: net_clock(self._rounds, m) for m in PAIR_METRICS}
        pairs = {m.name: pairs_of(self._rounds, m, nets[m.name], self._blocks)
                 for m in pair_metrics(self.min_effect)}
        verdicts = judge_ab({k: p for k, p in pairs.items() if p.n}, alpha=self.alpha,
                            sequential=self._sequential)
        figures = tuple((tuple(_figure(b, m, nets[m]) for m in PAIR_METRICS),
                         tuple(_figure(c, m, nets[m]) for m in PAIR_METRICS))
                        for b, c in self._rounds)
        outcome = ABResult(control=ctrl, candidate=cand, verdicts=tuple(verdicts.values()),
                           pairs=len(self._rounds), stopped=stopped,
                           models_differ=self.models_differ, changed=self.changed,
                           wall_s=time.monotonic() - started, rounds=figures,
                           clock=_clock_text(nets, wait_shares(self._rounds)),
                           orders=tuple(self._orders[:len(self._rounds)]),
                           sequential=self._sequential,
                           starts=tuple(self._blocks[:len(self._rounds)]))
        return replace(outcome, candidate=replace(cand, notes=(*cand.notes, outcome.describe())))


def run_paired_ab(
    control: Engine,
    candidate: Engine,
    workload: Workload,
    options: MeasureOptions = MeasureOptions(),
    *,
    min_effect: float = PAIRED_MIN_EFFECT,
    progress: Progress | None = None,
    control_model_given: bool = False,
    changed: str = "",
    starts: int = 1,
    restart: Restart | None = None,
) -> ABResult:
    """Refuse a pair that is not like-for-like (``like_for_like``), then measure it over
    ``starts`` server starts a side (``restart`` starts both anew; None: one start)."""
    if control is candidate:
        raise ConfigError("the control and the candidate are the same engine object; start "
                          "(or attach) two servers, one per side")
    infos = []
    for name, engine in (("control", control), ("candidate", candidate)):
        try:
            infos.append(engine.info())
        except TokperfError as exc:
            raise MeasurementError(f"same-run A/B, {name} side ({engine.base_url}) did not "
                                   f"answer: {exc}") from exc
    b, c = infos
    models = like_for_like(b, c, control_model_given=control_model_given)
    return PairedAB(control, candidate, options, min_effect, progress=progress,
                    models_differ=models, changed=changed,
                    infos={"control": b, "candidate": c}, starts=starts,
                    restart=restart).run(workload)
