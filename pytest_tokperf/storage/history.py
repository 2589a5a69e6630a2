"""A series' history as the statistics see it: the one store -> points function.

Every door (the gate, the verbs, plots, reports) reads a series through ``series_history``:
one point per stored result, oldest first, by default since the latest accepted level;
``series_metric`` is the metric each judges it on. docs/engines.md: whose clock decode is.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.results import judged_decode_values
from pytest_tokperf.stats.metric import AGGREGATE, DECODE, PREFILL, TTFT, Metric

if TYPE_CHECKING:
    from pytest_tokperf.stats.changepoints import Point
    from pytest_tokperf.stats.moved import BandwidthExponent, HostExponents
    from pytest_tokperf.storage.store import HistoryRow, ResultStore

METRIC_NAMES = ("decode", "prefill", "ttft", "aggregate")


def version_label(version: str | None, build: str | None) -> str:
    """``b6000 (abc1234)``, or whichever of the two is known, or ``?``."""
    if version and build and version != build:
        return f"{version} ({build})"
    return version or build or "?"


class Figures(Protocol):
    """The per-repetition figures a metric reads: a ``Sample`` or a stored ``SampleFigures``."""

    @property
    def ttft_s(self) -> float | None: ...

    @property
    def prefill_tokens_per_s(self) -> float | None: ...

    @property
    def decode_tokens_per_s(self) -> float | None: ...

    @property
    def engine_decode_tokens_per_s(self) -> float | None: ...

    @property
    def generated_tokens(self) -> int: ...

    @property
    def round_index(self) -> int | None: ...

    @property
    def round_wall_s(self) -> float | None: ...


def metric_values(samples: Sequence[Figures], metric: str) -> list[float]:
    """The figures of one result that a metric is judged on (see the module doc)."""
    if metric == "ttft":
        values: list[float | None] = [s.ttft_s for s in samples]
    elif metric == "prefill":
        values = [s.prefill_tokens_per_s for s in samples]
    elif metric == "aggregate":  # per round, not per request: all streams / wall time
        rounds: dict[int, list[Figures]] = {}
        for s in samples:
            if s.round_index is not None and s.round_wall_s:
                rounds.setdefault(s.round_index, []).append(s)
        values = [sum(s.generated_tokens for s in group) / group[0].round_wall_s
                  for group in rounds.values() if group[0].round_wall_s]
    elif metric == "decode":  # the rule of BenchResult.judged_decode_tokens_per_s
        values = list(judged_decode_values(samples))
    else:
        raise ConfigError(f"metric {metric!r} has no per-sample history: use one of "
                          f"{', '.join(METRIC_NAMES)}")
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


class MeasuredFigures(Protocol):
    """What ``series_metric`` reads of a result: a ``HistoryRow``, a ``BenchResult``, a
    ``Sample`` (a figure or its summary; None where it was not measured)."""

    @property
    def decode_tokens_per_s(self) -> object | None: ...

    @property
    def engine_decode_tokens_per_s(self) -> object | None: ...

    @property
    def prefill_tokens_per_s(self) -> object | None: ...


PROMPT_ONLY_TEST = re.compile(r"tokperf bench pp\d+(?![\d+])")
"""A ``tokperf bench`` pp test's id (not ``pp512+tg128``): its 2 tokens are no decode."""


def series_metric(result: MeasuredFigures, test_id: str | None = None) -> Metric:
    """The metric a series is judged on at every door, read off a result and its test id:
    decode where it has a decode figure (not a ``tokperf bench`` pp test); else prefill (a
    pp row, never held against the decode ceiling); else aggregate (a llama-bench pg row)."""
    decoded = result.decode_tokens_per_s is not None or result.engine_decode_tokens_per_s is not None
    if decoded and not PROMPT_ONLY_TEST.match(test_id or ""):
        return DECODE
    return PREFILL if result.prefill_tokens_per_s is not None else AGGREGATE


def labels_of(row: HistoryRow) -> dict[str, str]:
    """What can change between points of one series (the series key holds the rest)."""
    labels = {
        "engine_build": version_label(row.engine_version, row.engine_build),
        "hardware": row.hardware_name,
        "driver": row.hardware_driver,
        "model_hash": (row.model_content_hash or "")[:12] or None,
    }
    return {k: v for k, v in labels.items() if v}


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One stored result of a series and its point for the statistics."""

    row: HistoryRow
    point: Point


def series_histories(store: ResultStore, series_key: str, metrics: Sequence[str], *,
                     exclude_run_id: str | None = None, engine_version: str | None = None,
                     limit: int | None = None, since_accepted: bool = True
                     ) -> dict[str, list[HistoryEntry]]:
    """The series' results as points of each of ``metrics``, oldest first, in one query
    (options: ``ResultStore.history_figures``); a result without a figure for a metric is
    left out of that metric's points."""
    from pytest_tokperf.stats.changepoints import Point

    for metric in metrics:
        if metric not in METRIC_NAMES:
            metric_values((), metric)  # raises, naming the known metrics
    rows = store.history_figures(series_key, since_accepted=since_accepted,
                                 exclude_run_id=exclude_run_id, engine_version=engine_version,
                                 limit=limit)
    out: dict[str, list[HistoryEntry]] = {metric: [] for metric in metrics}
    for row, samples in rows:
        version = version_label(row.engine_version, row.engine_build)
        labels = labels_of(row)
        for metric in metrics:
            values = metric_values(samples, metric)
            if values:
                out[metric].append(HistoryEntry(row, Point(version, tuple(values), labels)))
    return out


def series_history(store: ResultStore, series_key: str, metric: str, *,
                   exclude_run_id: str | None = None, engine_version: str | None = None,
                   limit: int | None = None, since_accepted: bool = True) -> list[HistoryEntry]:
    """One metric of ``series_histories`` (same options)."""
    return series_histories(store, series_key, (metric,), exclude_run_id=exclude_run_id,
                            engine_version=engine_version, limit=limit,
                            since_accepted=since_accepted)[metric]


def session_points(entries: Sequence[HistoryEntry]) -> list[Point]:
    """One point per run (session): consecutive results of one run merged, their repetitions
    in order, labelled as the run's first result."""
    from pytest_tokperf.stats.changepoints import Point

    out: list[Point] = []
    runs: list[str] = []
    for entry in entries:
        if runs and runs[-1] == entry.row.run_id:
            last = out[-1]
            out[-1] = Point(last.version, (*last.samples, *entry.point.samples), last.labels)
        else:
            out.append(entry.point)
            runs.append(entry.row.run_id)
    return out


def session_probes(store: ResultStore, entries: Sequence[HistoryEntry]) -> list[float | None]:
    """Per point of ``session_points(entries)``, the bandwidth probed around it (bytes/s,
    the median of its results'; None: not probed), for ``stats.moved``."""
    probes = store.probed_bandwidths(e.row.result_id for e in entries)
    out: list[list[float]] = []
    runs: list[str] = []
    for entry in entries:
        value = probes.get(entry.row.result_id)
        if not (runs and runs[-1] == entry.row.run_id):
            out.append([])
            runs.append(entry.row.run_id)
        if value:
            out[-1].append(value)
    return [statistics.median(v) if v else None for v in out]


def bandwidth_exponents(store: ResultStore, host: str | None) -> HostExponents:
    """Per metric, how fast it can follow the bandwidth probe on ``host``: the upper bound
    its stored runs of one series and build in two memory states tell (``stats.moved``)."""
    from pytest_tokperf.stats.moved import HostExponents, host_exponent

    runs = store.probed_results(host) if host is not None else []
    return HostExponents(host, {m.name: host_exponent(
        ((r.series_key, r.engine_version, r.engine_build), r.bandwidth_bytes_per_s,
         statistics.median(values) ** (1 if m.higher_is_better else -1))
        for r, samples in runs if (values := metric_values(samples, m.name)))
        for m in (DECODE, PREFILL, TTFT, AGGREGATE)})



def entries_exponent(store: ResultStore, entries: Iterable[HistoryEntry], metric: str,
                     fits: dict[str | None, HostExponents]) -> BandwidthExponent:
    """``metric``'s exponent for runs ``entries``: their host's fit (``bandwidth_exponents``,
    kept in ``fits`` so a command fits each host once), the bound where hosts differ."""
    hosts = {e.row.host for e in entries}
    host = next(iter(hosts)) if len(hosts) == 1 else None
    if host not in fits:
        fits[host] = bandwidth_exponents(store, host)
    return fits[host].of(metric, hosts)

@dataclass(frozen=True, slots=True)
class JudgedEfficiency:
    """A stored result's efficiency as a history shows it: ``value`` is judged against the
    highest bandwidth the host reached in the DB where the stored ceiling came from a probe
    of the moment (``rejudged``); a datasheet ceiling is kept."""

    result_id: int
    value: float | None
    stored: float | None
    bandwidth_bytes_per_s: float | None
    rejudged: bool

    @property
    def above_ceiling(self) -> bool:
        return self.value is not None and self.value > 1.0

    def ceiling(self, stored_ceiling: float | None) -> float | None:
        """The decode ceiling ``value`` is judged against, from the stored one."""
        if stored_ceiling is None or not self.rejudged or not self.value or not self.stored:
            return stored_ceiling
        return stored_ceiling * self.stored / self.value


def judged_efficiencies(store: ResultStore) -> dict[int, JudgedEfficiency]:
    """Per result id, its efficiency against the host's reached bandwidth (see
    ``JudgedEfficiency``): the one figure ``tokperf history`` shows."""
    rows = store.tuples(
        "SELECT r.id, r.efficiency, r.ceiling_bandwidth_bytes_per_s, r.ceiling_bandwidth_source,"
        " r.measured_bandwidth_bytes_per_s, ru.host, e.hardware_name FROM results r"
        " JOIN runs ru ON ru.run_id = r.run_id"
        " JOIN environments e ON e.id = r.environment_id")
    reached: dict[tuple[str, str | None], float] = {}
    for _, _, ceiling_bw, source, probe_bw, host, hardware in rows:
        for bw in (ceiling_bw if source == "measured" else None, probe_bw):
            if bw:
                key = (host, hardware)
                reached[key] = max(reached.get(key, 0.0), float(bw))
    out: dict[int, JudgedEfficiency] = {}
    for result_id, stored, ceiling_bw, source, _, host, hardware in rows:
        best = reached.get((host, hardware))
        if stored is not None and source == "measured" and ceiling_bw and best \
                and best > ceiling_bw:
            out[result_id] = JudgedEfficiency(result_id, stored * ceiling_bw / best, stored,
                                              best, True)
        else:
            out[result_id] = JudgedEfficiency(result_id, stored, stored, ceiling_bw, False)
    return out


def efficiency_notes(judged: Sequence[JudgedEfficiency]) -> list[str]:
    """What a reader must know about the efficiencies shown: which were judged against
    the host's reached bandwidth, and a warning for every one still above 100%."""
    notes = []
    moved = [j for j in judged if j.rejudged]
    if moved:
        peaks = sorted({j.bandwidth_bytes_per_s or 0.0 for j in moved})
        notes.append(
            f"eff: {len(moved)} of {len(judged)} results were stored against a probe below "
            f"the highest bandwidth their host reached in this DB "
            f"({', '.join(f'{p / 1e9:.1f} GB/s' for p in peaks)}); they are judged against "
            f"that, so the figure does not follow the bandwidth of the moment")
    for j in judged:
        if j.above_ceiling and j.value is not None:
            bw = f" of {j.bandwidth_bytes_per_s / 1e9:.1f} GB/s" if j.bandwidth_bytes_per_s else ""
            notes.append(
                f"WARNING result {j.result_id}: efficiency {j.value:.0%} is above its ceiling"
                f"{bw}: a ceiling is an upper bound, so that bandwidth is wrong (a datasheet "
                f"below what the device reaches, or the wrong device): pass the right one "
                f"with --tokperf-bandwidth")
    return notes
