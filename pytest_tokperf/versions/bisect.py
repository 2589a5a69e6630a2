"""Binary search for the first release where a test got slower, judged by ``stats``.

The endpoints are measured first, interleaved; the *target* is the test and metric with
the largest regression the judge calls (none: nothing to bisect). Each midpoint is judged
by its session medians against the releases known good and bad so far; one that stays
inconclusive goes on in *rounds* (nearest good, midpoint, nearest bad, back to back) and,
from three rounds, is judged by its per-round ratios (``stats.paired``), up to
``max_sessions``. Still undecided, the search stops and names the releases that remain:
it never guesses. Every measurement is in the DB and journal, so the same command resumes.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.specs import Build
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.results import Progress
from pytest_tokperf.stats.comparing import compare, compare_many
from pytest_tokperf.stats.metric import Metric
from pytest_tokperf.stats.paired import Pairs, judge_pairs
from pytest_tokperf.stats.verdict import Comparison
from pytest_tokperf.versions.sessions import (
    BuildRunner,
    Groups,
    Target,
    metric_for,
    pooled,
    session_medians,
)

Outcome = Literal["good", "bad", "undecided"]


class Lab(Protocol):
    """Where samples come from: a release's first ``sessions`` sessions, measured (and
    built) as needed; per target, one sample list per session."""

    def groups(self, number: int, sessions: int) -> Groups: ...


@dataclass(slots=True)
class RunnerLab:
    """A ``Lab`` on real builds: ``provide(number)`` builds (or finds) the release."""

    runner: BuildRunner
    provide: Callable[[int], Build]
    builds: dict[int, Build] = field(default_factory=dict)

    def groups(self, number: int, sessions: int) -> Groups:
        if number not in self.builds:
            self.builds[number] = self.provide(number)
        build = self.builds[number]
        return self.runner.groups(self.runner.ensure(build, sessions)[:sessions])


@dataclass(frozen=True, slots=True)
class Step:
    """One midpoint's judgement on the target."""

    number: int
    sessions: int
    vs_good: Comparison
    vs_bad: Comparison
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class Figure:
    """A measured release's target figure: mean, spread, samples and sessions."""

    number: int
    mean: float
    stdev: float
    samples: int
    sessions: int


@dataclass(frozen=True, slots=True)
class BisectResult:
    status: Literal["found", "no-regression", "inconclusive", "undecided"]
    good: int
    bad: int
    target: Target | None
    endpoints: dict[Target, Comparison]
    """Bad judged against good, per target."""
    steps: tuple[Step, ...]
    figures: tuple[Figure, ...]
    """The target's figure on every measured release, in release order."""
    last_good: int | None
    first_bad: int | None
    remaining: tuple[int, ...]
    """Releases still in play: the undecided span (or the found pair)."""

    @property
    def midpoints(self) -> int:
        """Releases measured besides the two endpoints (the bisect's own builds)."""
        return len(self.steps_measured)

    @property
    def steps_measured(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s.number for s in self.steps))

    @property
    def upstream_builds(self) -> tuple[int, int] | None:
        """llama.cpp builds to look at: after the last good release up to the first bad
        (the registry skips the upstream tags in between)."""
        if self.last_good is None or self.first_bad is None:
            return None
        return self.last_good + 1, self.first_bad


def _figure(number: int, groups: Sequence[Sequence[float]]) -> Figure:
    values = pooled(groups)
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return Figure(number, statistics.fmean(values), spread, len(values), len(groups))


def bisect_releases(
    releases: Sequence[int], good: int, bad: int, lab: Lab, *,
    sessions: int = 3, max_sessions: int = 8, metrics: Sequence[str] | None = None,
    min_effect: float | None = None, progress: Progress = print,
) -> BisectResult:
    """Find the first release in ``releases`` after ``good`` where the target regressed."""
    order = sorted(r for r in set(releases) if good <= r <= bad)
    if good >= bad:
        raise ConfigError(f"--good b{good} must be an older release than --bad b{bad}")
    for name, number in (("--good", good), ("--bad", bad)):
        if number not in releases:
            raise ConfigError(f"{name} b{number} is not among the releases to search")
    if not 1 <= sessions <= max_sessions:
        raise ConfigError(f"sessions {sessions!r} must lie between 1 and max sessions "
                          f"({max_sessions!r})")
    search = _Search(lab, progress, sessions, max_sessions, min_effect)
    progress(f"bisect b{good}..b{bad}: {len(order) - 2} releases between; measuring the "
             f"endpoints, {sessions} sessions each, interleaved")
    endpoints, settled = search.endpoints(good, bad, metrics)
    regressions = [t for t, c in endpoints.items() if c.verdict == "regression"]
    if not regressions:
        return BisectResult("no-regression" if settled else "inconclusive", good, bad, None,
                            endpoints, (), (), None, None, ())
    target = max(regressions, key=lambda t: (abs(endpoints[t].relative_change), t.name))
    progress(f"following {target.name}: {endpoints[target].relative_change:+.1%} from "
             f"b{good} to b{bad}")
    return search.narrow(order, target, endpoints)


@dataclass
class _Search:
    """One bisect's measurements: how many sessions each release has, the releases known
    good and bad, and the steps taken."""

    lab: Lab
    progress: Progress
    sessions: int
    max_sessions: int
    min_effect: float | None
    count: dict[int, int] = field(default_factory=dict)
    known: dict[str, list[int]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)

    def measure(self, number: int, wanted: int) -> Groups:
        self.count[number] = max(self.count.get(number, 0), wanted)
        return self.lab.groups(number, self.count[number])

    def endpoints(self, good: int, bad: int, metrics: Sequence[str] | None
                  ) -> tuple[dict[Target, Comparison], bool]:
        """The endpoints measured interleaved until a regression shows, they settle, or
        the session limit; each target's verdict and whether all settled."""
        self.known = {"good": [good], "bad": [bad]}
        n = self.sessions
        for r in range(1, n + 1):
            self.measure(good, r)
            self.measure(bad, r)
        while True:
            g, b = self.measure(good, n), self.measure(bad, n)
            common = [t for t in g if t in b and (metrics is None or t.metric in metrics)]
            if not common:
                raise ConfigError("the endpoints have no test and metric in common to follow")
            found = compare_many({t: session_medians(g[t]) for t in common},
                                 {t: session_medians(b[t]) for t in common},
                                 {t: metric_for(t.metric, self.min_effect) for t in common})
            for t, c in found.items():
                self.progress(f"  b{good} -> b{bad} {t.name}: {c.verdict}, {c.reason}")
            settled = all(_settled(c, metric_for(t.metric, self.min_effect))
                          for t, c in found.items())
            if any(c.verdict == "regression" for c in found.values()) or settled \
                    or n >= self.max_sessions:
                return found, settled
            n += 1
            self.progress(f"endpoints not settled: session {n} of each")
            self.measure(good, n)
            self.measure(bad, n)

    def narrow(self, order: list[int], target: Target,
               endpoints: dict[Target, Comparison]) -> BisectResult:
        """Halve the releases between the last good and the first bad until they meet,
        or a step stays undecided at the session limit."""
        good, bad = order[0], order[-1]
        lo, hi = 0, len(order) - 1
        meter = Meter(self.progress, "bisect:", float(_steps_left(lo, hi)), unit="steps",
                      line_every=1.0, approximate=True)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            outcome = self.step(order[lo], order[mid], order[hi], hi - lo - 1, target)
            if outcome == "undecided":
                meter.close()
                return BisectResult("undecided", good, bad, target, endpoints,
                                    tuple(self.steps), _figures(self.count, self.lab, target),
                                    order[lo], None, tuple(order[lo:hi + 1]))
            self.known[outcome].append(order[mid])
            lo, hi = (lo, mid) if outcome == "bad" else (mid, hi)
            decided = len(self.known["good"]) + len(self.known["bad"]) - 2
            meter.update(decided, total=decided + _steps_left(lo, hi))
        meter.close()
        return BisectResult("found", good, bad, target, endpoints, tuple(self.steps),
                            _figures(self.count, self.lab, target), order[lo], order[hi],
                            (order[lo], order[hi]))

    def step(self, low: int, mid: int, high: int, left: int, target: Target) -> Outcome:
        """Judge ``mid`` (one of the ``left`` releases between ``low`` and ``high``)
        against the releases known good and bad; one that stays undecided goes on in
        rounds of the three back to back, judged by the per-round ratios, up to the
        session limit."""
        metric = metric_for(target.metric, self.min_effect)
        k = self.sessions
        rounds: dict[int, list[float]] = {low: [], mid: [], high: []}
        while True:
            self.progress(f"step: b{mid} ({left} release{'s' * (left != 1)} between "
                          f"b{low} and b{high}), {k} session{'s' * (k != 1)}"
                          + (f", round {len(rounds[mid])} with both neighbours"
                             if rounds[mid] else ""))
            if not rounds[mid]:
                current = self.medians(mid, k, target)
                vs_good = compare(session_medians(self.reference("good", target)), current,
                                  metric)
                vs_bad = compare(session_medians(self.reference("bad", target)), current,
                                 metric)
            else:  # each round is its own server starts: the rounds are the unit
                each = list(range(len(rounds[mid])))
                vs_good = judge_pairs(Pairs.of(metric, rounds[low], rounds[mid], each))
                vs_bad = judge_pairs(Pairs.of(metric, rounds[high], rounds[mid], each))
            outcome = _outcome(vs_good, vs_bad)
            self.steps.append(Step(mid, k, vs_good, vs_bad, outcome))
            self.progress(f"  b{mid}: {outcome} (vs good: {vs_good.verdict} "
                          f"{vs_good.relative_change:+.1%}; vs bad: {vs_bad.verdict} "
                          f"{vs_bad.relative_change:+.1%})")
            if outcome != "undecided" or k >= self.max_sessions:
                return outcome
            k += 1
            # a round: the three back to back, so that one phase of the machine is in all
            line = (low, mid, high)
            for number in line if len(rounds[mid]) % 2 == 0 else reversed(line):
                rounds[number].append(
                    self.medians(number, self.count.get(number, 0) + 1, target)[-1])

    def reference(self, side: str, target: Target) -> list[list[float]]:
        return [g for n in self.known[side]
                for g in _target_groups(self.measure(n, self.count[n]), target, n)]

    def medians(self, number: int, sessions: int, target: Target) -> list[float]:
        """The target's median in each of ``number``'s first ``sessions`` sessions."""
        return session_medians(_target_groups(self.measure(number, sessions), target, number))


def _steps_left(lo: int, hi: int) -> int:
    """Midpoints a binary search still needs between positions ``lo`` and ``hi``."""
    return math.ceil(math.log2(hi - lo)) if hi - lo > 1 else 0


def _outcome(vs_good: Comparison, vs_bad: Comparison) -> Outcome:
    """Bad: worse than good, not better than bad and not worse than it either; good the
    mirror. A midpoint outside both levels is no level of a one-step history (most often
    a phase of the machine over its sessions): undecided, so it goes on in rounds."""
    worse = vs_good.verdict == "regression"
    better = vs_bad.verdict == "improvement"
    if worse and not better and vs_bad.verdict != "regression":
        return "bad"
    if better and not worse and vs_good.verdict != "improvement":
        return "good"
    return "undecided"


def _settled(c: Comparison, metric: Metric) -> bool:
    """A verdict more sessions would not change: a change, or no change shown to be
    smaller than the minimum effect (the judge also calls a non-significant result
    whose interval reaches past it "unchanged"; that one gets more sessions)."""
    m = metric.min_effect
    return c.verdict in ("regression", "improvement") or (
        c.verdict == "unchanged" and -m < c.ci_low and c.ci_high < m)


def _target_groups(groups: Groups, target: Target, number: int) -> list[list[float]]:
    if target not in groups:
        raise ConfigError(f"b{number} has no results for {target.name}: did the test fail "
                          f"before measuring? (see the session log)")
    return groups[target]


def _figures(count: dict[int, int], lab: Lab, target: Target) -> tuple[Figure, ...]:
    return tuple(_figure(n, _target_groups(lab.groups(n, k), target, n))
                 for n, k in sorted(count.items()))
