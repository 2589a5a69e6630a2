"""The real mlx_lm.server (mlx's CPU backend here) serving a generated Hugging Face folder:
started once for the module on loopback, then attached to through the plugin."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.engines.speed_settings import placement_of
from pytest_tokperf.errors import ConfigError, EngineProtocolError
from pytest_tokperf.model.hf_file import load_hf
from pytest_tokperf.model.hf_writer import cached_hf_model
from pytest_tokperf.model.spec import ENGINES_MODEL
from pytest_tokperf.results import GenerationRequest, Workload
from tests.support.real_engines import (
    BENCH_TESTS,
    cached_tokens,
    engine_python,
    missing,
    program,
    refused,
    start,
    stored,
)

pytestmark = [pytest.mark.mlx, pytest.mark.skipif(missing("mlx") is not None,
                                                  reason=missing("mlx") or "")]


@pytest.fixture(scope="module")
def model() -> Path:
    return cached_hf_model(ENGINES_MODEL)


@pytest.fixture(scope="module")
def binary() -> Path:
    """Found before pytester moves HOME (and so the tool's cache folder) away."""
    return program("mlx")


@pytest.fixture(scope="module")
def started(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineSession]:
    session = start("mlx", model, tmp_path_factory.mktemp("mlx"))
    url = session.engine().base_url
    yield session
    session.close()
    assert refused(url), f"mlx_lm.server at {url} still answers after close()"


def test_it_says_its_version_and_the_device_mlx_runs_on(started: EngineSession) -> None:
    info = started.engine().info()
    assert info.version == engine_python("mlx", "import importlib.metadata as m; "
                                                "print(m.version('mlx-lm'))")
    device = engine_python("mlx", "import mlx.core as mx; print(mx.default_device().type.name)")
    settings = dict(info.settings)
    assert settings["device"] == ("metal" if device == "gpu" else "cpu")
    assert placement_of(info).device is not None
    assert placement_of(info).device.kind == settings["device"]
    # mlx_lm.server has no threads, context or parallel flag: none is stored as applied
    assert not {"threads", "ctx_size", "parallel"} & set(settings)
    assert "--prompt-cache-size 0" in settings["clean_flags"]


@pytest.mark.parametrize("chat", [False, True], ids=["text", "chat"])
def test_every_streamed_token_is_one_the_engine_counted(started: EngineSession,
                                                        chat: bool) -> None:
    engine = started.engine()
    for salt in (11, 12):
        g = engine.generate(GenerationRequest(prompt_tokens=16, generate_tokens=24,
                                              salt=salt, chat=chat))
        assert g.engine is not None and g.engine.generated_tokens is not None
        assert sum(g.chunk_tokens) == g.generated_tokens == g.engine.generated_tokens
        assert g.engine.prompt_tokens is not None and g.engine.prompt_tokens > 0


def test_client_decode_agrees_with_the_engines_own_log(started: EngineSession) -> None:
    result = run_workload(started.engine(),
                          Workload(prompt_tokens=16, generate_tokens=96, repetitions=3, warmup=1),
                          MeasureOptions(salt_base=500))
    assert all(s.engine_decode_tokens_per_s for s in result.samples), "no mlx_lm log clock"
    assert result.decode_agreement is not None
    assert result.decode_agreement <= 0.02, result.notes


def test_a_warm_workload_is_refused_with_the_cache_off(started: EngineSession) -> None:
    with pytest.raises(ConfigError, match="cached_prefix_tokens=8. needs mlx's prompt cache, which is off .*"
                       "started with --prompt-cache-size 0"):
        run_workload(started.engine(), Workload(prompt_tokens=16, generate_tokens=4,
                                                cached_prefix_tokens=8, repetitions=1,
                                                warmup=0))


def test_the_default_engine_at_an_mlx_url_names_mlx(started: EngineSession) -> None:
    engine = create_engine("llama-server", started.engine().base_url)
    try:
        with pytest.raises(EngineProtocolError, match="does not answer as llama-server .*"
                           "GET /props failed.*it looks like mlx_lm.server.*"
                           "Pass --tokperf-engine mlx"):
            engine.ready()
            engine.info()
    finally:
        engine.close()


def test_attached_through_the_plugin_it_gets_a_ceiling_and_the_models_hash(
    pytester: pytest.Pytester, started: EngineSession, model: Path
) -> None:
    pytester.makepyfile(BENCH_TESTS)
    db = pytester.path / "r.db"
    result = pytester.runpytest("--tokperf-engine", "mlx", "--tokperf-url",
                                started.engine().base_url,
                                f"--tokperf-model={model / 'model.safetensors'}",
                                f"--tokperf-db={db}",
                                "--tokperf-bandwidth", "20GB/s", "-o", "tokperf_max_cv=0.99")
    result.assert_outcomes(passed=2)
    rows = stored(db)
    assert [r["test_id"].rsplit("::", 1)[1] for r in rows] == ["test_text", "test_chat"]
    for row in rows:
        assert row["efficiency"] and row["ceiling_decode_tokens_per_s"]
        assert row["model_content_hash"] == load_hf(model).content_hash
        assert json.loads(row["engine_settings"])["device"] in ("cpu", "metal")
        assert "cached prompt tokens" not in (row["notes"] or "")


TWICE = """
def test_a(tok_bench):
    tok_bench(prompt_tokens=24, generate_tokens=32, repetitions=2, warmup=1)

def test_b(tok_bench):
    tok_bench(prompt_tokens=24, generate_tokens=32, repetitions=2, warmup=1)
"""
"""32 tokens, not 8: mlx_lm streams a chunk only when its detokenizer has new text and
holds back byte tokens that are not yet UTF-8, so 8 tokens of the random model arrived
with no text at all in about 1 run in 5 (no per-token timing: the repetition fails)."""


def test_the_plugin_starts_it_and_no_test_reuses_anothers_prompt(
    pytester: pytest.Pytester, model: Path, binary: Path
) -> None:
    """With mlx_lm's prompt cache on, two tests of one workload are both cold: each has
    its own salts (with one salt sequence per test, test_b's prompts were test_a's)."""
    pytester.makepyfile(TWICE)
    db = pytester.path / "r.db"
    result = pytester.runpytest("--tokperf-engine", "mlx", f"--tokperf-model={model}",
                                f"--tokperf-server-bin={binary}",
                                "--tokperf-server-arg=--prompt-cache-size=10",
                                f"--tokperf-db={db}", "--tokperf-bandwidth", "20GB/s",
                                "-o", "tokperf_max_cv=0.99")
    result.assert_outcomes(passed=2)
    cached = cached_tokens(db)
    # at most the tokens of the tags' first character can match (wire.salt_head: with
    # tags all from the digest, 1 of 56 runs here had a repetition sharing 2)
    assert len(cached) == 4 and all(c is not None and c <= 1 for c in cached), cached
    rows = stored(db)
    assert all(r["efficiency"] for r in rows)
    assert not any("cached prompt tokens" in (r["notes"] or "") for r in rows)


def test_a_server_killed_mid_stream_fails_the_generation(started: EngineSession) -> None:
    # last in the module: it kills the module's server (its teardown then finds it gone)
    from pytest_tokperf.errors import EngineError
    from tests.support.real_engines import killed_mid_stream

    raised = killed_mid_stream(started, tokens=1000, after_s=0.5)  # 0.5 s after the first token
    assert isinstance(raised, EngineError), repr(raised)
    assert "mlx" in str(raised)
