"""Adaptive repetitions through ``TokBench``: the count, and 'unstable' is never a pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_tokperf.bench.fixture import TokBench
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.results import BenchResult, Ceiling, Verdict
from tests.support.storage_factory import make_ceiling
from tests.bench.test_measure import _RateEngine

QUIET = [30.0, 30.1, 29.9, 30.0, 30.05, 30.0, 29.95]
NOISY = [30.0, 20.0, 30.0, 40.0] * 5


def _bench(rates: list[float], **kwargs: object) -> tuple[TokBench, _RateEngine, list[Verdict]]:
    engine = _RateEngine(rates)
    verdicts: list[Verdict] = []

    def record(result: BenchResult, ceiling: Ceiling | None, verdict: Verdict) -> None:
        verdicts.append(verdict)

    bench = TokBench(engine=lambda: engine, record=record,  # type: ignore[arg-type, return-value]
                     options=MeasureOptions(), **kwargs)  # type: ignore[arg-type]
    return bench, engine, verdicts


def test_default_is_adaptive_and_a_quiet_series_needs_fewer_than_five() -> None:
    bench, engine, verdicts = _bench(QUIET)
    outcome = bench(prompt_tokens=8, generate_tokens=16)
    assert len(outcome.result.samples) == 3 and engine.calls == 4  # + one warm-up
    assert outcome.decode_interval is not None and outcome.decode_interval <= 0.02
    assert verdicts == ["unchecked"]


def test_a_wide_spread_is_stored_as_unstable_with_its_cv() -> None:
    bench, _, verdicts = _bench(NOISY, max_repetitions=8)
    outcome = bench(prompt_tokens=8, generate_tokens=16)
    assert len(outcome.result.samples) == 8
    assert outcome.decode_cv is not None and outcome.decode_cv > 0.05
    assert verdicts == ["unstable"]
    assert any(n.startswith("unstable: the engine's decode varied by CV") for n in outcome.result.notes)


def test_explicit_repetitions_mean_exactly_that_many() -> None:
    bench, engine, _ = _bench(QUIET * 2, repetitions=5)
    assert len(bench(prompt_tokens=8, generate_tokens=16).result.samples) == 5
    bench, engine, _ = _bench(QUIET * 2)
    assert len(bench(prompt_tokens=8, generate_tokens=16, repetitions=4).result.samples) == 4
    assert engine.calls == 5


def test_a_floor_met_with_a_wide_spread_is_unstable_not_pass() -> None:
    ceiling = replace(make_ceiling(), decode_tokens_per_s=50.0)
    for rates, verdict in ((QUIET, "pass"), (NOISY, "unstable")):
        bench, _, verdicts = _bench(rates, min_efficiency=0.3, ceiling_for=lambda r: ceiling)
        bench(prompt_tokens=8, generate_tokens=16)  # 60% of the ceiling: above the floor
        assert verdicts == [verdict]
    slow = [10.0, 8.0, 12.0, 10.0] * 5  # 20% of the ceiling, and noisy: a failure stays one
    bench, _, verdicts = _bench(slow, min_efficiency=0.3, ceiling_for=lambda r: ceiling)
    with pytest.raises(AssertionError, match="required >= 30%"):
        bench(prompt_tokens=8, generate_tokens=16)
    assert verdicts == ["fail"]
