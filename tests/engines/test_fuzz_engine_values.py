"""Property-based fuzzing (hypothesis) of what engines answer, at the adapter level.

Each adapter talks to an ``httpx.MockTransport`` whose version/props/model answers and
final stream events carry hostile values: lists, objects, text, NaN, +-Infinity, huge
and negative numbers, booleans, null. The property: ``info()``, ``model_identity()``
and ``generate()`` either give values that are finite and in range, or refuse with
tokperf's own error carrying a one-line message; never another exception. A generation
also goes through ``to_sample`` and ``summarize`` (the figures a result is made of).
Example counts are small (the file runs in well under a minute on 2 cores);
``deadline=None`` because a shared CI core makes timing noisy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_tokperf.bench.measure import summarize, to_sample
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.engines.values import MAX_COUNT, MAX_SECONDS, MAX_TOKENS
from pytest_tokperf.errors import TokperfError
from pytest_tokperf.results import (
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    ModelInfo,
    Workload,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

URL = "http://engine.test"
ASKED = 3
REQUESTS = (GenerationRequest(prompt_tokens=4, generate_tokens=ASKED, timeout_s=10.0),
            GenerationRequest(prompt_tokens=4, generate_tokens=ASKED, timeout_s=10.0, chat=True))

HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-2**64, 2**64), st.sampled_from([10**400, -10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.lists(st.integers(-3, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "name"]), st.integers(-1, 3), max_size=2))


def either(good: st.SearchStrategy[Any], odds: int = 1) -> st.SearchStrategy[Any]:
    """A good value ``odds`` times for each hostile one (``one_of`` would flatten the
    branches and weigh each of HOSTILE's as much as ``good``)."""
    return st.integers(0, odds).flatmap(lambda pick: good if pick else HOSTILE)


def mostly(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A good value about three times in four (for what a run cannot do without)."""
    return either(good, 3)


COUNT = either(st.integers(0, 8))
MS = either(st.floats(0, 1e4))
TEXT = either(st.sampled_from(["b1-abc", "0.12.3", "length", "/m/model.gguf", ""]))
NAME = mostly(st.sampled_from(["b1-abc", "0.12.3", "1.52.1"]))


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with any of ``fields``."""
    return st.fixed_dictionaries({}, optional=fields)


def some(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An object with any of ``fields`` or, now and then, not an object at all."""
    return mostly(obj(**fields))


def sse(events: list[Any]) -> httpx.Response:
    lines = (e if isinstance(e, str) else json.dumps(e) for e in events)
    return httpx.Response(200, text="".join(f"data: {line}\n\n" for line in lines),
                          headers={"content-type": "text/event-stream"})


def ndjson(events: list[Any]) -> httpx.Response:
    return httpx.Response(200, text="".join(json.dumps(e) + "\n" for e in events),
                          headers={"content-type": "application/x-ndjson"})


def answer(routes: dict[str, Any]) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path not in routes:
            return httpx.Response(404, text="not found")
        route = routes[request.url.path]
        if isinstance(route, httpx.Response):
            return route
        if callable(route):
            return route(request)
        return httpx.Response(200, text=json.dumps(route))

    return handler


def one_line(message: str) -> None:
    assert message and "\n" not in message and "Traceback" not in message


def count_ok(value: object, most: int = MAX_COUNT) -> bool:
    return value is None or (type(value) is int and 0 <= value <= most)


def seconds_ok(value: object) -> bool:
    return value is None or (type(value) is float and 0 <= value <= MAX_SECONDS)


def text_ok(value: object) -> bool:
    return value is None or isinstance(value, str)


def figure_ok(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and math.isfinite(value))


def check_timings(timings: EngineTimings | None) -> None:
    if timings is None:
        return
    for name in ("prompt_tokens", "cached_prompt_tokens", "draft_tokens",
                 "draft_accepted_tokens"):
        assert count_ok(getattr(timings, name), MAX_TOKENS), (name, timings)
    assert count_ok(timings.generated_tokens, ASKED), timings
    assert seconds_ok(timings.prefill_s) and seconds_ok(timings.decode_s), timings
    assert figure_ok(timings.decode_tokens_per_s) and figure_ok(timings.prefill_tokens_per_s)
    assert all(isinstance(note, str) and "\n" not in note for note in timings.dropped)


def check_generation(generation: Generation) -> None:
    check_timings(generation.engine)
    assert type(generation.generated_tokens) is int and generation.generated_tokens >= 0
    assert count_ok(generation.prompt_tokens, MAX_TOKENS)
    assert text_ok(generation.stop_reason) and isinstance(generation.text, str)
    sample = to_sample(generation)
    for name in ("ttft_s", "prefill_tokens_per_s", "decode_tokens_per_s", "engine_prefill_s",
                 "engine_prefill_tokens_per_s", "engine_decode_tokens_per_s"):
        assert figure_ok(getattr(sample, name)), (name, sample)
    info = EngineInfo(name="fuzz", version=None, build=None, base_url=URL)
    result = summarize(Workload(4, ASKED, repetitions=1), info, [sample])
    assert all("\n" not in note for note in result.notes)


def check_info(info: EngineInfo) -> None:
    for name in ("version", "build", "backend", "model_path", "model_name"):
        assert text_ok(getattr(info, name)), (name, info)
    assert count_ok(info.context_size, MAX_TOKENS) and count_ok(info.threads)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in info.settings)
    assert all(isinstance(w, str) and "\n" not in w for w in info.warnings)


def check_model(model: ModelInfo | None) -> None:
    if model is None:
        return
    assert isinstance(model.file_name, str) and text_ok(model.path)
    assert text_ok(model.architecture) and text_ok(model.file_type)
    assert count_ok(model.file_bytes) and count_ok(model.parameter_count)
    assert count_ok(model.context_length, MAX_TOKENS)


def exercise(engine_name: str, routes: dict[str, Any], chat: bool, model: str | None = None,
             ) -> None:
    """Every call an adapter makes of an engine's answers: read, or refused in one line."""
    engine = create_engine(engine_name, URL, timeout_s=10.0, model=model,
                           transport=httpx.MockTransport(answer(routes)))
    calls: list[tuple[Callable[[], Any], Callable[[Any], None]]] = [
        (engine.info, check_info),
        (getattr(engine, "model_identity", lambda: None), check_model),
        (lambda: engine.generate(REQUESTS[chat]), check_generation),
    ]
    try:
        for call, check in calls:
            try:
                out = call()
            except TokperfError as exc:
                one_line(str(exc))
            else:
                check(out)
    finally:
        engine.close()


LLAMA_TIMINGS = some(prompt_n=COUNT, cache_n=COUNT, prompt_ms=MS, predicted_n=COUNT,
                     predicted_ms=MS, draft_n=COUNT, draft_n_accepted=COUNT)


@FAST
@given(props=mostly(st.fixed_dictionaries({"build_info": NAME}, optional={
           "total_slots": COUNT, "model_path": TEXT, "model_alias": TEXT, "model_ftype": TEXT,
           "default_generation_settings": some(n_ctx=COUNT,
                                               speculative=either(st.booleans()))})),
       meta=mostly(st.fixed_dictionaries({"n_vocab": mostly(st.integers(0, 3000))}, optional={
           "n_params": COUNT, "n_ctx_train": COUNT, "ftype": TEXT})),
       final=st.fixed_dictionaries({"stop": st.just(True)},
                                   optional={"timings": LLAMA_TIMINGS, "stop_type": TEXT,
                                             "tokens_predicted": COUNT,
                                             "tokens_evaluated": COUNT,
                                             "usage": some(prompt_tokens=COUNT,
                                                           completion_tokens=COUNT)}),
       content=mostly(st.just("a")), chat=st.booleans())
def test_llama_server_answers_are_read_or_refused(props: Any, meta: Any, final: dict[str, Any],
                                                  content: Any, chat: bool) -> None:
    tokens = [{"content": content, "tokens": [5], "stop": False}] * ASKED
    deltas = [{"choices": [{"delta": {"content": content}}]}] * ASKED
    exercise("llama-server", {
        "/props": props, "/slots": [{"speculative": False}],
        "/v1/models": {"data": [{"id": "m", "meta": meta}]},
        "/completion": sse([*tokens, final]),
        "/v1/chat/completions": sse([*deltas, final]),
    }, chat)


@FAST
@given(version=NAME,
       show=some(details=some(family=TEXT, quantization_level=TEXT, parameter_size=TEXT),
                 model_info=some(**{"general.architecture": TEXT,
                                    "general.parameter_count": COUNT,
                                    "llama.context_length": COUNT,
                                    "llama.nextn_predict_layers": COUNT}),
                 parameters=TEXT, modelfile=TEXT),
       entry=st.fixed_dictionaries({"name": st.just("m:latest")},
                                   optional={"size": COUNT, "size_vram": COUNT,
                                             "context_length": COUNT}),
       final=st.fixed_dictionaries({"done": st.just(True)},
                                   optional={"prompt_eval_count": COUNT,
                                             "prompt_eval_duration": either(
                                                 st.integers(0, 10**9)),
                                             "eval_count": COUNT,
                                             "eval_duration": either(st.integers(0, 10**9)),
                                             "done_reason": TEXT}),
       response=mostly(st.just("a")), chat=st.booleans())
def test_ollama_answers_are_read_or_refused(version: Any, show: Any, entry: dict[str, Any],
                                            final: dict[str, Any], response: Any,
                                            chat: bool) -> None:
    exercise("ollama", {
        "/api/version": {"version": version}, "/api/show": show,
        "/api/ps": {"models": [entry]}, "/api/tags": {"models": [entry]},
        "/api/generate": ndjson([*[{"response": response, "done": False}] * ASKED, final]),
    }, chat, model="m")


USAGE = some(prompt_tokens=COUNT, completion_tokens=COUNT,
             prompt_tokens_details=some(cached_tokens=COUNT))


def openai_stream(text: Any, running: list[Any], final: dict[str, Any]) -> httpx.Response:
    chunks = [{"choices": [{"text": text, "delta": {"content": text},
                            "finish_reason": None}], "usage": usage} for usage in running]
    return sse([*chunks, {"choices": [{"text": "", "finish_reason": "length"}]}, final,
                "[DONE]"])


@FAST
@given(version=NAME, card=some(max_model_len=COUNT, root=TEXT),
       tokens=either(st.lists(either(st.integers(0, 9)), min_size=4, max_size=6)),
       running=st.lists(USAGE, min_size=ASKED, max_size=ASKED),
       final=st.fixed_dictionaries({}, optional={
           "usage": USAGE, "system_fingerprint": TEXT, "timings": LLAMA_TIMINGS,
           "metrics": some(time_to_first_token_ms=MS, generation_time_ms=MS,
                           speculative_decoding=some(num_draft_tokens=COUNT,
                                                     num_accepted_tokens=COUNT))}),
       text=mostly(st.just("a")), chat=st.booleans())
def test_vllm_and_openai_answers_are_read_or_refused(version: Any, card: Any, tokens: Any,
                                                     running: list[Any], final: dict[str, Any],
                                                     text: Any, chat: bool) -> None:
    if isinstance(card, dict):
        card = {**card, "id": "m"}
    routes = {
        "/version": {"version": version}, "/v1/models": {"data": [card]},
        "/tokenize": {"tokens": tokens},
        "/v1/completions": openai_stream(text, running, final),
        "/v1/chat/completions": openai_stream(text, running, final),
    }
    exercise("vllm", routes, chat, model="m")
    exercise("openai", routes, chat)


@FAST
@given(probe=some(runtime=some(name=NAME, version=NAME),
                  model_info=some(arch=TEXT, quant=TEXT, context_length=COUNT),
                  stats=some(draft_model=TEXT)),
       v1=some(key=either(st.just("m")), size_bytes=COUNT, max_context_length=COUNT,
               params_string=either(st.sampled_from(["7B", "9" * 400 + "T", "1.5M"])),
               architecture=TEXT, quantization=some(name=TEXT),
               loaded_instances=either(st.lists(some(id=TEXT), max_size=2))),
       stats=some(total_output_tokens=COUNT, tokens_per_second=MS,
                  time_to_first_token_seconds=MS, input_tokens=COUNT),
       chat=st.booleans())
def test_lmstudio_answers_are_read_or_refused(probe: Any, v1: Any, stats: Any,
                                              chat: bool) -> None:
    deltas = [{"type": "message.delta", "content": "a"}] * ASKED
    exercise("lmstudio", {
        "/api/v0/models": {"data": [{"id": "m", "type": "llm", "state": "loaded"}]},
        "/v1/models": {"data": [{"id": "m"}]},
        "/api/v0/completions": probe, "/api/v1/models": {"models": [v1]},
        "/api/v1/chat": sse([*deltas, {"type": "chat.end", "result": {"stats": stats}}]),
        "/v1/completions": openai_stream("a", [None] * ASKED, {"usage": stats}),
    }, chat)


@FAST
@given(model_info=some(model_path=NAME, weight_version=either(st.just("v1"))),
       server=some(version=NAME, context_length=COUNT, served_model_name=TEXT, device=TEXT,
                   quantization=TEXT, speculative_algorithm=TEXT, tp_size=COUNT),
       meta=st.lists(some(completion_tokens=COUNT, prompt_tokens=COUNT, cached_tokens=COUNT,
                          finish_reason=either(some(type=TEXT)),
                          spec_verify_ct=COUNT, spec_accept_token_num=COUNT),
                     min_size=1, max_size=ASKED + 1),
       text=mostly(st.just("a")))
def test_sglang_answers_are_read_or_refused(model_info: Any, server: Any, meta: list[Any],
                                            text: Any) -> None:
    if isinstance(model_info, dict):
        model_info = {"model_path": "/m", **model_info}
    events = [{"text": text * (i + 1) if isinstance(text, str) else text, "meta_info": m}
              for i, m in enumerate(meta)]
    exercise("sglang", {
        "/get_model_info": model_info, "/get_server_info": server,
        "/generate": sse([*events, "[DONE]"]),
    }, False)


@FAST
@given(fingerprint=mostly(st.sampled_from(["0.32.0-0.29.1-macOS-15.5-arm64-applegpu_g15s",
                                           "1-2-3-4"])),
       choices=either(st.lists(some(text=TEXT), max_size=2)), usage=USAGE)
def test_mlx_answers_are_read_or_refused(fingerprint: Any, choices: Any, usage: Any) -> None:
    probe = {"system_fingerprint": fingerprint, "choices": choices, "usage": usage}

    def completions(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return openai_stream("a", [usage] * ASKED, {"usage": usage})
        return httpx.Response(200, text=json.dumps(probe))

    exercise("mlx", {"/health": {"status": "ok"}, "/v1/completions": completions}, False)
