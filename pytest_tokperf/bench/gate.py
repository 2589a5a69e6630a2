"""The regression gate: a new result against the stored history of its series.

The baseline is, by ``--tokperf-baseline``:
- ``history`` (default): earlier runs of the same series in this DB, from its latest
  level step on (``changepoints.settled_baseline``), at most 20 runs;
- ``engine=VERSION``: only earlier runs whose engine version or build is VERSION;
- a path to another results DB: that DB's runs of the same series.

Decode tok/s (higher is better; the engine's own figure where it reports one) and TTFT
(lower is better; client clock) are judged; a regression
must be significant AND at least the minimum effect; a series too noisy or too
short to judge is "inconclusive" and reported, never failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_tokperf.stats.changepoints import Point, compare_to_history
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.results import Sample
from pytest_tokperf.stats.compare import DECODE, TTFT, Comparison, Metric
from pytest_tokperf.storage.store import HistoryRow, ResultStore

HISTORY_RUNS = 20
MIN_BASELINE_RUNS = 2
"""Samples within one run share the machine's state; on machines whose bandwidth
drifts between runs (+/-15-20% on the VM this was built on), one earlier run cannot
separate an engine change from that drift, so the gate wants two."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """Where baseline samples come from (parsed ``--tokperf-baseline``)."""

    kind: str
    """``history``, ``engine`` or ``db``."""
    engine_version: str | None = None
    db: Path | None = None

    @property
    def label(self) -> str:
        if self.kind == "engine":
            return f"engine {self.engine_version}"
        if self.kind == "db":
            return f"db {self.db}"
        return "stored history"


def parse_baseline(value: str | None, where: str = "option --tokperf-baseline") -> Baseline:
    if value is None or value in ("", "history", "latest"):
        return Baseline("history")
    if value.startswith("engine="):
        version = value.split("=", 1)[1].strip()
        if not version:
            raise ConfigError(f"--tokperf-baseline {value!r} from {where} names no engine version; "
                              f"e.g. engine=b11434")
        return Baseline("engine", engine_version=version)
    path = Path(value).expanduser()
    if path.is_file():
        return Baseline("db", db=path)
    raise ConfigError(
        f"--tokperf-baseline {value!r} from {where} is neither 'history', 'engine=VERSION' nor "
        f"an existing results DB file"
    )


@dataclass(frozen=True, slots=True)
class GateFinding:
    """One metric of one result judged against its baseline."""

    test_id: str
    series_key: str
    comparison: Comparison
    baseline: str
    """Which builds the baseline spans, e.g. ``b11400..b11434 (6 runs)``."""
    current: str


def _values(samples: Sequence[Sample], metric: Metric) -> list[float]:
    """The figures judged: client TTFT; decode from the engine's own timings when every
    sample has them (a starved client reads bursts of tokens and its decode rate jumps),
    else the client's."""
    if metric.name == TTFT.name:
        return [s.ttft_s for s in samples]
    engine = [s.engine_decode_tokens_per_s for s in samples]
    if samples and all(engine):
        return [float(v) for v in engine if v]
    return [s.decode_tokens_per_s for s in samples if s.decode_tokens_per_s]


def _point(store: ResultStore, row: HistoryRow, metric: Metric) -> Point | None:
    values = _values(store.samples(row.result_id), metric)
    if not values:
        return None
    labels = {
        "engine_build": row.engine_build or row.engine_version or "?",
        "hardware": row.hardware_name or "?",
        "driver": row.hardware_driver or "?",
        "model": row.model_content_hash or row.model_file_name or "?",
    }
    return Point(version=labels["engine_build"], samples=tuple(values), labels=labels)


def history_points(
    store: ResultStore, series_key: str, metric: Metric, *,
    exclude_run_id: str | None = None, engine_version: str | None = None,
    limit: int | None = None,
) -> list[Point]:
    """The series' stored results as change-point ``Point`` values, oldest first."""
    rows = [
        row for row in store.history(series_key)
        if row.run_id != exclude_run_id
        and (engine_version is None or engine_version in (row.engine_version, row.engine_build))
    ]
    if limit is not None:
        rows = rows[-limit:]
    return [p for p in (_point(store, row, metric) for row in rows) if p is not None]


def _span(points: Sequence[Point]) -> str:
    if not points:
        return "no earlier runs"
    first, last = points[0].version, points[-1].version
    builds = first if first == last else f"{first}..{last}"
    return f"{builds} ({len(points)} run{'s' if len(points) != 1 else ''})"


def judge(
    store: ResultStore,
    baseline: Baseline,
    *,
    test_id: str,
    series_key: str,
    samples: Sequence[Sample],
    current_build: str,
    run_id: str | None,
    min_effect: float = 0.05,
) -> list[GateFinding]:
    """Decode and TTFT of ``samples`` against the baseline's runs of the same series."""
    source = store
    if baseline.kind == "db":
        assert baseline.db is not None
        source = ResultStore.open(baseline.db)
    findings = []
    try:
        for metric in (DECODE, TTFT):
            metric = replace(metric, min_effect=min_effect)
            points = history_points(
                source, series_key, metric,
                exclude_run_id=run_id if baseline.kind != "db" else None,
                engine_version=baseline.engine_version,
                limit=HISTORY_RUNS,
            )
            current = _values(samples, metric)
            comparison = compare_to_history(points, current, metric, window=HISTORY_RUNS)
            if len(points) < MIN_BASELINE_RUNS and comparison.verdict != "inconclusive":
                comparison = replace(comparison, verdict="inconclusive", reason=(
                    f"{comparison.reason}; but {len(points)} earlier run cannot tell a change "
                    f"from run-to-run drift: need {MIN_BASELINE_RUNS} runs of this series"))
            findings.append(GateFinding(test_id, series_key, comparison, _span(points), current_build))
    finally:
        if source is not store:
            source.close()
    return findings


def describe(finding: GateFinding) -> str:
    """One line: verdict, metric, figures and the builds compared."""
    c = finding.comparison
    return (f"{c.verdict.upper()}: {finding.test_id}: {c.reason} "
            f"(baseline {finding.baseline}; current {finding.current})")
