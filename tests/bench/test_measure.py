"""Measurement arithmetic and the llama-server adapter's wire handling, without a server."""

from __future__ import annotations

import json
from dataclasses import replace
import re
import statistics

import httpx
import pytest

from pytest_tokperf.engines.llama_server.adapter import LlamaServer, parse_build, prompt_token_ids
from pytest_tokperf.errors import ConfigError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.bench.measure import (
    MeasureOptions,
    decode_interval,
    is_unstable,
    run_workload,
    summarize,
    to_sample,
    validate_workload,
)
from pytest_tokperf.results import (
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    Workload,
)

SSE = {"content-type": "text/event-stream"}
INFO = EngineInfo(name="llama-server", version="b1", build="b1-x", base_url="http://h")


def _generation(times: list[float], tokens: list[int], *, sent: float = 0.0, generated: int | None = None,
                engine: EngineTimings | None = None, asked: int = 5) -> Generation:
    return Generation(
        request=GenerationRequest(prompt_tokens=10, generate_tokens=asked),
        sent_s=sent, chunk_times_s=tuple(times), chunk_tokens=tuple(tokens),
        generated_tokens=sum(tokens) if generated is None else generated,
        prompt_tokens=10, text="abcde", stop_reason="limit", engine=engine,
    )


def test_decode_excludes_first_token() -> None:
    # 5 tokens, first at 0.5 s, then one every 0.1 s: 4 intervals in 0.4 s -> 10 tok/s.
    sample = to_sample(_generation([0.5, 0.6, 0.7, 0.8, 0.9], [1] * 5))
    assert sample.ttft_s == pytest.approx(0.5)
    assert sample.decode_tokens_per_s == pytest.approx(10.0)
    assert sample.prefill_tokens_per_s == pytest.approx(20.0)
    assert sample.inter_token_s == pytest.approx((0.1, 0.1, 0.1, 0.1))


def test_multi_token_chunks_count_tokens_not_chunks() -> None:
    # First chunk 2 tokens at 0.5 s, then 3 tokens arrive in one chunk at 0.8 s.
    sample = to_sample(_generation([0.5, 0.8], [2, 3]))
    assert sample.decode_tokens_per_s == pytest.approx(3 / 0.3)
    assert sample.inter_token_s == pytest.approx((0.1,))


def test_engine_figures_use_n_minus_one() -> None:
    timings = EngineTimings(prompt_tokens=10, cached_prompt_tokens=0, prefill_s=0.25,
                            generated_tokens=5, decode_s=0.4)
    sample = to_sample(_generation([0.3, 0.4, 0.5, 0.6, 0.7], [1] * 5, engine=timings))
    assert sample.engine_decode_tokens_per_s == pytest.approx(10.0)
    assert sample.engine_prefill_tokens_per_s == pytest.approx(40.0)


def test_summary_notes_short_cached_speculative_and_disagreement() -> None:
    timings = EngineTimings(prompt_tokens=10, cached_prompt_tokens=4, prefill_s=0.2,
                            generated_tokens=4, decode_s=0.15, draft_tokens=3)
    samples = [to_sample(_generation([0.3, 0.4, 0.5, 0.6], [1] * 4, engine=timings)) for _ in range(3)]
    result = summarize(Workload(10, 5, repetitions=3), INFO, samples)
    joined = " | ".join(result.notes)
    assert "asked for 5 tokens, got [4] in 3 of 3 repetitions" in joined
    assert "reused 4 cached prompt tokens" in joined
    assert "speculative decoding was active" in joined
    assert "client and engine decode tok/s differ by 50.0%" in joined
    assert result.ttft_minus_engine_prefill_s == pytest.approx(0.1)
    assert result.decode_tokens_per_s is not None and result.decode_tokens_per_s.n == 3


def test_burst_delivery_is_named_as_a_starved_reader_or_sender() -> None:
    # The engine took 0.4 s for 4 tokens after the first; the client saw all five
    # within 40 ms: it was not reading, or the server not sending, while the engine
    # generated.
    timings = EngineTimings(prompt_tokens=10, cached_prompt_tokens=0, prefill_s=0.29,
                            generated_tokens=5, decode_s=0.4)
    samples = [to_sample(_generation([0.70, 0.71, 0.72, 0.73, 0.74], [1] * 5, engine=timings))] * 2
    joined = " | ".join(summarize(Workload(10, 5, repetitions=2), INFO, samples).notes)
    assert "differ by 900.0%" in joined
    assert "read tokens in bursts" in joined and "--tokperf-threads" in joined
    assert "the server's HTTP front end" in joined


def test_clean_summary_has_no_notes() -> None:
    timings = EngineTimings(prompt_tokens=10, cached_prompt_tokens=0, prefill_s=0.29,
                            generated_tokens=5, decode_s=0.4)
    samples = [to_sample(_generation([0.3, 0.4, 0.5, 0.6, 0.7], [1] * 5, engine=timings))] * 2
    result = summarize(Workload(10, 5, repetitions=2), INFO, samples)
    assert result.notes == ()
    assert result.decode_agreement == pytest.approx(0.0)


@pytest.mark.parametrize(("workload", "message"), [
    (Workload(0, 5), "prompt_tokens=0 is not a whole number >= 1"),
    (Workload(5, 1), "generate_tokens=1 is not a whole number >= 2"),
    (Workload(5, 5, repetitions=0), "repetitions=0"),
    (Workload(5, 5, warmup=-1), "warmup=-1"),
    (Workload(5, 5, concurrency=0), "concurrency=0"),
    (Workload(5, 5, cached_prefix_tokens=-1), "cached_prefix_tokens=-1"),
    (Workload(5, 5, depth_tokens=3, cached_prefix_tokens=8),
     "cached_prefix_tokens=8 must be below depth + prompt (3 + 5 = 8)"),
])
def test_bad_workloads(workload: Workload, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_workload(workload)


def test_prompt_ids_exact_length_unique_start() -> None:
    a, b = prompt_token_ids(50, 8192, salt=1), prompt_token_ids(50, 8192, salt=2)
    assert len(a) == 50 and a[:3] != b[:3]
    assert all(259 <= t < 8192 for t in a)
    assert prompt_token_ids(50, 8192, salt=1) == a


def test_parse_build() -> None:
    assert parse_build("b11434-pypi-sdist") == ("b11434", "pypi-sdist")
    assert parse_build("custom") == ("custom", None)
    assert parse_build(None) == (None, None)


def _server(handler) -> LlamaServer:  # type: ignore[no-untyped-def]
    return LlamaServer("http://llama.test", transport=httpx.MockTransport(handler))


def _models(request: httpx.Request) -> httpx.Response | None:
    if request.url.path == "/v1/models":
        return httpx.Response(200, json={"data": [{"id": "m", "meta": {"n_vocab": 1000}}]})
    return None


def test_stream_parsed_with_final_timings() -> None:
    events = [{"content": "a", "tokens": [5], "stop": False},
              {"content": "bc", "tokens": [6, 7], "stop": False},
              {"content": "", "tokens": [], "stop": True, "stop_type": "limit",
               "timings": {"prompt_n": 4, "cache_n": 0, "prompt_ms": 20.0,
                           "predicted_n": 3, "predicted_ms": 10.0}}]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events)

    def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content) if request.content else {}
        if request.url.path == "/completion":
            assert sent["ignore_eos"] is True and sent["cache_prompt"] is False
            assert sent["n_predict"] == 3 and len(sent["prompt"]) == 4
            return httpx.Response(200, text=": ping\n\n" + body,
                                  headers={"content-type": "text/event-stream"})
        return _models(request) or httpx.Response(404)

    g = _server(handler).generate(GenerationRequest(prompt_tokens=4, generate_tokens=3))
    assert g.chunk_tokens == (1, 2) and g.generated_tokens == 3 and g.text == "abc"
    assert g.engine is not None and g.engine.prefill_s == pytest.approx(0.02)
    assert g.engine.decode_tokens_per_s == pytest.approx(200.0)
    assert g.stop_reason == "limit"


@pytest.mark.parametrize(("response", "message"), [
    (httpx.Response(200, text="<html>nginx</html>", headers={"content-type": "text/html"}),
     "answered with an HTML page, not the engine.s JSON; is --tokperf-url the engine itself"),
    (httpx.Response(200, json={"content": "all at once"}),
     "answered one JSON document, not a stream"),
    (httpx.Response(200, text="data: <html>\n\n", headers=SSE), "not JSON: '<html>'"),
    (httpx.Response(200, text='data: {"error": {"code": 500, "message": "boom"}}\n\n', headers=SSE),
     "reported an error"),
    (httpx.Response(200, text='data: {"content": "a", "tokens": [1], "stop": false}\n\n', headers=SSE),
     "without a final (stop) event"),
    (httpx.Response(404, text="File Not Found"), "answered HTTP 404"),
])
def test_bad_engine_answers(response: httpx.Response, message: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return _models(request) or response

    pattern = message if ".s JSON" in message else message.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(EngineProtocolError, match=pattern):
        _server(handler).generate(GenerationRequest(prompt_tokens=2, generate_tokens=2))


def test_props_of_another_engine_is_named() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"version": "0.5.1"})

    with pytest.raises(EngineProtocolError, match="does not answer as llama-server .no build_info"
                       ".*it looks like Ollama 0.5.1"):
        _server(handler).info()


def test_connection_refused_is_engine_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    server = _server(handler)
    assert server.ready() is False
    with pytest.raises(EngineUnavailable, match="cannot reach http://llama.test/props"):
        server.info()


def test_aggregate_is_all_output_over_wall_time() -> None:
    from pytest_tokperf.bench.measure import aggregate_tokens_per_s

    a = _generation([0.5, 0.6, 0.7], [1, 1, 1], sent=0.0)
    b = _generation([0.6, 0.8, 1.0], [1, 1, 1], sent=0.1)
    assert aggregate_tokens_per_s([a, b]) == pytest.approx(6 / 1.0)
    assert aggregate_tokens_per_s([_generation([], [], generated=0)]) is None


class _PrefixCacheEngine:
    """An in-process engine with a one-entry prefix cache keyed by salt, like a slot."""

    def __init__(self, serve: bool = True) -> None:
        self.requests: list[GenerationRequest] = []
        self.cached: tuple[int, int] | None = None  # (salt, tokens) left by the last request
        self.serve = serve

    def info(self) -> EngineInfo:
        return INFO

    def generate(self, request: GenerationRequest) -> Generation:
        self.requests.append(request)
        hit = 0
        if self.serve and request.reuse_prefix and self.cached and self.cached[0] == request.salt:
            hit = min(self.cached[1], request.prompt_tokens - 1)
        self.cached = (request.salt, request.prompt_tokens)
        n = request.generate_tokens
        timings = EngineTimings(prompt_tokens=request.prompt_tokens - hit, cached_prompt_tokens=hit,
                                prefill_s=0.1, generated_tokens=n, decode_s=0.1 * (n - 1))
        return Generation(request=request, sent_s=0.0,
                          chunk_times_s=tuple(0.1 + 0.1 * i for i in range(n)),
                          chunk_tokens=(1,) * n, generated_tokens=n,
                          prompt_tokens=request.prompt_tokens - hit, text="x" * n,
                          stop_reason="limit", engine=timings)


def test_warm_prefix_primes_each_repetition_with_the_same_salt() -> None:
    engine = _PrefixCacheEngine()
    workload = Workload(prompt_tokens=40, generate_tokens=4, depth_tokens=100,
                        cached_prefix_tokens=120, repetitions=2, warmup=1)
    result = run_workload(engine, workload)  # type: ignore[arg-type]
    sent = [(r.prompt_tokens, r.generate_tokens, r.reuse_prefix) for r in engine.requests]
    assert sent == [(120, 1, True), (140, 4, True)] * 3
    salts = [r.salt for r in engine.requests]
    assert salts[0] == salts[1] != salts[2] == salts[3]
    assert [s.cached_prompt_tokens for s in result.samples] == [120, 120]
    # Prefill counts the 20 tokens the engine processed, not the 140 it was sent.
    assert [s.prompt_tokens for s in result.samples] == [20, 20]
    assert result.notes == ()


def test_cold_workload_never_offers_the_cache() -> None:
    engine = _PrefixCacheEngine()
    run_workload(engine, Workload(prompt_tokens=40, generate_tokens=4, repetitions=2))  # type: ignore[arg-type]
    assert [(r.prompt_tokens, r.reuse_prefix) for r in engine.requests] == [(40, False)] * 3


def test_warm_prefix_the_engine_did_not_serve_is_noted() -> None:
    engine = _PrefixCacheEngine(serve=False)
    result = run_workload(engine, Workload(prompt_tokens=40, generate_tokens=4,  # type: ignore[arg-type]
                                           cached_prefix_tokens=32, repetitions=2))
    assert any("served only 0 of 32 primed prefix tokens" in n for n in result.notes), result.notes



def test_reasoning_chunks_are_counted_apart_and_the_answer_wait_measured() -> None:
    g = _generation([0.5, 0.6, 0.7, 0.8, 0.9], [1, 2, 1, 1, 1])
    g = Generation(**{**{f: getattr(g, f) for f in g.__dataclass_fields__},
                      "chunk_reasoning": (True, True, True, False, False)})
    sample = to_sample(g)
    assert sample.reasoning_tokens == 4 and sample.answer_ttft_s == pytest.approx(0.8)
    result = summarize(Workload(10, 6, repetitions=1, chat=True), INFO, [sample])
    assert "4 of 6 generated tokens were reasoning (median); first answer token after 0.80 s" in result.notes
    plain = to_sample(_generation([0.5, 0.6], [1, 1]))
    assert plain.reasoning_tokens is None and plain.answer_ttft_s is None


def test_chat_needs_an_engine_that_has_a_chat_route() -> None:
    class RawOnly:
        def info(self) -> EngineInfo:
            return EngineInfo(name="ollama", version="0.9", build=None, base_url="http://o")

    with pytest.raises(ConfigError, match="chat workloads .chat=True. are not built for ollama yet"):
        run_workload(RawOnly(), Workload(8, 4, chat=True))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="chat='yes' must be True or False"):
        validate_workload(Workload(8, 4, chat="yes"))  # type: ignore[arg-type]


def test_chat_stream_tells_thinking_from_answer() -> None:
    def chunk(**delta: str) -> dict[str, object]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}

    events = [chunk(role="assistant"), chunk(reasoning_content="hmm"), chunk(reasoning_content=" ok"),
              chunk(content="Hi"), chunk(content="!"),
              {"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 30},
               "timings": {"prompt_n": 30, "cache_n": 0, "prompt_ms": 10.0,
                           "predicted_n": 4, "predicted_ms": 6.0}}]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    sent: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            sent.append(json.loads(request.content))
            return httpx.Response(200, text=body, headers=SSE)
        return _models(request) or httpx.Response(404)

    g = _server(handler).generate(GenerationRequest(prompt_tokens=20, generate_tokens=4, chat=True))
    assert sent[0]["max_tokens"] == 4 and sent[0]["ignore_eos"] is True
    assert sent[0]["messages"][0]["role"] == "user"  # type: ignore[index]
    assert g.chunk_reasoning == (True, True, False, False) and g.chunk_tokens == (1, 1, 1, 1)
    assert (g.generated_tokens, g.prompt_tokens, g.text) == (4, 30, "hmm okHi!")
    assert g.engine is not None and g.engine.decode_tokens_per_s == pytest.approx(500.0)


class _RateEngine:
    """An in-process engine whose n-th generation decodes at ``rates[n]`` tok/s (engine
    timing), or whose client clock alone says so when ``engine_timings`` is False."""

    def __init__(self, rates: list[float], engine_timings: bool = True) -> None:
        self.rates = list(rates)
        self.calls = 0
        self.engine_timings = engine_timings

    def info(self) -> EngineInfo:
        return INFO

    def generate(self, request: GenerationRequest) -> Generation:
        rate = self.rates[min(self.calls, len(self.rates) - 1)]
        self.calls += 1
        n = request.generate_tokens
        timings = EngineTimings(prompt_tokens=request.prompt_tokens, prefill_s=0.1,
                                generated_tokens=n, decode_s=(n - 1) / rate)
        return Generation(request=request, sent_s=0.0,
                          chunk_times_s=tuple(0.1 + i / rate for i in range(n)),
                          chunk_tokens=(1,) * n, generated_tokens=n,
                          prompt_tokens=request.prompt_tokens, text="x" * n,
                          stop_reason="limit", engine=timings if self.engine_timings else None)


ADAPTIVE = MeasureOptions(adaptive=True)


def test_decode_interval_is_the_t_interval_of_the_mean() -> None:
    assert decode_interval([10.0]) is None
    assert decode_interval([10.0, 10.0, 10.0]) == 0.0
    # n=4, mean 10, stdev 0.1: t(3) = 3.182 -> 3.182 * 0.1 / 2 / 10
    values = [9.9, 10.1, 9.9, 10.1]
    assert decode_interval(values) == pytest.approx(3.182 * statistics.stdev(values) / 2 / 10)


def test_adaptive_stops_at_the_minimum_on_a_quiet_series() -> None:
    engine = _RateEngine([30.0, 30.1, 29.9, 30.0, 30.05])  # the first is the warm-up
    result = run_workload(engine, Workload(8, 16, repetitions=10), ADAPTIVE)  # type: ignore[arg-type]
    assert engine.calls == 1 + 3 and result.workload.repetitions == 3 and len(result.samples) == 3
    assert result.notes == ()


def test_adaptive_runs_on_until_the_interval_is_reached() -> None:
    rates = [30.0, 30.0, 31.0, 29.0, 30.5, 29.5, 30.0, 30.2, 29.8]
    engine = _RateEngine(rates)
    result = run_workload(engine, Workload(8, 16, repetitions=10), ADAPTIVE)  # type: ignore[arg-type]
    n = result.workload.repetitions
    assert 3 < n < 10
    values = [s.engine_decode_tokens_per_s for s in result.samples]
    assert decode_interval(values) <= 0.02 < decode_interval(values[:-1])  # type: ignore[arg-type, operator]


class _BurstEngine(_RateEngine):
    """The engine timed its decode, but the client read every token in one burst."""

    def generate(self, request: GenerationRequest) -> Generation:
        generation = super().generate(request)
        return replace(generation, chunk_times_s=(0.2,) * len(generation.chunk_times_s))


def test_progress_shows_the_judged_decode_when_the_client_read_one_burst() -> None:
    lines: list[str] = []
    engine = _BurstEngine([30.0, 40.0])
    result = run_workload(engine, Workload(8, 16, repetitions=1),  # type: ignore[arg-type]
                          progress=lines.append)
    assert result.samples[0].decode_tokens_per_s is None  # no client rate from one burst
    assert [line.split(", TTFT")[0] for line in lines] == [
        "warm-up 1/1: decode 30.0 tok/s", "rep 1/1: decode 40.0 tok/s"]
    lines.clear()
    run_workload(_BurstEngine([30.0], engine_timings=False), Workload(8, 16, repetitions=1),  # type: ignore[arg-type]
                 progress=lines.append)
    assert lines[-1].startswith("rep 1/1: decode -, TTFT")  # nothing timed it: said so


def test_a_noisy_series_stops_at_the_most_and_says_unstable() -> None:
    engine = _RateEngine([30.0, 20.0, 30.0, 40.0] * 4)
    result = run_workload(engine, Workload(8, 16, repetitions=6), ADAPTIVE)  # type: ignore[arg-type]
    assert len(result.samples) == 6 and is_unstable(result, ADAPTIVE.max_cv)
    joined = " | ".join(result.notes)
    assert "adaptive: the engine's decode is known to +/-" in joined
    assert "after the most repetitions, 6; the target was +/-2.0%" in joined
    assert re.search(r"unstable: the engine's decode varied by CV \d+\.\d% over 6 repetitions "
                     r"\(20\.0 to 40\.0 tok/s\), above the 5% limit \(ini tokperf_max_cv\)", joined)
    # a front-end with its own option (`tokperf bench --max-cv`) is named instead
    engine = _RateEngine([30.0, 20.0, 30.0, 40.0] * 4)
    result = run_workload(engine, Workload(8, 16, repetitions=6),  # type: ignore[arg-type]
                          replace(ADAPTIVE, max_cv_option="--max-cv"))
    assert "above the 5% limit (--max-cv): the median stands" in " | ".join(result.notes)


def test_fixed_repetitions_run_exactly_n_and_judge_the_client_without_engine_timings() -> None:
    engine = _RateEngine([30.0] * 3 + [10.0, 50.0], engine_timings=False)
    result = run_workload(engine, Workload(8, 16, repetitions=4))  # type: ignore[arg-type]
    assert engine.calls == 5 and len(result.samples) == 4
    assert any(n.startswith("unstable: the client's decode varied") for n in result.notes)
    assert not any(n.startswith("adaptive") for n in result.notes)  # not adaptive: no target



def test_concurrent_streams_read_in_one_burst_still_give_the_per_stream_note() -> None:
    # Under two busy loops the client read each 32-token stream in one read: no client
    # rate, and the "N concurrent streams" note went missing although the engine had
    # timed every stream (the suite's failure under load).
    result = run_workload(_BurstEngine([500.0]),  # type: ignore[arg-type]
                          Workload(16, 32, repetitions=2, warmup=0, concurrency=2),
                          MeasureOptions(sample_load=False))
    assert result.decode_tokens_per_s is None
    assert result.judged_decode_tokens_per_s is not None
    note = [n for n in result.notes if n.startswith("2 concurrent streams")]
    assert note == [f"2 concurrent streams: aggregate {32 * 2 / 0.2:.1f} tok/s output, "
                    "500.0 tok/s decode per stream"]


def test_no_decode_at_all_names_both_reasons() -> None:
    from pytest_tokperf.bench.fixture import TokBenchResult

    result = run_workload(_BurstEngine([500.0], engine_timings=False),  # type: ignore[arg-type]
                          Workload(8, 16, repetitions=1, warmup=0), MeasureOptions(sample_load=False))
    with pytest.raises(AssertionError, match=r"fewer than 2 tokens per run, or each run's tokens "
                                             r"arrived at once .* the engine timed none"):
        TokBenchResult(result=result).assert_usable()
