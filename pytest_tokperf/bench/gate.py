"""The regression gate: a new result against the stored history of its series.

The baseline (``--tokperf-baseline``) is this DB's earlier runs of the series (``history``,
at most 20 since its accepted level and latest step), those of one engine version, another
DB's, or ``off``. Decode and TTFT are judged per result as it is recorded, then every test
x metric together (Holm, ``stats.judge_family``). A series too noisy or too short to judge,
a flag measured busy (``busy_verdict``) or one the machine's memory moved with
(``stats.moved``) is "inconclusive": reported, never failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_tokperf.jsontext import finite
from pytest_tokperf.results import BUSY_NOTE, MachineLoad, Sample
from pytest_tokperf.settings import Baseline
from pytest_tokperf.stats import DECODE, TTFT, Comparison, Metric, judge_family, judge_history
from pytest_tokperf.stats.moved import BANDWIDTH_EXPONENT, HostExponents, moved_verdict
from pytest_tokperf.stats.metric import AGGREGATE, DEFAULT_ALPHA
from pytest_tokperf.stats.changepoints import Point
from pytest_tokperf.storage.history import (
    metric_values, series_histories, session_points, session_probes,
)
from pytest_tokperf.storage.store import GateVerdict, ResultStore

HISTORY_RUNS = 20
MIN_BASELINE_RUNS = 2
"""One earlier run cannot tell an engine change from the machine's run-to-run drift."""

GATED_METRICS: tuple[Metric, ...] = (DECODE, TTFT)
"""Judged for every result; concurrent workloads add ``AGGREGATE`` (all streams' output)."""


@dataclass(frozen=True, slots=True)
class GateFinding:
    """One metric of one result judged against its baseline."""

    test_id: str
    series_key: str
    comparison: Comparison
    baseline: str
    """Which builds the baseline spans, e.g. ``b11400..b11434 (6 runs)``."""
    current: str
    """The build judged, e.g. ``b11434``."""
    result_id: int | None = None
    correction: str = "none"
    """How significance was controlled across the session's comparisons."""
    busy: str = ""
    """What the machine's memory and load say of a flag that stands (``stats.moved``,
    ``busy_verdict``)."""

    def stored(self) -> GateVerdict | None:
        """The row ``ResultStore.save_gate_verdicts`` keeps (None without a result id)."""
        if self.result_id is None:
            return None
        c = self.comparison
        return GateVerdict(
            result_id=self.result_id, metric=c.metric, verdict=c.verdict,
            relative_change=finite(c.relative_change), ci_low=finite(c.ci_low),
            ci_high=finite(c.ci_high), p_value=finite(c.p_value), n_baseline=c.n_baseline,
            n_current=c.n_current, baseline=self.baseline, correction=self.correction,
            reason=c.reason,
        )


def _span(points: Sequence[Point]) -> str:
    if not points:
        return "no earlier runs"
    first, last = points[0].version, points[-1].version
    builds = first if first == last else f"{first}..{last}"
    return f"{builds} ({len(points)} run{'s' if len(points) != 1 else ''})"


@dataclass(frozen=True, slots=True)
class Gate:
    """Judges each recorded result against its series' baseline (see the module doc)."""

    baseline: Baseline
    min_effect: float = 0.05
    alpha: float = DEFAULT_ALPHA

    def judge(
        self,
        store: ResultStore,
        *,
        test_id: str,
        series_key: str,
        samples: Sequence[Sample],
        current_build: str,
        run_id: str | None,
        result_id: int | None = None,
        concurrency: int = 1,
        load: MachineLoad | None = None,
        exponents: HostExponents | None = None,
    ) -> list[GateFinding]:
        """Decode and TTFT of ``samples`` (and with ``concurrency`` > 1 the aggregate
        output) against the baseline's runs of the series; ``load``: the machine then;
        ``exponents``: the host's (``storage.history.bandwidth_exponents``; None: the bound)."""
        if self.baseline.kind == "off":
            return []
        source = store
        if self.baseline.kind == "db":
            assert self.baseline.db is not None
            source = ResultStore.open(self.baseline.db)
        findings = []
        try:
            metrics = (*GATED_METRICS, *((AGGREGATE,) if concurrency > 1 else ()))
            histories = series_histories(  # every gated metric from one query
                source, series_key, [m.name for m in metrics],
                exclude_run_id=run_id if self.baseline.kind != "db" else None,
                engine_version=self.baseline.engine_version, limit=HISTORY_RUNS,
            )
            for metric in metrics:
                metric = replace(metric, min_effect=self.min_effect)
                points = session_points(histories[metric.name])
                current = metric_values(samples, metric.name)
                judged = judge_history(points, current, metric, window=HISTORY_RUNS,
                                       alpha=self.alpha, current_version=current_build)
                comparison = judged.comparison
                span = (f"accepted level {_span(judged.reference)}" if judged.judged == "drift"
                        else _span(points))
                if len(points) < MIN_BASELINE_RUNS and comparison.verdict != "inconclusive":
                    comparison = replace(comparison, verdict="inconclusive", shift=None, reason=(
                        f"{comparison.reason}; but {len(points)} earlier run cannot tell a "
                        f"change from run-to-run drift: need {MIN_BASELINE_RUNS} runs of this "
                        f"series"))  # no shift: the session's family correction leaves it be
                ids = [e.row.result_id for e in histories[metric.name]]
                busy = ""  # what the machine says of a flag that stands, re-said after Holm
                if comparison.flagged:  # against the probes of the runs it was judged against
                    probes, flag = session_probes(source, histories[metric.name]), comparison
                    comparison = moved_verdict(flag, list(store.probed_bandwidths(
                        [result_id] if result_id is not None else []).values()),
                        probes[:len(judged.reference)] if judged.judged == "drift"
                        else probes[len(probes) - len(judged.baseline):],
                        exponent=BANDWIDTH_EXPONENT if exponents is None else exponents.of(
                            metric.name, {e.row.host for e in histories[metric.name]}))
                    busy = comparison.reason[len(flag.reason) + 2:] * comparison.flagged
                if comparison.verdict in ("regression", "improvement") and load is not None:
                    comparison, loaded = busy_verdict(comparison, load,
                                                      list(source.machine_loads(ids).values()))
                    busy = "; ".join(n for n in (busy, loaded) if n)
                findings.append(GateFinding(test_id, series_key, comparison, span,
                                            current_build, result_id=result_id, busy=busy))
        finally:
            if source is not store:
                source.close()
        return findings

    def finish(self, findings: Sequence[GateFinding]) -> tuple[list[GateFinding], str]:
        """The session's findings as final verdicts, controlled together (Holm's step-down),
        and one summary line."""
        family = judge_family({i: f.comparison for i, f in enumerate(findings)},
                              alpha=self.alpha)
        final = [replace(f, comparison=family.comparisons[i], correction=family.comparisons[i].correction)
                 for i, f in enumerate(findings)]
        final = [replace(f, comparison=replace(f.comparison, reason=f"{f.comparison.reason}; {f.busy}"))
                 if f.busy and f.comparison.verdict in ("regression", "improvement")
                 and f.busy not in f.comparison.reason else f for f in final]
        return final, family.summary


def busy_verdict(comparison: Comparison, load: MachineLoad,
                 baseline: Sequence[MachineLoad | None]) -> tuple[Comparison, str]:
    """A flagged change the machine's load can explain, said so or withheld: a regression
    measured busy is inconclusive unless every baseline run was busy too; an improvement
    over loaded baseline runs names them (``docs/design.md``). Returns the comparison and,
    for a flag that stands, the note it carries ("" else)."""
    known = [b for b in baseline if b is not None and b.known]
    loaded = [b for b in known if b.loaded]
    if comparison.verdict == "regression" and load.loaded:
        if known and len(loaded) == len(baseline):
            note = f"the machine was busy ({load.describe()}), and in every baseline run too"
            return replace(comparison, reason=f"{comparison.reason}; {note}"), note
        quiet = ("the baseline's runs were quiet" if known and not loaded else
                 "the baseline's runs were not measured as busy")
        return replace(comparison, verdict="inconclusive", shift=None, reason=(
            f"inconclusive: {BUSY_NOTE} {load.describe()}, {quiet}: the neighbours may "
            f"have made this change ({comparison.reason}); rerun on a quiet machine, or use "
            f"the same-run A/B")), ""
    if comparison.verdict == "improvement" and loaded:
        note = (f"{len(loaded)} of {len(baseline)} baseline runs were measured on a busy "
                f"machine, which lowers the baseline")
        return replace(comparison, reason=f"{comparison.reason}; {note}"), note
    return comparison, ""


def describe(finding: GateFinding) -> str:
    """One line: verdict, metric, figures and the builds compared."""
    c = finding.comparison
    return (f"{c.verdict.upper()}: {finding.test_id}: {c.reason} "
            f"(baseline {finding.baseline}; current {finding.current})")
