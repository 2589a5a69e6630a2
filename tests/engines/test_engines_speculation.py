"""Drafting the engine itself shows moves a result out of the base series.

Whatever the configuration said: draft counts on the responses (vLLM's per-request
``metrics.speculative_decoding`` here, through the fake; llama.cpp's ``timings.draft_n``
with the real llama-server), or llama-server's ``GET /slots`` saying a slot drafts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.fake_engines import FakeVLLM

from pytest_tokperf.bench.measure import run_workload
from pytest_tokperf.launch.process import LaunchSpec, ServerProcess, start_llama_server
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.engines.speculation import OBSERVED, with_observed_speculation
from pytest_tokperf.results import EngineInfo, Sample, Workload
from pytest_tokperf.storage.rows import series_of

from tests.conftest import THREADS

BASE = EngineInfo(name="vllm", version="0.11.0", build=None, base_url="http://x")


def _sample(draft: int | None, accepted: int | None = None) -> Sample:
    return Sample(ttft_s=0.1, prefill_tokens_per_s=None, decode_tokens_per_s=50.0,
                  prompt_tokens=8, generated_tokens=16, inter_token_s=(), engine_prefill_s=None,
                  engine_prefill_tokens_per_s=None, engine_decode_tokens_per_s=None,
                  cached_prompt_tokens=None, speculative=draft is not None, text_chars=40,
                  draft_tokens=draft, draft_accepted_tokens=accepted)


def test_draft_counts_on_responses_make_a_base_engine_speculative() -> None:
    seen = with_observed_speculation(BASE, [_sample(None), _sample(12, 9), _sample(10, 5)])
    assert seen.speculative is True
    assert dict(seen.settings)[OBSERVED] == "draft counts in responses"
    (warning,) = seen.warnings
    assert warning.startswith("speculative decoding: vllm reported draft tokens on 2 of 3 "
                              "responses (22 drafted, 14 accepted) though it was not known to draft")


def test_no_draft_counts_or_a_known_drafter_leave_the_info_as_it_is() -> None:
    assert with_observed_speculation(BASE, [_sample(None)] * 3) is BASE
    drafting = EngineInfo(name="llama-server", version="b1", build=None, base_url="http://y",
                          speculative=True, settings=(("draft_model", "d.gguf"),))
    assert with_observed_speculation(drafting, [_sample(8, 8)]) is drafting


BENCH = """
def test_decode(tok_bench):
    tok_bench(prompt_tokens=24, generate_tokens=12, repetitions=2, warmup=0)
"""


def _stored(db: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "select s.speculative, s.series_key, e.engine_settings from results r "
            "join series s using (series_key) join environments e on e.id = r.environment_id "
            "order by r.id").fetchall()


@pytest.mark.parametrize("drafting", [False, True], ids=["base", "drafting"])
def test_a_base_configured_attach_that_drafts_lands_in_the_speculative_series(
    pytester: pytest.Pytester, drafting: bool
) -> None:
    """Nothing configured drafting and ``/metrics`` (where vLLM's spec_decode series would
    show it) is out of reach, as behind a proxy: only the responses say it."""
    pytester.makepyfile(BENCH)
    db = pytester.path / "r.db"
    with FakeVLLM(speculative=drafting, per_request_metrics=True, metrics_endpoint=False) as fake:
        result = pytester.runpytest("--tokperf-engine", "vllm", "--tokperf-url", fake.url,
                                    "--tokperf-db", str(db))
    result.assert_outcomes(passed=1)
    ((speculative, _key, settings),) = _stored(db)
    assert bool(speculative) is drafting
    assert (f'"{OBSERVED}"' in settings) is drafting


def test_the_same_test_drafting_or_not_keeps_two_series(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BENCH)
    db = pytester.path / "r.db"
    for drafting in (False, True):
        with FakeVLLM(speculative=drafting, per_request_metrics=True,
                      metrics_endpoint=False) as fake:
            pytester.runpytest("--tokperf-engine", "vllm", "--tokperf-url", fake.url,
                               "--tokperf-db", str(db)).assert_outcomes(passed=1)
    (base, _, _), (drafted, _, _) = rows = _stored(db)
    assert (base, drafted) == (0, 1) and rows[0][1] != rows[1][1]


# -- the real llama-server: a drafting server attached as if it were a base one ---------


@pytest.fixture(scope="module")
def drafting_servers(
    server_binary: Path, test_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    """The test model drafting for itself (``-md`` + ``--spec-type draft-simple``), one
    server with ``/slots`` and one started ``--no-slots`` (501 there)."""
    logs = tmp_path_factory.mktemp("drafting")
    servers: dict[str, ServerProcess] = {}
    try:
        for name, extra in (("slots", ()), ("no-slots", ("--no-slots",))):
            spec = LaunchSpec(binary=server_binary, model=test_model, threads=THREADS,
                              log_path=logs / f"{name}.log", context_size=1024,
                              draft_model=test_model, extra_args=extra)
            servers[name] = start_llama_server(spec)
        yield servers
    finally:
        for server in servers.values():
            server.stop()


WORKLOAD = Workload(prompt_tokens=16, generate_tokens=24, repetitions=2, warmup=0)


def test_slots_say_an_attached_llama_server_drafts(
    drafting_servers: dict[str, ServerProcess], llama_url: str
) -> None:
    engine = create_engine("llama-server", drafting_servers["slots"].url, timeout_s=60.0)
    base = create_engine("llama-server", llama_url, timeout_s=60.0)
    try:
        info = engine.info()
        base_info = base.info()
    finally:
        engine.close()
        base.close()
    assert info.speculative is True and dict(info.settings)["speculative_source"] == "/slots"
    assert "drafts (GET /slots: speculative true)" in info.warnings[0]
    assert base_info.speculative is False and base_info.warnings == ()


def test_draft_counts_in_llama_server_timings_move_the_series(
    drafting_servers: dict[str, ServerProcess]
) -> None:
    engine = create_engine("llama-server", drafting_servers["no-slots"].url, timeout_s=60.0)
    try:
        assert engine.info().speculative is False  # /slots answers 501: not known yet
        result = run_workload(engine, WORKLOAD)
    finally:
        engine.close()
    assert all(s.speculative and s.draft_tokens for s in result.samples)
    assert result.engine.speculative is True and OBSERVED in dict(result.engine.settings)
    assert series_of("t", result, None).speculative is True
