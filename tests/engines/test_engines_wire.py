"""Each adapter end to end against a real loopback server speaking its engine's format.

The fakes (``fake_engines``) carry the quirks engines.md records; these tests check what
the adapters make of them: token counts, timings in seconds, cached and speculative
detection, truncation, identity, and clear errors for the wrong engine, HTML, error
JSON and unknown models. No timing asserts: speeds here are the fakes' pacing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.fake_engines import FakeLMStudio, FakeMLX, FakeOllama, FakeSGLang, FakeVLLM
from tests.support.fake_http import FakeHtml, Handler

from pytest_tokperf.engines.base import Engine, model_identity
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.errors import ConfigError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.bench.measure import run_workload
from pytest_tokperf.results import GenerationRequest, ModelInfo, Workload

REQUEST = GenerationRequest(prompt_tokens=40, generate_tokens=12, salt=7, timeout_s=30.0)


@pytest.fixture(scope="module")
def vllm() -> Iterator[FakeVLLM]:
    with FakeVLLM(per_request_metrics=True) as fake:
        yield fake


@pytest.fixture(scope="module")
def ollama() -> Iterator[FakeOllama]:
    with FakeOllama(models=("llama3.2:3b", "qwen2.5:7b")) as fake:
        yield fake


@pytest.fixture(scope="module")
def html() -> Iterator[FakeHtml]:
    with FakeHtml() as fake:
        yield fake


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    opened: list[Engine] = []
    yield opened
    for engine in opened:
        engine.close()


def make(engines: list[Engine], name: str, url: str, model: str | None = None) -> Engine:
    engine = create_engine(name, url, timeout_s=30.0, model=model)
    engines.append(engine)
    return engine


# -- Ollama --------------------------------------------------------------------------


def test_ollama_streams_ndjson_and_maps_nanoseconds(ollama: FakeOllama, engines: list[Engine]) -> None:
    engine = make(engines, "ollama", ollama.url, "llama3.2:3b")
    assert engine.ready()
    first = engine.generate(REQUEST)
    assert "load_duration" in ollama.last_final  # loaded by this request
    generation = engine.generate(REQUEST)
    final = ollama.last_final
    assert "load_duration" not in final  # omitted when zero: already loaded
    assert generation.chunk_tokens == (1,) * 12 and generation.generated_tokens == 12
    assert generation.stop_reason == "length" == first.stop_reason
    timings = generation.engine
    assert timings is not None
    assert timings.prefill_s == final["prompt_eval_duration"] / 1e9
    assert timings.decode_s == final["eval_duration"] / 1e9
    assert timings.generated_tokens == final["eval_count"] == 12
    assert generation.prompt_tokens == final["prompt_eval_count"]
    assert timings.cached_prompt_tokens is None  # Ollama has no cached-token counter
    body = ollama.requests[-1][2]
    assert body["raw"] is True and body["options"]["num_predict"] == 12
    assert body["model"] == "llama3.2:3b"


def test_ollama_info_names_version_model_and_settings(ollama: FakeOllama, engines: list[Engine]) -> None:
    info = make(engines, "ollama", ollama.url, "llama3.2:3b").info()
    assert (info.name, info.version, info.model_name) == ("ollama", "0.12.3", "llama3.2:3b")
    settings = dict(info.settings)
    assert settings["model_quantization_level"] == "Q4_K_M"
    assert settings["model_parameter_size"] == "3.2B"
    assert info.speculative is False


def test_ollama_reports_two_models_loaded_and_partial_offload(engines: list[Engine]) -> None:
    loaded = {"llama3.2:3b": (4_000_000_000, 2_400_000_000), "qwen2.5:7b": (5_000_000_000, 5_000_000_000)}
    with FakeOllama(models=tuple(loaded), loaded=loaded) as fake:
        info = make(engines, "ollama", fake.url, "llama3.2:3b").info()
    settings = dict(info.settings)
    assert settings["loaded_models"] == "2"
    assert settings["gpu_share"] == "60%"
    assert "warning" not in settings  # first-class now: EngineInfo.warnings
    two, partial = info.warnings
    assert two.startswith("2 models loaded at once in Ollama (llama3.2:3b, qwen2.5:7b)")
    assert partial.startswith("partial offload: 60% of llama3.2:3b is in GPU memory and "
                              "40% in system memory (2.40 GB of 4.00 GB")


def test_one_model_all_in_gpu_memory_warns_nothing(engines: list[Engine]) -> None:
    loaded = {"llama3.2:3b": (4_000_000_000, 4_000_000_000)}
    with FakeOllama(loaded=loaded) as fake:
        info = make(engines, "ollama", fake.url, "llama3.2:3b").info()
    assert info.warnings == () and dict(info.settings)["gpu_share"] == "100%"


@pytest.mark.parametrize(("fake_args", "drafts"), [
    ({"draft": "/m/blobs/sha256-d1"}, "sha256-d1|4 (default)"),  # a DRAFT drafts 4 by default
    ({"draft": "/m/blobs/sha256-d1", "draft_num_predict": 2}, "sha256-d1|2"),
    ({"draft": "/m/blobs/sha256-d1", "draft_num_predict": 0}, None),  # 0 turns it off
    ({"mtp_layers": 1}, None),  # MTP layers draft only when draft_num_predict is set
    ({"mtp_layers": 1, "draft_num_predict": 3}, "mtp (embedded layers)|3"),
    ({"draft_num_predict": 4}, None),  # a parameter alone has nothing to draft with
])
def test_ollama_speculative_from_its_draft_model_or_mtp_layers(
    fake_args: dict[str, Any], drafts: str | None, engines: list[Engine]
) -> None:
    with FakeOllama(**fake_args) as fake:
        info = make(engines, "ollama", fake.url, "llama3.2:3b").info()
    settings = dict(info.settings)
    assert info.speculative is (drafts is not None)
    if drafts is None:
        assert "draft_model" not in settings and info.warnings == ()
        return
    model, n = drafts.split("|")
    assert (settings["draft_model"], settings["draft_num_predict"]) == (model, n)
    assert info.warnings[-1].startswith(f"speculative decoding: llama3.2:3b drafts with {model}")


def test_ollama_model_identity_without_a_file(engines: list[Engine]) -> None:
    with FakeOllama(blob_path="/usr/share/ollama/.ollama/models/blobs/sha256-dde5aa3f") as fake:
        identity = model_identity(make(engines, "ollama", fake.url, "llama3.2:3b"))
    assert identity == ModelInfo(
        file_name="llama3.2:3b", path="/usr/share/ollama/.ollama/models/blobs/sha256-dde5aa3f",
        file_bytes=2_019_393_189, architecture="llama", parameter_count=3_212_749_888,
        file_type="Q4_K_M", context_length=131072)


def test_ollama_caps_only_so_the_real_count_is_recorded(engines: list[Engine]) -> None:
    with FakeOllama(eos_after=5) as fake:
        engine = make(engines, "ollama", fake.url, "llama3.2:3b")
        result = run_workload(engine, Workload(prompt_tokens=24, generate_tokens=10, repetitions=2))
    assert [s.generated_tokens for s in result.samples] == [5, 5]
    assert "asked for 10 tokens, got [5] in 2 of 2 repetitions" in result.notes


def test_ollama_unknown_model_lists_pulled_models(ollama: FakeOllama, engines: list[Engine]) -> None:
    engine = make(engines, "ollama", ollama.url, "mistral:7b")
    with pytest.raises(EngineProtocolError) as info_error:
        engine.info()
    message = str(info_error.value)
    assert "'mistral:7b'" in message and "'llama3.2:3b', 'qwen2.5:7b'" in message
    assert "not found, try pulling it first" in message and ollama.url in message
    with pytest.raises(EngineProtocolError, match="pulled models: 'llama3.2:3b'"):
        engine.generate(REQUEST)


def test_ollama_without_a_model_needs_one_unless_one_is_loaded(engines: list[Engine]) -> None:
    with FakeOllama() as fake:
        with pytest.raises(ConfigError, match="no model is loaded.*--tokperf-model.*'llama3.2:3b'"):
            make(engines, "ollama", fake.url).info()
    with FakeOllama(loaded={"llama3.2:3b": (10, 10)}) as fake:
        assert make(engines, "ollama", fake.url).info().model_name == "llama3.2:3b"


def test_ollama_error_json_is_quoted(engines: list[Engine]) -> None:
    with FakeOllama(mode="error") as fake:
        with pytest.raises(EngineProtocolError, match="HTTP 500: llama runner process has terminated"):
            make(engines, "ollama", fake.url, "llama3.2:3b").generate(REQUEST)


# -- vLLM ----------------------------------------------------------------------------


def test_vllm_exact_counts_multi_token_chunks_and_usage_chunk(vllm: FakeVLLM, engines: list[Engine]) -> None:
    engine = make(engines, "vllm", vllm.url)
    assert engine.ready()
    generation = engine.generate(REQUEST)
    body = vllm.requests[-1][2]
    assert body["prompt"][0] == 1 and len(body["prompt"]) == 40  # token ids from /tokenize
    assert body["min_tokens"] == body["max_tokens"] == 12 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["cache_salt"] == "tokperf-7"
    assert generation.chunk_tokens == (3, 3, 3, 3)  # several tokens per chunk, counted
    assert generation.generated_tokens == 12 and generation.prompt_tokens == 40
    timings = generation.engine
    assert timings is not None and timings.cached_prompt_tokens == 0
    assert timings.decode_s == pytest.approx(11 * vllm.token_s)  # generation_time_ms / 1000
    assert timings.prefill_s == pytest.approx(0.004)


def test_vllm_prefix_cache_hit_is_visible(vllm: FakeVLLM, engines: list[Engine]) -> None:
    engine = make(engines, "vllm", vllm.url)
    request = GenerationRequest(prompt_tokens=48, generate_tokens=4, salt=99, timeout_s=30.0)
    engine.generate(request)
    again = engine.generate(request)  # same salt: same cache_salt and prompt
    assert again.engine is not None and again.engine.cached_prompt_tokens == 32


def test_vllm_info_and_speculative_detection(engines: list[Engine]) -> None:
    with FakeVLLM(speculative=True, per_request_metrics=True) as fake:
        engine = make(engines, "vllm", fake.url)
        info = engine.info()
        generation = engine.generate(REQUEST)
    assert (info.name, info.version, info.context_size) == ("vllm", "0.11.0", 8192)
    assert info.model_name == "meta-llama/Llama-3.2-1B-Instruct"
    assert info.speculative is True and "speculative decoding" in info.warnings[0]
    assert dict(info.settings)["prefix_caching"] == "true"
    assert generation.engine is not None and generation.engine.speculative
    assert generation.engine.draft_accepted_tokens == 6


def test_vllm_unknown_model_lists_served_ones(vllm: FakeVLLM, engines: list[Engine]) -> None:
    engine = make(engines, "vllm", vllm.url, "Qwen/Qwen3-8B")
    with pytest.raises(EngineProtocolError) as error:
        engine.info()
    assert "'Qwen/Qwen3-8B'" in str(error.value)
    assert "available: 'meta-llama/Llama-3.2-1B-Instruct'" in str(error.value)
    with pytest.raises(EngineProtocolError, match="The model `Qwen/Qwen3-8B` does not exist"):
        engine.generate(REQUEST)


def test_vllm_error_json_is_quoted(engines: list[Engine]) -> None:
    with FakeVLLM(mode="error") as fake:
        with pytest.raises(EngineProtocolError, match="HTTP 500: CUDA out of memory"):
            make(engines, "vllm", fake.url).generate(REQUEST)


def test_generic_openai_adapter_without_ignore_eos_records_early_stop(engines: list[Engine]) -> None:
    with FakeVLLM(eos_after=4) as fake:
        generic = make(engines, "openai", fake.url).generate(REQUEST)
        exact = make(engines, "vllm", fake.url).generate(REQUEST)
    assert (generic.generated_tokens, generic.stop_reason) == (4, "stop")
    assert (exact.generated_tokens, exact.stop_reason) == (12, "length")  # min_tokens + ignore_eos
    assert generic.chunk_tokens == (1, 1)  # no per-chunk usage asked: one per text chunk


# -- LM Studio -----------------------------------------------------------------------


def test_lmstudio_runtime_stats_and_loaded_model(engines: list[Engine]) -> None:
    with FakeLMStudio() as fake:
        engine = make(engines, "lmstudio", fake.url)
        assert engine.ready()
        info = engine.info()
        generation = engine.generate(REQUEST)
    assert info.model_name == "qwen2.5-7b-instruct"  # the loaded one
    assert (info.version, info.backend) == ("1.52.1", "llama.cpp-linux-x86_64-nvidia-cuda-avx2")
    assert info.context_size == 4096 and dict(info.settings)["model_quant"] == "Q4_K_M"
    assert dict(info.settings)["loaded_models"] == "1" and info.speculative is False
    assert generation.generated_tokens == 12 and generation.prompt_tokens is not None


def test_lmstudio_caps_only_and_old_builds_send_no_usage(engines: list[Engine]) -> None:
    with FakeLMStudio(eos_after=5) as fake:
        fake.send_usage = False
        generation = make(engines, "lmstudio", fake.url).generate(REQUEST)
    assert (generation.generated_tokens, generation.stop_reason) == (5, "stop")
    assert generation.engine is None and generation.prompt_tokens is None


def test_lmstudio_draft_model_and_two_loaded_are_reported(engines: list[Engine]) -> None:
    models = (("qwen2.5-7b-instruct", "loaded"), ("qwen2.5-0.5b-instruct", "loaded"))
    with FakeLMStudio(models=models, draft_model="qwen2.5-0.5b-instruct") as fake:
        info = make(engines, "lmstudio", fake.url, "qwen2.5-7b-instruct").info()
    assert info.speculative is True and dict(info.settings)["draft_model"] == "qwen2.5-0.5b-instruct"
    two, draft = info.warnings
    assert two.startswith("2 models loaded at once in LM Studio (qwen2.5-7b-instruct, qwen2.5-0.5b")
    assert draft.startswith("speculative decoding with draft model 'qwen2.5-0.5b-instruct'")


def test_lmstudio_chat_streams_from_the_v1_api_with_its_own_stats(engines: list[Engine]) -> None:
    with FakeLMStudio(v1_api=True, think_tokens=2) as fake:
        engine = make(engines, "lmstudio", fake.url)
        result = run_workload(engine, Workload(24, 10, chat=True, repetitions=2, warmup=0))
        stats = fake.last_stats
        method, path, body = fake.requests[-1]
    assert (method, path) == ("POST", "/api/v1/chat")
    assert "word list" in body["input"] and body["max_output_tokens"] == 10
    assert body["stream"] is True and body["store"] is False
    sample = result.samples[-1]
    assert (sample.generated_tokens, sample.reasoning_tokens) == (10, 2)
    assert sample.prompt_tokens == stats["input_tokens"]
    assert sample.engine_prefill_s == stats["time_to_first_token_seconds"]
    # decode_s = total_output_tokens / tokens_per_second: the engine's decode beside the client's
    assert sample.engine_decode_tokens_per_s == pytest.approx(9 * stats["tokens_per_second"] / 10)
    assert result.decode_agreement is not None and result.engine_decode_tokens_per_s is not None


def test_lmstudio_raw_prompts_and_old_builds_keep_the_openai_stream(engines: list[Engine]) -> None:
    with FakeLMStudio(v1_api=True) as fake:
        make(engines, "lmstudio", fake.url).generate(REQUEST)
        assert fake.requests[-1][1] == "/v1/completions"
    with FakeLMStudio() as old:
        chat = make(engines, "lmstudio", old.url).generate(
            GenerationRequest(24, 4, timeout_s=30.0, chat=True))
        paths = [path for _, path, _ in old.requests]
    assert "/api/v1/models" in paths and "/api/v1/chat" not in paths
    assert paths[-1] == "/v1/chat/completions"
    assert chat.generated_tokens == 4 and chat.engine is None  # no stats on that stream


def test_lmstudio_model_identity_from_the_v1_list_else_v0(engines: list[Engine]) -> None:
    with FakeLMStudio(v1_api=True) as fake:
        identity = model_identity(make(engines, "lmstudio", fake.url))
    assert identity == ModelInfo(file_name="qwen2.5-7b-instruct", file_bytes=4_683_073_952,
                                 architecture="qwen2", parameter_count=7_000_000_000,
                                 file_type="Q4_K_M", context_length=32768)
    with FakeLMStudio() as old:
        identity = model_identity(make(engines, "lmstudio", old.url, "meta-llama-3.1-8b-instruct"))
    assert identity == ModelInfo(file_name="meta-llama-3.1-8b-instruct", architecture="qwen2",
                                 file_type="Q4_K_M", context_length=32768)


def test_lmstudio_unknown_model_lists_models(engines: list[Engine]) -> None:
    with FakeLMStudio() as fake:
        with pytest.raises(EngineProtocolError, match="no model 'gemma-3-4b'.*available: "
                                                      "'qwen2.5-7b-instruct', 'meta-llama-3.1-8b"):
            make(engines, "lmstudio", fake.url, "gemma-3-4b").info()


# -- mlx_lm --------------------------------------------------------------------------


def test_mlx_fingerprint_usage_chunk_and_keepalives(engines: list[Engine]) -> None:
    with FakeMLX() as fake:
        engine = make(engines, "mlx", fake.url)
        assert engine.ready()
        info = engine.info()
        generation = engine.generate(REQUEST)
        again = engine.generate(REQUEST)
    assert (info.name, info.version, info.backend) == ("mlx", "0.28.3", "mlx 0.29.2 applegpu_g15s")
    assert dict(info.settings)["platform"] == "macOS-15.6.1-arm64-arm-64bit"
    assert generation.generated_tokens == 12  # from usage, though chunks held 2 tokens
    assert len(generation.chunk_tokens) == 6
    assert generation.engine is not None and generation.engine.decode_s is None  # no timings
    assert generation.engine.cached_prompt_tokens == 1  # only the BOS token is shared
    assert again.engine is not None and again.engine.cached_prompt_tokens == generation.prompt_tokens - 1
    assert "model" not in fake.requests[-1][2]  # the server's --model is used


def test_mlx_caps_only_so_an_early_end_is_recorded(engines: list[Engine]) -> None:
    with FakeMLX(eos_after=4) as fake:
        generation = make(engines, "mlx", fake.url).generate(REQUEST)
    assert (generation.generated_tokens, generation.stop_reason) == (4, "stop")


def test_mlx_unknown_model_names_it_and_lists_cache(engines: list[Engine]) -> None:
    with FakeMLX() as fake:
        with pytest.raises(EngineProtocolError) as error:
            make(engines, "mlx", fake.url, "mlx-community/nope").info()
    message = str(error.value)
    assert "'mlx-community/nope'" in message and "Repository Not Found" in message
    assert "'mlx-community/Llama-3.2-3B-Instruct-4bit'" in message


# -- SGLang --------------------------------------------------------------------------


def test_sglang_cumulative_text_exact_counts_and_server_info(engines: list[Engine]) -> None:
    with FakeSGLang() as fake:
        engine = make(engines, "sglang", fake.url)
        assert engine.ready()
        info = engine.info()
        generation = engine.generate(REQUEST)
        body = fake.requests[-1][2]
    assert body["sampling_params"] == {"max_new_tokens": 12, "min_new_tokens": 12,
                                       "ignore_eos": True, "temperature": 0.0}
    assert (info.version, info.model_path, info.backend) == ("0.5.3", "Qwen/Qwen2.5-0.5B-Instruct", "cuda")
    assert info.speculative is False and dict(info.settings)["disable_radix_cache"] == "False"
    assert generation.chunk_tokens == (1,) * 12 and generation.generated_tokens == 12
    assert generation.text.split() == ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta",
                                       "theta", "alpha", "beta", "gamma", "delta"]
    assert generation.stop_reason == "length"


def test_sglang_speculative_and_model_mismatch(engines: list[Engine]) -> None:
    with FakeSGLang(speculative="EAGLE") as fake:
        engine = make(engines, "sglang", fake.url)
        assert engine.info().speculative is True
        generation = engine.generate(REQUEST)
        assert generation.engine is not None and generation.engine.speculative
        with pytest.raises(EngineProtocolError, match="serves 'Qwen/Qwen2.5-0.5B-Instruct', not 'llama'"):
            make(engines, "sglang", fake.url, "llama").info()
        assert make(engines, "sglang", fake.url, "Qwen2.5-0.5B-Instruct").info().speculative


def test_sglang_draft_counts_of_newer_builds(engines: list[Engine]) -> None:
    with FakeSGLang(speculative="EAGLE", draft_counts=True) as fake:
        generation = make(engines, "sglang", fake.url).generate(REQUEST)
    timings = generation.engine
    assert timings is not None and timings.speculative
    assert (timings.draft_tokens, timings.draft_accepted_tokens) == (18, 6)  # 6 steps x 3, 12 - 6


def test_sglang_and_vllm_identity_is_their_model_path(engines: list[Engine]) -> None:
    with FakeSGLang() as fake:
        sglang = model_identity(make(engines, "sglang", fake.url))
    assert sglang == ModelInfo(file_name="Qwen2.5-0.5B-Instruct", path="Qwen/Qwen2.5-0.5B-Instruct")
    with FakeVLLM() as fake:
        vllm = model_identity(make(engines, "vllm", fake.url))
    assert vllm == ModelInfo(file_name="meta-llama/Llama-3.2-1B-Instruct",
                             path="meta-llama/Llama-3.2-1B-Instruct", context_length=8192)


def test_model_identity_is_none_when_the_engine_cannot_say(engines: list[Engine]) -> None:
    assert model_identity(make(engines, "mlx", "http://127.0.0.1:9")) is None  # says nothing
    assert model_identity(make(engines, "ollama", "http://127.0.0.1:9", "m")) is None  # unreachable

    class Custom:  # an engine a conftest registers need not implement it
        name, base_url = "custom", "http://x"

    assert model_identity(Custom()) is None  # type: ignore[arg-type]


def test_sglang_error_json_is_quoted(engines: list[Engine]) -> None:
    with FakeSGLang(mode="error") as fake:
        with pytest.raises(EngineProtocolError, match="HTTP 500: Internal server error: the scheduler died"):
            make(engines, "sglang", fake.url).generate(REQUEST)


# -- the wrong thing at the URL ------------------------------------------------------


@pytest.mark.parametrize(("name", "fake_type", "looks_like"), [
    ("ollama", FakeVLLM, "vLLM 0.11.0"),
    ("vllm", FakeOllama, "Ollama 0.12.3"),
    ("sglang", FakeVLLM, "vLLM 0.11.0"),
    ("lmstudio", FakeSGLang, "SGLang"),
    ("mlx", FakeVLLM, "vLLM 0.11.0"),
    ("openai", FakeOllama, "Ollama 0.12.3"),
])
def test_a_url_answering_as_another_engine_names_both(
    name: str, fake_type: type, looks_like: str, engines: list[Engine]
) -> None:
    with fake_type() as fake:
        engine = make(engines, name, fake.url)
        with pytest.raises(EngineProtocolError) as error:
            engine.ready()
    message = str(error.value)
    assert f"--tokperf-engine {name!r}" in message and looks_like in message and fake.url in message


@pytest.mark.parametrize("name", ["ollama", "vllm", "lmstudio", "mlx", "sglang", "openai", "llama-server"])
def test_an_html_page_is_called_what_it_is(name: str, html: FakeHtml, engines: list[Engine]) -> None:
    engine = make(engines, name, html.url, "m")
    if name == "llama-server":
        with pytest.raises(EngineProtocolError, match="not JSON"):
            engine.info()
        return
    with pytest.raises(EngineProtocolError, match="web page titled 'Router Login'"):
        engine.ready()


def test_html_answer_to_a_generation_is_reported(html: FakeHtml, engines: list[Engine]) -> None:
    with pytest.raises(EngineProtocolError, match="HTML page titled 'Router Login'.*not a proxy"):
        make(engines, "openai", html.url, "m").generate(REQUEST)
    with pytest.raises(EngineProtocolError, match="not JSON: '<!DOCTYPE html>.*Router Login"):
        make(engines, "ollama", html.url, "llama3.2:3b").generate(REQUEST)


class _NoStreamMLX(FakeMLX):
    """A server that ignores ``stream: true`` and answers one JSON document."""

    def post_v1_completions(self, h: Handler, body: Any) -> None:
        super().post_v1_completions(h, {**body, "stream": False})


def test_a_json_document_instead_of_a_stream_is_reported(engines: list[Engine]) -> None:
    with _NoStreamMLX() as fake:
        with pytest.raises(EngineProtocolError, match="one JSON document, not a stream"):
            make(engines, "mlx", fake.url).generate(REQUEST)


@pytest.mark.parametrize("name", ["ollama", "vllm", "lmstudio", "mlx", "sglang", "openai"])
def test_nothing_listening_is_not_ready_and_unavailable(name: str, engines: list[Engine]) -> None:
    engine = make(engines, name, "http://127.0.0.1:9", "m")
    assert engine.ready() is False
    with pytest.raises(EngineUnavailable, match="127.0.0.1:9"):
        engine.generate(REQUEST)


# -- chat workloads: thinking told apart where the engine separates it ----------------


def test_ollama_chat_applies_the_template_and_counts_thinking(engines: list[Engine]) -> None:
    with FakeOllama(think_tokens=4) as fake:
        engine = make(engines, "ollama", fake.url, "llama3.2:3b")
        chat = run_workload(engine, Workload(24, 10, chat=True, repetitions=2, warmup=0))
        chat_body = fake.requests[-1][2]
        raw = run_workload(engine, Workload(24, 10, repetitions=1, warmup=0))
        raw_body = fake.requests[-1][2]
    assert chat_body["raw"] is False and "think" not in chat_body and raw_body["raw"] is True
    assert [s.reasoning_tokens for s in chat.samples] == [4, 4]
    assert all(s.answer_ttft_s is not None and s.answer_ttft_s > s.ttft_s for s in chat.samples)
    assert raw.samples[0].reasoning_tokens is None  # raw: no template, no thinking


def test_vllm_chat_counts_delta_reasoning(engines: list[Engine]) -> None:
    with FakeVLLM(think_tokens=3) as fake:
        engine = make(engines, "vllm", fake.url, "meta-llama/Llama-3.2-1B-Instruct")
        result = run_workload(engine, Workload(24, 8, chat=True, repetitions=1, warmup=0))
        method, path, body = fake.requests[-1]
    assert (method, path) == ("POST", "/v1/chat/completions")
    assert "prompt" not in body and body["messages"][0]["role"] == "user"
    (sample,) = result.samples
    assert (sample.generated_tokens, sample.reasoning_tokens) == (8, 3)
    assert sample.answer_ttft_s is not None and sample.answer_ttft_s > sample.ttft_s
    assert "3 of 8 generated tokens were reasoning (median); first answer token after" in \
        " ".join(result.notes)


def test_sglang_refuses_chat_before_any_request(engines: list[Engine]) -> None:
    with FakeSGLang() as fake:
        engine = make(engines, "sglang", fake.url)
        before = len(fake.requests)
        with pytest.raises(ConfigError, match="chat workloads .chat=True. are not built for sglang yet"):
            run_workload(engine, Workload(24, 8, chat=True))
        generated = [r for r in fake.requests[before:] if r[1] == "/generate"]
    assert generated == []
