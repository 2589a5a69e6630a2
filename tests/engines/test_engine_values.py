"""What an engine reports is checked before it is used (``engines.values``).

A wrong type, NaN, +-Infinity, a huge or negative number in an engine's answer used to
crash the run (TypeError, AttributeError, OverflowError) or pass as a figure (an
Infinity decode time became an engine decode of 0.00 tok/s). Now each one is refused
with a one-line ``EngineProtocolError`` naming the engine, the URL and the field, or
dropped with a note while the client's measurement stands.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from pytest_tokperf.bench.measure import MeasureOptions, run_workload, to_sample
from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.engines.lmstudio import chat_end_timings, size_label_count
from pytest_tokperf.engines.ollama import Ollama
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.engines.sglang import SGLang
from pytest_tokperf.engines.speed_settings import parse_props
from pytest_tokperf.engines.values import (
    MAX_TOKENS,
    Fields,
    Unusable,
    checked_timings,
    count_of,
    seconds_of,
)
from pytest_tokperf.engines.vllm import histograms
from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.results import (
    EngineTimings,
    Generation,
    GenerationRequest,
    Workload,
)

URL = "http://engine.test"
SSE = {"content-type": "text/event-stream"}
Handler = Callable[[httpx.Request], httpx.Response]


def paced(events: list[dict[str, Any]]) -> Iterator[bytes]:
    for event in events:
        time.sleep(0.002)  # apart, so the client can time the decode
        yield f"data: {json.dumps(event)}\n\n".encode()


def stream(events: list[dict[str, Any]], ndjson: bool = False) -> httpx.Response:
    if ndjson:
        return httpx.Response(200, text="".join(json.dumps(e) + "\n" for e in events),
                              headers={"content-type": "application/x-ndjson"})
    return httpx.Response(200, text="".join(f"data: {json.dumps(e)}\n\n" for e in events),
                          headers=SSE)


def llama(timings: Any = None, props: dict[str, Any] | None = None,
          n_vocab: Any = 1000) -> LlamaServer:
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "meta": {"n_vocab": n_vocab}}]})
        if path == "/props":
            return httpx.Response(200, text=json.dumps(
                props if props is not None else {"build_info": "b1-abc", "total_slots": 1}))
        if path == "/completion":
            asked = json.loads(request.content)["n_predict"]
            events: list[dict[str, Any]] = [{"content": "a", "tokens": [5], "stop": False}
                                            for _ in range(asked)]
            events.append({"content": "", "tokens": [], "stop": True, "stop_type": "limit",
                           "timings": timings})
            return httpx.Response(200, content=paced(events), headers=SSE)
        return httpx.Response(404)

    return LlamaServer(URL, transport=httpx.MockTransport(handler))


def measure(engine: Any, generate_tokens: int = 4) -> Any:
    return run_workload(engine, Workload(4, generate_tokens, repetitions=2, warmup=0),
                        MeasureOptions(sample_load=False))


def one_line(message: str) -> None:
    assert message and "\n" not in message and "Traceback" not in message


# -- the defects as reported ---------------------------------------------------------


def test_props_build_info_as_a_list_is_refused_naming_engine_url_and_field() -> None:
    engine = llama(props={"build_info": ["b1"], "total_slots": 1})
    with pytest.raises(EngineProtocolError) as caught:  # was TypeError in re.match
        engine.info()
    message = str(caught.value)
    one_line(message)
    assert message.startswith(f"llama-server at {URL}/props: build_info is ['b1'] (a list, "
                              f"not text), not what llama-server sends; check that "
                              f"--tokperf-url points at llama-server"), message


def test_a_nan_decode_time_is_dropped_with_a_note_and_the_client_figure_kept() -> None:
    result = measure(llama({"prompt_n": 4, "prompt_ms": 2.0, "predicted_n": 4,
                            "predicted_ms": float("nan")}))  # was AttributeError
    assert result.engine_decode_tokens_per_s is None
    assert result.decode_tokens_per_s is not None  # the client's measurement stands
    assert result.judged_decode_tokens_per_s is result.decode_tokens_per_s
    assert result.engine_prefill_tokens_per_s is not None  # its other figures stand too
    note = next(n for n in result.notes if "unusable" in n)
    assert note == (f"llama-server at {URL} sent unusable values in 2 of 2 responses "
                    f"(timings.predicted_ms=nan (not a finite number)): the engine's own "
                    f"figures from them were dropped and the client's measurement kept")


def test_a_huge_generated_count_is_dropped_not_an_overflow() -> None:
    result = measure(llama({"predicted_n": 10**400, "predicted_ms": 5.0}))  # was OverflowError
    assert result.engine_decode_tokens_per_s is None
    assert [s.generated_tokens for s in result.samples] == [4, 4]  # the tokens streamed
    assert any("timings.predicted_n=1000000000000000000000000000000000000..."
               " (more than 4)" in n for n in result.notes), result.notes


def test_an_infinite_decode_time_is_not_an_engine_decode_of_zero() -> None:
    result = measure(llama({"predicted_n": 4, "predicted_ms": float("inf")}))
    assert result.engine_decode_tokens_per_s is None  # was Summary(median=0.0, ...)
    assert all(s.engine_decode_tokens_per_s is None for s in result.samples)
    assert any("timings.predicted_ms=inf (not a finite number)" in n for n in result.notes)


# -- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "why"), [
    (True, "a boolean, not a number"), ("12", "text, not a number"),
    ([1], "a list, not a number"), ({"n": 1}, "an object, not a number"),
    (float("nan"), "not a finite number"), (float("-inf"), "not a finite number"),
    (1.5, "not a whole number"), (-1, "negative"), (10**400, "more than 9007199254740992"),
    (1e300, "more than 9007199254740992"),
])
def test_counts_are_whole_finite_and_in_range(value: object, why: str) -> None:
    with pytest.raises(Unusable, match=f"^{why}$"):
        count_of(value)


def test_a_whole_float_is_a_count_and_durations_convert_units() -> None:
    assert count_of(12.0) == 12 and count_of(0) == 0
    assert seconds_of(2500, per_s=1e3) == 2.5 and seconds_of(0.0) == 0.0
    with pytest.raises(Unusable, match="longer than 86400 s"):
        seconds_of(1e308, per_s=1e3)
    with pytest.raises(Unusable, match="too large"):
        seconds_of(10**400)


def test_absent_and_null_are_not_said_and_dropped_values_are_noted() -> None:
    said = Fields("ollama", URL, {"a": None, "b": "x", "c": 3, "d": [1]}, "final")
    assert said.count("a") is None and said.count("missing") is None and said.notes == []
    assert said.count("b") is None and said.count("c") == 3 and said.text("d") is None
    assert said.inside("c").raw == {}
    assert said.notes == ["final.b='x' (text, not a number)", "final.d=[1] (a list, not text)",
                          "final.c=3 (a number, not an object)"]


def test_accepted_draft_tokens_above_the_drafted_are_dropped() -> None:
    timings = Fields("vllm", URL, {}).timings(EngineTimings(draft_tokens=2,
                                                            draft_accepted_tokens=5))
    assert (timings.draft_tokens, timings.draft_accepted_tokens) == (2, None)
    assert timings.dropped == ("5 accepted draft tokens, more than the 2 drafted",)


def test_a_registered_adapters_timings_are_held_to_the_same_rules() -> None:
    request = GenerationRequest(prompt_tokens=4, generate_tokens=3)
    timings = EngineTimings(prompt_tokens=4, prefill_s=-1.0, generated_tokens=3,
                            decode_s=math.inf)
    generation = Generation(request=request, sent_s=0.0, chunk_times_s=(0.1, 0.2, 0.3),
                            chunk_tokens=(1, 1, 1), generated_tokens=3, prompt_tokens=4,
                            text="abc", stop_reason=None, engine=timings)
    sample = to_sample(generation)
    assert sample.engine_decode_tokens_per_s is None and sample.engine_prefill_s is None
    assert sample.decode_tokens_per_s == pytest.approx(10.0)
    assert checked_timings(timings, 3).dropped == ("prefill_s=-1.0 (negative)",
                                                   "decode_s=inf (not a finite number)")


# -- each adapter ----------------------------------------------------------------------


def test_llama_server_props_values_of_the_wrong_type_are_left_unknown_with_a_warning() -> None:
    info = llama(props={"build_info": "b1-abc", "total_slots": True, "model_path": ["/m"],
                        "default_generation_settings": {"n_ctx": float("inf")}}).info()
    assert info.context_size is None and info.model_path is None
    assert dict(info.settings)["total_slots"] == "None"
    assert info.warnings == ((
        f"llama-server at {URL}/props sent unusable values, left unknown: total_slots=True "
        f"(a boolean, not a number); model_path=['/m'] (a list, not text); "
        f"default_generation_settings.n_ctx=inf (not a finite number)"),)


def test_props_settings_take_no_boolean_or_negative_slots() -> None:
    settings = parse_props({"total_slots": True, "default_generation_settings": {"n_ctx": -5}})
    assert (settings.parallel, settings.context_size) == (None, None)


def test_a_vocabulary_size_that_cannot_make_a_prompt_is_refused() -> None:
    for n_vocab, why in ((1.5, "not a whole number"), (2, "too few tokens")):
        with pytest.raises(EngineProtocolError, match=f"data\\[0\\]\\.meta\\.n_vocab is .* "
                                                      f"\\({why}"):
            llama(n_vocab=n_vocab).generate(GenerationRequest(prompt_tokens=2,
                                                              generate_tokens=2))


def ollama(final: dict[str, Any], version: Any = "0.12.3") -> Ollama:
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/version":
            return httpx.Response(200, text=json.dumps({"version": version}))
        if path == "/api/show":
            return httpx.Response(200, json={"details": {"family": ["x"]}, "parameters": [1]})
        if path in ("/api/ps", "/api/tags"):
            return httpx.Response(200, json={"models": [
                {"name": "m:latest", "size": 100, "size_vram": 400, "context_length": "x"}]})
        if path == "/api/generate":
            return stream([{"response": "a", "done": False}] * 3
                          + [{"response": "", "done": True, **final}], ndjson=True)
        return httpx.Response(404)

    return Ollama(URL, model="m", transport=httpx.MockTransport(handler))


def test_ollama_unusable_durations_and_counts_are_dropped_with_a_note() -> None:
    engine = ollama({"prompt_eval_count": 4, "prompt_eval_duration": -5,
                     "eval_count": 3, "eval_duration": float("nan"), "done_reason": 7})
    generation = engine.generate(GenerationRequest(prompt_tokens=4, generate_tokens=3))
    timings = generation.engine
    assert timings is not None and (timings.prefill_s, timings.decode_s) == (None, None)
    assert timings.generated_tokens == 3 and generation.stop_reason is None
    assert timings.dropped == ("done_reason=7 (a number, not text)",
                               "prompt_eval_duration=-5 (negative)",
                               "eval_duration=nan (not a finite number)")


def test_ollama_omitted_fields_are_still_zero() -> None:
    generation = ollama({}).generate(GenerationRequest(prompt_tokens=4, generate_tokens=3))
    assert generation.engine == EngineTimings(prompt_tokens=0, prefill_s=0.0,
                                              generated_tokens=0, decode_s=0.0)


def test_ollama_info_refuses_a_version_that_is_not_text_and_warns_on_the_rest() -> None:
    with pytest.raises(EngineProtocolError, match=f"^ollama at {URL}/api/version: version is "
                                                  f"0.5 \\(a number, not text\\)"):
        ollama({}, version=0.5).info()
    info = ollama({}).info()
    assert info.context_size is None and "gpu_share" not in dict(info.settings)
    assert info.warnings == ((
        f"ollama at {URL} sent unusable values, left unknown: details.family=['x'] (a list, "
        f"not text); models[0].context_length='x' (text, not a number); models[0].size_vram"
        f"=400 (more than its size, 100)"),)


def sglang(meta: list[dict[str, Any]]) -> SGLang:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            events: list[dict[str, Any]] = [{"text": "a" * (i + 1), "meta_info": m}
                                            for i, m in enumerate(meta)]
            return stream(events)
        return httpx.Response(404)

    return SGLang(URL, transport=httpx.MockTransport(handler))


def test_sglang_running_counts_that_go_down_or_overshoot_fall_back_to_the_text() -> None:
    meta = [{"completion_tokens": 1}, {"completion_tokens": 10**9},
            {"completion_tokens": 0}, {"completion_tokens": 4, "finish_reason": "length",
                                        "prompt_tokens": -1}]
    generation = sglang(meta).generate(GenerationRequest(prompt_tokens=4, generate_tokens=4))
    assert generation.chunk_tokens == (1, 1, 1, 1) and generation.generated_tokens == 4
    assert generation.engine is not None and generation.engine.dropped == (
        "meta_info.completion_tokens=1000000000 (more than 4)",
        "meta_info.completion_tokens went down from 2 to 0",
        "meta_info.prompt_tokens=-1 (negative)")


def test_lmstudio_chat_end_stats_a_zero_rate_or_huge_ttft_is_dropped() -> None:
    stats = Fields("lmstudio", URL, {"total_output_tokens": 8, "tokens_per_second": 0,
                                     "time_to_first_token_seconds": 1e300,
                                     "input_tokens": 4}, "result.stats")
    timings = chat_end_timings(stats, 8)
    assert (timings.decode_s, timings.prefill_s, timings.generated_tokens) == (None, None, 8)
    assert timings.dropped == ("result.stats.tokens_per_second=0 (not above zero)",
                               ("result.stats.time_to_first_token_seconds=1e+300 (longer "
                                "than 86400 s)"))


def test_lmstudio_size_labels_beyond_any_model_are_unknown() -> None:
    assert size_label_count("7B") == 7_000_000_000
    assert size_label_count("9" * 400 + "T") is None


def test_vllm_metrics_lines_that_are_not_numbers_are_skipped() -> None:
    text = ("vllm:time_to_first_token_seconds_sum{m=\"a\"} e\n"
            "vllm:time_to_first_token_seconds_count{m=\"a\"} 2\n")
    assert histograms(text) == {"vllm:time_to_first_token_seconds_count": 2.0}


def test_token_counts_are_bounded_by_the_largest_context() -> None:
    said = Fields("vllm", URL, {"prompt_tokens": MAX_TOKENS + 1})
    assert said.tokens("prompt_tokens") is None
    assert said.notes == [f"prompt_tokens={MAX_TOKENS + 1} (more than {MAX_TOKENS})"]


def test_openai_running_usage_that_is_not_a_count_falls_back_to_one_per_chunk() -> None:
    chunks = [{"choices": [{"text": "a", "finish_reason": None}], "usage": usage}
              for usage in ({"completion_tokens": 1}, {"completion_tokens": "x"},
                            {"completion_tokens": 3})]
    final = {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": True},
             "metrics": {"generation_time_ms": float("-inf"),
                         "speculative_decoding": {"num_draft_tokens": 1,
                                                  "num_accepted_tokens": 2}}}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/completions":
            return stream([*chunks, {"choices": [{"text": "", "finish_reason": "length"}]},
                           final])
        return httpx.Response(200, json={"data": [{"id": "m"}]})

    engine = create_engine("openai", URL, transport=httpx.MockTransport(handler))
    generation = engine.generate(GenerationRequest(prompt_tokens=4, generate_tokens=3))
    assert generation.chunk_tokens == (1, 1, 1) and generation.generated_tokens == 3
    timings = generation.engine
    assert timings is not None and timings.decode_s is None and timings.prompt_tokens is None
    assert (timings.draft_tokens, timings.draft_accepted_tokens) == (1, None)
    assert timings.dropped == (
        "usage.completion_tokens='x' (text, not a number)",
        "usage.prompt_tokens=True (a boolean, not a number)",
        "metrics.generation_time_ms=-inf (not a finite number)",
        "2 accepted draft tokens, more than the 1 drafted")
