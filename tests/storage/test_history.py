"""One history for every consumer: points per result, the decode figure, accepted levels."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from tests.support.storage_factory import (
    fill_history,
    make_hardware,
    make_model,
    make_run,
    result_at,
)

from pytest_tokperf.bench.gate import Gate, GateFinding
from pytest_tokperf.errors import StorageError
from pytest_tokperf.settings import Baseline
from pytest_tokperf.results import Summary
from pytest_tokperf.stats import DECODE, PREFILL, compare
from pytest_tokperf.stats.metric import AGGREGATE
from pytest_tokperf.storage.history import (
    metric_values,
    series_histories,
    series_history,
    series_metric,
    session_points,
)
from pytest_tokperf.storage.store import ResultStore


def _decode_verdict(store: ResultStore, key: str, decode: float, seed: int = 9) -> str:
    samples = result_at("bnew", decode, random.Random(seed)).samples
    findings = Gate(Baseline("history")).judge(store, test_id="t::decode", series_key=key,
                                               samples=samples, current_build="bnew",
                                               run_id="current")
    return next(f.comparison.verdict for f in findings if f.comparison.metric == "decode")


def test_one_point_per_stored_result_oldest_first(tmp_path: Path) -> None:
    store, key = fill_history(tmp_path / "r.db", [("b1", 100.0), ("b1", 101.0), ("b2", 90.0)])
    entries = series_history(store, key, "decode")
    assert [e.point.version for e in entries] == ["b1", "b1", "b2"]  # runs are not pooled
    assert [e.row.run_id for e in entries] == ["run-0", "run-1", "run-2"]
    assert all(len(e.point.samples) == 5 for e in entries)
    assert entries[-1].point.labels["engine_build"] == "b2"
    assert [e.point.version for e in series_history(store, key, "decode", limit=2)] == [
        "b1", "b2"]
    assert series_history(store, key, "decode", exclude_run_id="run-2")[-1].point.version == "b1"


def test_decode_is_the_engines_figure_when_every_repetition_has_it() -> None:
    samples = result_at("b1", 100.0, random.Random(1)).samples
    engine = [dataclasses.replace(s, engine_decode_tokens_per_s=50.0) for s in samples]
    assert metric_values(engine, "decode") == [50.0] * 5
    partly = [engine[0], *(dataclasses.replace(s, engine_decode_tokens_per_s=None)
                           for s in engine[1:])]
    assert metric_values(partly, "decode") == [s.decode_tokens_per_s for s in partly]
    assert metric_values(engine, "ttft") == [s.ttft_s for s in engine]


def test_a_series_is_judged_on_the_figure_it_has() -> None:
    # one rule for every door: decode where there is one (the engine's alone will do),
    # else prefill (llama-bench pp), else aggregate (llama-bench pg)
    result = result_at("b1", 100.0, random.Random(1))
    figure = Summary.of([1.0, 2.0])
    none = dataclasses.replace(result, decode_tokens_per_s=None, engine_decode_tokens_per_s=None,
                               prefill_tokens_per_s=None)
    assert series_metric(result) is DECODE
    assert series_metric(dataclasses.replace(none, engine_decode_tokens_per_s=figure)) is DECODE
    assert series_metric(dataclasses.replace(none, prefill_tokens_per_s=figure)) is PREFILL
    assert series_metric(dataclasses.replace(none, aggregate_tokens_per_s=figure)) is AGGREGATE
    sample = result.samples[0]
    assert series_metric(sample) is DECODE
    assert series_metric(dataclasses.replace(sample, decode_tokens_per_s=None,
                                             engine_decode_tokens_per_s=None)) is PREFILL


def test_repetitions_without_a_ttft_still_count_for_the_rates(tmp_path: Path) -> None:
    # an imported llama-bench row stores no TTFT (NULL): its samples once read as absent
    result = result_at("b1", 100.0, random.Random(1))
    result = dataclasses.replace(result, ttft_s=None, samples=tuple(
        dataclasses.replace(s, ttft_s=None, text_chars=None) for s in result.samples))
    store = ResultStore.open(tmp_path / "r.db")
    store.begin_run(make_run())
    stored = store.record("run-1", "t::decode", result, model=make_model(),
                          hardware=make_hardware(), ceiling=None, efficiency=None,
                          verdict="unchecked")
    both = series_histories(store, stored.series_key, ("decode", "ttft"))
    assert len(both["decode"]) == 1 and len(both["decode"][0].point.samples) == 5
    assert both["ttft"] == []
    back = store.result(stored.result_id).result
    assert back.ttft_s is None and back.chars_per_s is None
    assert {(s.ttft_s, s.chars_per_s) for s in back.samples} == {(None, None)}
    assert store.history(stored.series_key)[0].ttft_s is None
    store.close()


def test_unknown_metric_names_the_choices() -> None:
    with pytest.raises(Exception, match="'tpot' has no per-sample history: use one of decode"):
        metric_values([], "tpot")


def test_accepting_a_new_level_restarts_the_baseline(tmp_path: Path) -> None:
    levels = [(f"b{i}", 100.0) for i in range(5)] + [("b5", 88.0), ("b6", 88.0)]
    store, key = fill_history(tmp_path / "r.db", levels)
    accepted_at = store.history(key)[5].result_id  # the first run at 88 tok/s
    acceptance = store.accept(key, accepted_at, accepted_by="ci-bot", reason="new KV layout")
    assert (acceptance.accepted_by, acceptance.reason) == ("ci-bot", "new KV layout")
    assert store.acceptances(key) == [acceptance]
    assert [e.point.version for e in series_history(store, key, "decode")] == ["b5", "b6"]
    assert len(series_history(store, key, "decode", since_accepted=False)) == 7
    assert _decode_verdict(store, key, 88.0) == "unchanged"
    assert _decode_verdict(store, key, 79.0) == "regression"  # a new drop is still caught


def test_an_acceptance_must_name_a_result_of_its_series(tmp_path: Path) -> None:
    store, key = fill_history(tmp_path / "r.db", [("b1", 100.0)])
    with pytest.raises(StorageError, match="result 999 is not a result of series"):
        store.accept(key, 999, accepted_by=None, reason=None)


def test_gate_verdicts_are_stored_with_their_results(tmp_path: Path) -> None:
    store, key = fill_history(tmp_path / "r.db", [(f"b{i}", 100.0) for i in range(4)])
    result_id = store.history(key)[-1].result_id
    comparison = compare([100.0, 101.0, 99.0, 100.5], [90.0, 91.0, 89.5, 90.5], DECODE)
    finding = GateFinding("t::decode", key, comparison, "b0..b2 (3 runs)", "b3",
                          result_id=result_id, correction="Holm over 2")
    stored = finding.stored()
    assert stored is not None
    store.save_gate_verdicts([stored])
    store.save_gate_verdicts([stored])  # replaced, not duplicated
    (back,) = store.gate_verdicts([result_id])[result_id]
    assert back == stored
    assert back.verdict == "regression" and back.correction == "Holm over 2"


def test_every_metric_of_a_history_is_read_in_one_query(tmp_path: Path) -> None:
    levels = [("b1", 100.0), ("b2", 101.0), ("b2", 99.0), ("b3", 98.0), ("b3", 97.0)]
    store, key = fill_history(tmp_path / "r.db", levels)
    store.accept(key, store.history(key)[1].result_id, accepted_by=None, reason=None)
    statements: list[str] = []
    store.db.conn.set_trace_callback(statements.append)
    both = series_histories(store, key, ("decode", "ttft"), exclude_run_id="run-4",
                            engine_version="b2", limit=5)
    store.db.conn.set_trace_callback(None)
    assert len(statements) == 1
    assert [e.row.run_id for e in both["decode"]] == ["run-1", "run-2"]
    assert [e.row.run_id for e in both["ttft"]] == ["run-1", "run-2"]
    assert all(len(e.point.samples) == 5 for e in both["decode"] + both["ttft"])
    # the same points as the result's own samples give, in the same order
    second = store.samples(store.history(key)[1].result_id)
    assert both["decode"][0].point.samples == tuple(metric_values(second, "decode"))
    newest = series_histories(store, key, ("decode",), since_accepted=False, limit=2)["decode"]
    assert [e.row.run_id for e in newest] == ["run-3", "run-4"]


def test_the_results_of_one_run_are_one_session(tmp_path: Path) -> None:
    """A session is the unit of the spread between runs: a test that measured the same
    workload twice in one run gives the statistics one session of both repetitions."""
    from tests.support.storage_factory import make_ceiling, make_hardware, make_model, make_run

    store = ResultStore.open(tmp_path / "r.db")
    rng = random.Random(5)
    for i, count in enumerate((1, 2)):
        run = make_run(run_id=f"run-{i}", started_at=f"2026-01-0{i + 1}T00:00:00+00:00")
        store.begin_run(run)
        for _ in range(count):
            store.record(run.run_id, "t::decode", result_at("b1", 100.0, rng),
                         model=make_model(), hardware=make_hardware(), ceiling=make_ceiling(),
                         efficiency=0.7, verdict="unchecked")
    (key,) = {r.series_key for r in store.latest_per_series()}
    entries = series_history(store, key, "decode")
    assert [e.row.run_id for e in entries] == ["run-0", "run-1", "run-1"]
    points = session_points(entries)
    assert [len(p.samples) for p in points] == [5, 10]
    assert points[1].samples == (*entries[1].point.samples, *entries[2].point.samples)
