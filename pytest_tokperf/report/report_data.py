"""What the reports read: results and changes as flat values in SI units.

The one place that reads a ``ResultStore`` for ``formats``, ``plots`` and ``html``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from pytest_tokperf.bench.ab import model_name  # the file's name, never its folder
from pytest_tokperf.bench.ceilings import mean_decode_depth
from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.session_rows import Row, gate_label
from pytest_tokperf.results import (
    BenchResult,
    Ceiling,
    HardwareInfo,
    MachineLoad,
    ModelInfo,
    Sample,
    Summary,
    Workload,
    judged_decode_values,
)
from pytest_tokperf.stats.changepoints import ChangePoint, Point, change_points
from pytest_tokperf.stats.comparing import (
    DECODE,
    PREFILL,
    TTFT,
    Comparison,
    Metric,
    Outcome,
)
from pytest_tokperf.stats.drift import drifts
from pytest_tokperf.stats.metric import AGGREGATE
from pytest_tokperf.stats.moved import HostExponents
from pytest_tokperf.storage.history import (
    entries_exponent,
    JudgedEfficiency,
    judged_efficiencies,
    series_history,
    series_metric,
    version_label,
)
from pytest_tokperf.storage.store import ResultStore, StoredResult

if TYPE_CHECKING:
    from pytest_tokperf.versions.compare import Compared

METRICS: dict[str, Metric] = {m.name: m for m in (DECODE, PREFILL, TTFT, AGGREGATE)}

Percentiles = tuple[float, float, float]
"""p50, p90 and p99 of one figure, in its unit."""


def percentiles(values: Sequence[float | None]) -> Percentiles | None:
    """p50/p90/p99, linear between the closest ranks (as ``numpy.percentile``); None when
    nothing was measured. Over a few repetitions p99 is close to the slowest one."""
    from pytest_tokperf.bench.measure import percentile  # the one rule, as measured

    clean = [v for v in values if v is not None]
    p50, p90, p99 = (percentile(clean, q) for q in (0.50, 0.90, 0.99))
    if p50 is None or p90 is None or p99 is None:
        return None
    return p50, p90, p99


@dataclass(frozen=True, slots=True)
class RepetitionFigures:
    """One measured repetition as the reports carry it: the raw data behind the medians."""

    ttft_s: float | None
    prefill_tokens_per_s: float | None
    engine_prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    """The client's clock."""
    engine_decode_tokens_per_s: float | None
    """The engine's own timing (None: it reports none)."""
    prompt_tokens: int
    generated_tokens: int
    inter_token: Percentiles | None
    """p50/p90/p99 of this repetition's gaps between tokens (None: none stored)."""
    round_index: int | None = None

    @classmethod
    def of(cls, sample: Sample) -> RepetitionFigures:
        return cls(
            ttft_s=sample.ttft_s, prefill_tokens_per_s=sample.prefill_tokens_per_s,
            engine_prefill_tokens_per_s=sample.engine_prefill_tokens_per_s,
            decode_tokens_per_s=sample.decode_tokens_per_s,
            engine_decode_tokens_per_s=sample.engine_decode_tokens_per_s,
            prompt_tokens=sample.prompt_tokens, generated_tokens=sample.generated_tokens,
            inter_token=percentiles(sample.inter_token_s), round_index=sample.round_index,
        )


@dataclass(frozen=True, slots=True)
class ResultFigures:
    """One measured workload as every report shows it (medians over the repetitions)."""

    test_id: str
    series_key: str | None
    engine_name: str
    engine_version: str | None
    engine_build: str | None
    hardware_name: str | None
    model_file_name: str | None
    prompt_tokens: int
    generate_tokens: int
    depth_tokens: int
    concurrency: int
    repetitions: int
    ttft_s: float | None
    """None: not measured (an imported llama-bench row)."""
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    """The judged decode: what efficiency, floors and the gate use."""
    decode_tokens_per_s_stdev: float | None
    ceiling_decode_tokens_per_s: float | None
    """None where the series is judged on another metric (``series_metric``): a prompt-only
    row is never held against the decode ceiling."""
    efficiency: float | None
    verdict: str
    run_id: str | None = None
    created_at: str | None = None
    cached_prefix_tokens: int = 0
    chat: bool = False
    draft_model: str | None = None
    """The draft's file name when the engine decoded speculatively."""
    decode_source: str = "client"
    """Whose clock ``decode_tokens_per_s`` is: ``engine`` (its own timings) or ``client``."""
    gate: str = ""
    """The regression gate's verdict (``report.table.gate_label``); empty: not judged."""
    warnings: tuple[str, ...] = ()
    """The measurement's notes and the ceiling's footprint warnings."""
    chars_per_s: float | None = None
    """Median characters per second of steady decode: the speed a reader feels."""
    aggregate_tokens_per_s: float | None = None
    """Median of all streams' output tokens per second of a round's wall time."""
    requests_per_s: float | None = None
    ttft_bound_s: float | None = None
    """The TTFT the compute bound allows, where the device's peak FLOP/s is known."""
    machine_load: MachineLoad | None = None
    """The machine over the repetitions (None: not sampled)."""
    engine_decode_tokens_per_s: float | None = None
    """Median of the engine's own decode timing (None: it reports none)."""
    decode_agreement: float | None = None
    """Median relative difference of client and engine decode (0.001 = 0.1%)."""
    ttft: Percentiles | None = None
    """p50/p90/p99 of TTFT over the repetitions (None: not measured)."""
    inter_token: Percentiles | None = None
    """p50/p90/p99 of every gap between tokens of every repetition, as stored."""
    samples: tuple[RepetitionFigures, ...] = ()
    """Each repetition, in the order measured."""

    @property
    def judged_decode_samples(self) -> list[float]:
        """Per repetition, the decode this result is judged on (``judged_decode_values``)."""
        return judged_decode_values(self.samples)

    @property
    def workload(self) -> Workload:
        return Workload(
            prompt_tokens=self.prompt_tokens, generate_tokens=self.generate_tokens,
            depth_tokens=self.depth_tokens, concurrency=self.concurrency,
            repetitions=self.repetitions, cached_prefix_tokens=self.cached_prefix_tokens,
            chat=self.chat,
        )

    @property
    def mean_decode_depth_tokens(self) -> int:
        """KV positions read per decoded token on average (what the ceiling assumed)."""
        return mean_decode_depth(self.workload)

    @property
    def build_label(self) -> str:
        return version_label(self.engine_version, self.engine_build)

    @property
    def setup_label(self) -> str:
        """Engine, build, model and hardware: what one line of a comparison plot is."""
        parts = [f"{self.engine_name} {self.build_label}", self.model_file_name,
                 self.hardware_name]
        return " · ".join(p for p in parts if p)


def workload_label(w: Workload) -> str:
    """``prompt 512, gen 128`` plus depth, warm prefix and concurrency when not default."""
    text = f"prompt {w.prompt_tokens}, gen {w.generate_tokens}"
    if w.depth_tokens:
        text += f", depth {w.depth_tokens}"
    if w.cached_prefix_tokens:
        text += f", warm {w.cached_prefix_tokens}"
    if w.chat:
        text += ", chat"
    if w.concurrency != 1:
        text += f", ×{w.concurrency}"
    return text


def figures_from_result(
    test_id: str, result: BenchResult, *, ceiling: Ceiling | None, verdict: str,
    efficiency: float | None = None, series_key: str | None = None,
    model: ModelInfo | None = None, hardware: HardwareInfo | None = None,
    run_id: str | None = None, created_at: str | None = None, gate: str = "",
) -> ResultFigures:
    """Flatten one result; ``efficiency`` defaults to ``ceiling.decode_efficiency``; a
    result judged on another metric than decode has no decode ceiling or efficiency."""
    decode = result.judged_decode_tokens_per_s
    decoded = series_metric(result, test_id).name == DECODE.name
    ceiling_tps = ceiling.decode_tokens_per_s if ceiling and decoded else None
    if efficiency is None:
        efficiency = decode_efficiency(result, ceiling)
    if not decoded:
        efficiency = None
    w = result.workload
    return ResultFigures(
        test_id=test_id, series_key=series_key, engine_name=result.engine.name,
        engine_version=result.engine.version, engine_build=result.engine.build,
        hardware_name=hardware.name if hardware else None,
        model_file_name=model.file_name if model else model_name(result.engine) or None,
        prompt_tokens=w.prompt_tokens, generate_tokens=w.generate_tokens,
        depth_tokens=w.depth_tokens, concurrency=w.concurrency,
        repetitions=len(result.samples) or w.repetitions,
        ttft_s=_median(result.ttft_s),
        prefill_tokens_per_s=_median(result.prefill_tokens_per_s),
        decode_tokens_per_s=_median(decode),
        decode_tokens_per_s_stdev=decode.stdev if decode else None,
        ceiling_decode_tokens_per_s=ceiling_tps, efficiency=efficiency, verdict=verdict,
        run_id=run_id, created_at=created_at, cached_prefix_tokens=w.cached_prefix_tokens,
        chat=w.chat,
        draft_model=(dict(result.engine.settings).get("draft_model", "?")
                     if result.engine.speculative else None),
        decode_source=("client" if decode is None or decode is result.decode_tokens_per_s
                       else "engine"),
        gate=gate,
        warnings=(*result.notes, *(ceiling.footprint.warnings if ceiling else ())),
        chars_per_s=_median(result.chars_per_s),
        aggregate_tokens_per_s=_median(result.aggregate_tokens_per_s),
        requests_per_s=_median(result.requests_per_s) if w.concurrency > 1 else None,
        ttft_bound_s=(ceiling.prefill_tokens_per_s and
                      (w.depth_tokens + w.prompt_tokens) / ceiling.prefill_tokens_per_s)
        if ceiling is not None else None,
        machine_load=result.load,
        engine_decode_tokens_per_s=_median(result.engine_decode_tokens_per_s),
        decode_agreement=result.decode_agreement,
        ttft=percentiles([s.ttft_s for s in result.samples]),
        inter_token=_stored_percentiles(result),
        samples=tuple(RepetitionFigures.of(s) for s in result.samples),
    )


def _stored_percentiles(result: BenchResult) -> Percentiles | None:
    p50, p90, p99 = result.inter_token_p50_s, result.inter_token_p90_s, result.inter_token_p99_s
    if p50 is None or p90 is None or p99 is None:
        return None
    return p50, p90, p99


def _median(summary: Summary | None) -> float | None:
    return summary.median if summary else None


def figures_from_row(row: Row, *, series_key: str | None = None) -> ResultFigures:
    """A terminal-summary ``report.Row`` (what the plugin holds at session end)."""
    return figures_from_result(row.test_id, row.result, ceiling=row.ceiling,
                               verdict=row.verdict, series_key=series_key, gate=row.gate)


def figures_from_stored(stored: StoredResult, gate: str = "") -> ResultFigures:
    return figures_from_result(
        stored.test_id, stored.result, ceiling=stored.ceiling, verdict=stored.verdict,
        efficiency=stored.efficiency, series_key=stored.series_key, model=stored.model,
        hardware=stored.hardware, run_id=stored.run.run_id, created_at=stored.created_at,
        gate=gate,
    )


def _judged(fig: ResultFigures, judged: JudgedEfficiency) -> ResultFigures:
    """The figures with the efficiency ``tokperf history`` shows (``judged_efficiencies``)."""
    return replace(fig, efficiency=judged.value,
                   ceiling_decode_tokens_per_s=judged.ceiling(fig.ceiling_decode_tokens_per_s))


def store_figures(
    store: ResultStore, *, run_id: str | None = None, series_keys: Sequence[str] | None = None
) -> list[ResultFigures]:
    """The latest result of each series (in ``series_keys``), or every one of ``run_id``."""
    wanted = set(series_keys) if series_keys is not None else None
    latest = [h for h in store.latest_per_series() if wanted is None or h.series_key in wanted]
    if run_id is None:
        rows = latest
    else:
        rows = [h for s in latest for h in store.history(s.series_key) if h.run_id == run_id]
    gates = store.gate_verdicts(h.result_id for h in rows)
    judged = judged_efficiencies(store)
    figures = [_judged(figures_from_stored(store.result(h.result_id),
                                           gate_label(gates[h.result_id])), judged[h.result_id])
               for h in rows]
    return sorted(figures, key=lambda f: (f.test_id, f.created_at or ""))


@dataclass(frozen=True, slots=True)
class SeriesChange:
    """A verdict on one series with the builds it compared: a gate result, a step or a drift."""

    test_id: str
    series_key: str | None
    metric: str
    verdict: Outcome
    relative_change: float
    ci_low: float
    ci_high: float
    p_value: float
    baseline: str
    """What was compared against: a build label, or ``b6000 .. b6010`` for a history."""
    current: str
    reason: str
    kind: Literal["gate", "step", "drift", "compare"] = "gate"
    """``compare``: the two builds measured last, judged as ``tokperf compare`` does."""

    @classmethod
    def from_comparison(
        cls, test_id: str, comparison: Comparison, *, baseline: str, current: str,
        series_key: str | None = None,
    ) -> SeriesChange:
        return cls(
            test_id=test_id, series_key=series_key, metric=comparison.metric,
            verdict=comparison.verdict, relative_change=comparison.relative_change,
            ci_low=comparison.ci_low, ci_high=comparison.ci_high,
            p_value=comparison.p_value, baseline=baseline, current=current,
            reason=comparison.reason,
        )

    @classmethod
    def from_change_point(
        cls, test_id: str, change: ChangePoint, metric: Metric, *, series_key: str | None = None
    ) -> SeriesChange:
        return cls(
            test_id=test_id, series_key=series_key, metric=metric.name,
            verdict=change.verdict, relative_change=change.relative_change,
            ci_low=change.ci_low, ci_high=change.ci_high, p_value=change.p_value,
            baseline=change.version_before, current=change.version_after,
            reason=change.reason, kind=change.kind,
        )


@dataclass(frozen=True, slots=True)
class SeriesHistory:
    """A series across engine builds: one point per build, oldest first, its steps and drifts."""

    series_key: str
    test_id: str
    title: str
    metric: Metric
    points: tuple[Point, ...]
    changes: tuple[ChangePoint, ...]
    ceiling_decode_tokens_per_s: float | None
    drifts: tuple[ChangePoint, ...] = ()

    def series_changes(self) -> list[SeriesChange]:
        return [SeriesChange.from_change_point(self.test_id, c, self.metric,
                                               series_key=self.series_key)
                for c in (*self.changes, *self.drifts)]


def metric_named(name: str) -> Metric:
    if name not in METRICS:
        raise ConfigError(f"metric {name!r} has no per-sample history: use one of "
                          f"{', '.join(sorted(METRICS))}")
    return METRICS[name]


def load_history(
    store: ResultStore, series_key: str, *, metric: Metric | None = None,
    limit: int | None = None, judged: dict[int, JudgedEfficiency] | None = None,
    fits: dict[str | None, HostExponents] | None = None,
) -> SeriesHistory:
    """A series' history with its steps, drifts and the ceiling its latest is judged by;
    ``metric`` None: the one the series is judged on (``series_metric``), and the decode
    ceiling only where that is decode; ``fits``: each host's exponents, ``entries_exponent``)."""
    rows = store.history(series_key, 1)
    if not rows:
        raise ConfigError(f"series {series_key!r} has no results in {str(store.path)!r}; "
                          "list series with `tokperf history`")
    metric = series_metric(rows[-1], rows[-1].test_id) if metric is None else metric
    entries = series_history(store, series_key, metric.name, limit=limit, since_accepted=False)
    points = [e.point for e in entries]
    probed = store.probed_bandwidths(e.row.result_id for e in entries)
    probes = [probed.get(e.row.result_id) for e in entries]
    stored = store.result(rows[-1].result_id)
    label = workload_label(stored.result.workload)
    title = f"{rows[-1].test_id} — {label}"
    return SeriesHistory(
        series_key=series_key, test_id=rows[-1].test_id, title=title, metric=metric,
        points=tuple(points), changes=tuple(change_points(
            points, metric, probes=probes,
            exponent=entries_exponent(store, entries, metric.name, {} if fits is None else fits))),
        ceiling_decode_tokens_per_s=(judged or judged_efficiencies(store))[
            rows[-1].result_id].ceiling(rows[-1].ceiling_decode_tokens_per_s)
        if metric.name == DECODE.name else None,
        drifts=tuple(drifts(points, metric)),
    )


def load_histories(
    store: ResultStore, series_keys: Sequence[str] | None = None, *,
    metric: Metric | None = None, limit: int | None = None,
) -> list[SeriesHistory]:
    """``load_history`` for each of ``series_keys`` (default: every series), by test id;
    ``metric`` None: each series' own (``series_metric``)."""
    keys = ([h.series_key for h in store.latest_per_series()] if series_keys is None
            else list(series_keys))
    judged = judged_efficiencies(store)
    fits: dict[str | None, HostExponents] = {}
    histories = [load_history(store, key, metric=metric, limit=limit, judged=judged, fits=fits)
                 for key in keys]
    return sorted(histories, key=lambda h: (h.test_id, h.title, h.series_key))


def report_changes(store: ResultStore, histories: Sequence[SeriesHistory],
                   judged: Collection[str | None] = ()) -> list[SeriesChange]:
    """What a report lists: each history's steps and drifts, and per series (but those in
    ``judged``: the session's gate verdicts) the DB's two builds measured last, judged as
    ``tokperf compare`` judges them (a history of two builds has no step to find); a step
    between those two builds is left to compare's verdict, so the doors agree."""
    from pytest_tokperf.versions.compare import compare_versions

    try:
        compared: Compared | None = compare_versions(store)
    except ConfigError:  # fewer than two builds, or no series measured on both
        compared = None
    by_key = {s.series_key: s for s in compared.series} if compared else {}
    out: list[SeriesChange] = []
    for h in histories:
        s = by_key.get(h.series_key)
        if compared is None or s is None or s.metric.name != h.metric.name \
                or h.series_key in judged:
            out += h.series_changes()
            continue
        base, cur = ({e.point.version for e in side.entries.get(s.metric.name, ())}
                     for side in (s.baseline, s.current))
        out += [c for c in h.series_changes()
                if c.kind == "drift" or not (c.baseline in base and c.current in cur)]
        out.append(replace(SeriesChange.from_comparison(
            h.test_id, s.verdict, baseline=compared.baseline_name,
            current=compared.current_name, series_key=h.series_key), kind="compare"))
    return out
