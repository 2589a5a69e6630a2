"""A stream that ends before the engine's documented end marker fails its repetition.

mlx_lm.server killed after 7 of 32 tokens used to pass with a note ("asked for 32
tokens, got [7]"). Each engine's end marker (``/completion``'s ``stop: true``, Ollama's
``done: true``, OpenAI-style ``finish_reason`` or ``data: [DONE]``, SGLang's
``meta_info.finish_reason``) must arrive, else the repetition fails, the message names
the engine and the last event, and the repetitions measured before are recorded.
"""

from __future__ import annotations

import sqlite3

import pytest
from tests.support.fake_faults import SHORT_TOKENS, FakeFaultyLlama, FakeKilledMLX

from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.results import GenerationRequest


def test_an_openai_style_stream_without_its_end_fails() -> None:
    with FakeKilledMLX(healthy=0) as fake:
        engine = create_engine("mlx", fake.url, timeout_s=10.0)
        try:
            with pytest.raises(EngineProtocolError) as caught:
                engine.generate(GenerationRequest(prompt_tokens=4, generate_tokens=32,
                                                  timeout_s=10.0))
        finally:
            engine.close()
    message = str(caught.value)
    assert f"mlx at {fake.url}/v1/completions: the stream ended after {SHORT_TOKENS} of 32 " \
           f"tokens without a finish_reason or data: [DONE]" in message
    assert "the last event" in message and "this repetition failed" in message


def test_a_completion_stream_without_its_stop_event_fails() -> None:
    with FakeFaultyLlama("short") as fake:
        engine = create_engine("llama-server", fake.url, timeout_s=10.0)
        try:
            with pytest.raises(EngineProtocolError) as caught:
                engine.generate(GenerationRequest(prompt_tokens=4, generate_tokens=32,
                                                  timeout_s=10.0))
        finally:
            engine.close()
    message = str(caught.value)  # it said only "URL closed the stream without a final event"
    assert message.startswith(f"llama-server at {fake.url}/completion: the stream ended after "
                              f"{SHORT_TOKENS} of 32 tokens without a final (stop) event "
                              f"(the last event: {{"), message
    assert "this repetition failed" in message


BENCH = """
def test_bench(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=32, repetitions=4, warmup=0)
"""


def test_a_killed_engine_is_never_a_pass_and_what_was_measured_is_kept(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BENCH)
    with FakeKilledMLX(healthy=3) as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-engine", "mlx",
                                    "--tokperf-bandwidth", "30GB/s", "--tokperf-db", "r.db")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*the stream ended after {SHORT_TOKENS} of 32 tokens*"])
    assert "INTERNALERROR" not in result.stdout.str()
    with sqlite3.connect(pytester.path / "r.db") as db:
        rows = db.execute("SELECT verdict FROM results").fetchall()
        samples = db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert rows == [("error",)] and samples == 2, (rows, samples)
