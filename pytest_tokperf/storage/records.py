"""The value types a ``ResultStore`` hands back: rows of a history, stored results, the
gate's verdicts and accepted levels. No database code here."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, ModelInfo, RunInfo, Verdict


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One result of a series with what a comparison varies (``series_history`` view);
    figures are medians over the repetitions."""

    result_id: int
    run_id: str
    created_at: str
    test_id: str
    series_key: str
    engine_name: str
    engine_version: str | None
    engine_build: str | None
    engine_backend: str | None
    hardware_name: str | None
    hardware_kind: str | None
    hardware_driver: str | None
    model_file_name: str | None
    model_content_hash: str | None
    project_commit: str | None
    host: str
    ttft_s: float | None
    """None: not measured (an imported llama-bench row)."""
    decode_tokens_per_s: float | None
    decode_tokens_per_s_stdev: float | None
    prefill_tokens_per_s: float | None
    engine_decode_tokens_per_s: float | None
    engine_prefill_tokens_per_s: float | None
    repetitions: int
    ceiling_decode_tokens_per_s: float | None
    efficiency: float | None
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class SampleFigures:
    """The figures of one stored repetition that a history judges (no inter-token times)."""

    ttft_s: float | None
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    engine_decode_tokens_per_s: float | None
    generated_tokens: int
    round_index: int | None
    round_wall_s: float | None


@dataclass(frozen=True, slots=True)
class ProbedResult:
    """A result stored with a bandwidth probe (bytes/s): its series and engine build."""

    result_id: int
    series_key: str
    engine_version: str | None
    engine_build: str | None
    bandwidth_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class Stored:
    """Where ``record`` put a result: its id and the series it belongs to."""

    result_id: int
    series_key: str


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """The regression gate's final verdict on one metric of one stored result."""

    result_id: int
    metric: str
    verdict: str
    relative_change: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    n_baseline: int
    n_current: int
    baseline: str
    """What was compared against, e.g. ``b11400..b11434 (6 runs)``."""
    correction: str
    """How significance was controlled across the session, e.g. ``Holm over 24``."""
    reason: str


@dataclass(frozen=True, slots=True)
class Acceptance:
    """A series' new level, accepted on purpose: the gate's baseline starts at ``result_id``."""

    id: int
    series_key: str
    result_id: int
    accepted_at: str
    accepted_by: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class StoredRun:
    run: RunInfo
    finished_at: str | None
    results: int


@dataclass(frozen=True, slots=True)
class StoredResult:
    """One result read back in full: what ``record`` was given, plus its keys."""

    result_id: int
    run: RunInfo
    test_id: str
    series_key: str
    created_at: str
    result: BenchResult
    model: ModelInfo | None
    hardware: HardwareInfo | None
    ceiling: Ceiling | None
    efficiency: float | None
    verdict: Verdict
