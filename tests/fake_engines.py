"""Fake Ollama, vLLM, LM Studio, mlx_lm and SGLang servers speaking their wire formats.

For the engines that cannot run here, each fake answers the endpoints the adapters use,
with the quirks shared/reference/engines.md records: Ollama's NDJSON, nanosecond
durations, omitted zero fields and ``/api/ps`` memory split; vLLM's usage-only final
chunk, several tokens per chunk, ``min_tokens``/``ignore_eos``; LM Studio's REST v0
``stats``/``runtime`` on non-streamed answers only; mlx_lm's ``system_fingerprint``,
keep-alive comments and ``chat.completion`` usage chunk, no timings; SGLang's
cumulative ``text`` with ``meta_info`` and ``[DONE]``. Capped engines stop early
(``eos_after``) as a model that ends its answer would. ``mode="error"`` makes generation
answer the engine's error JSON.

Error bodies: Ollama ``{"error": "model \\"x\\" not found, try pulling it first"}`` (404)
and vLLM's flat ``{"object": "error", "message": "The model `x` does not exist."}`` (404)
are as their users quote them; mlx_lm answers the load exception as ``{"error": ...}``
with HTTP 500 (``handle_completion`` in mlx_lm/server.py). LM Studio's unknown-model
body is a plausible OpenAI-style error, not checked against a running LM Studio.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fake_http import FakeServer, Handler, common_prefix, generated_count, iso_now, tokens_of

NS = 1_000_000_000


def _canonical(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


class FakeOllama(FakeServer):
    """Ollama 0.12-style API: ``/api/generate`` NDJSON, ``/api/show``, ``/api/ps``."""

    version = "0.12.3"

    def __init__(self, models: tuple[str, ...] = ("llama3.2:3b",),
                 loaded: dict[str, tuple[int, int]] | None = None, eos_after: int | None = None,
                 draft_num_predict: int | None = None, mode: str = "ok") -> None:
        super().__init__(mode)
        self.models = tuple(_canonical(m) for m in models)
        self.loaded = dict(loaded or {})
        """name -> (size, size_vram) of models in memory (``/api/ps``)."""
        self.eos_after = eos_after
        self.draft_num_predict = draft_num_predict
        self.last_final: dict[str, Any] = {}

    def get_(self, h: Handler, body: Any) -> None:
        h.send_text(200, "Ollama is running")

    def get_api_version(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"version": self.version})

    def get_api_tags(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"models": [{"name": m, "model": m, "size": 2_019_393_189,
                                      "digest": "a80c4f17acd5", "details": self._details()}
                                     for m in self.models]})

    def get_api_ps(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"models": [
            {"name": m, "model": m, "size": size, "size_vram": vram, "digest": "a80c4f17acd5",
             "details": self._details(), "expires_at": "2030-01-01T00:00:00Z",
             "context_length": 4096}
            for m, (size, vram) in self.loaded.items()]})

    def _details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                "parameter_size": "3.2B", "quantization_level": "Q4_K_M"}

    def _unknown(self, h: Handler, name: str) -> bool:
        if _canonical(name) in self.models:
            return False
        h.send_json(404, {"error": f'model "{name}" not found, try pulling it first'})
        return True

    def post_api_show(self, h: Handler, body: Any) -> None:
        name = str(body.get("model"))
        if self._unknown(h, name):
            return
        parameters = 'stop                           "<|eot_id|>"\ntemperature                    0.6'
        if self.draft_num_predict is not None:
            parameters += f"\ndraft_num_predict              {self.draft_num_predict}"
        h.send_json(200, {
            "license": "LLAMA 3.2 COMMUNITY LICENSE", "modelfile": f"FROM {name}",
            "parameters": parameters, "template": "{{ .Prompt }}", "details": self._details(),
            "model_info": {"general.architecture": "llama",
                           "general.parameter_count": 3_212_749_888,
                           "llama.context_length": 131072, "llama.block_count": 28},
            "capabilities": ["completion", "tools"], "modified_at": iso_now(),
        })

    def post_api_generate(self, h: Handler, body: Any) -> None:
        name = str(body.get("model"))
        if self._unknown(h, name):
            return
        if self.mode == "error":
            h.send_json(500, {"error": "llama runner process has terminated: exit status 2"})
            return
        started = time.perf_counter()
        load_ns = 0
        if _canonical(name) not in self.loaded:
            time.sleep(0.01)
            load_ns = int((time.perf_counter() - started) * NS)
            self.loaded[_canonical(name)] = (2_500_000_000, 2_500_000_000)
        options = body.get("options") or {}
        tokens = tokens_of(body.get("prompt", ""))
        self.prompts.append(tokens)
        prefill_ns = int(self.prefill(tokens) * NS)
        limit = int(options.get("num_predict", -1))
        limit = limit if limit > 0 else 50  # -1 is "until the model stops"
        n = generated_count(limit, self.eos_after)
        h.start_stream("application/x-ndjson")
        first = last = time.perf_counter()
        for i, text in self.paced(n):
            last = time.perf_counter()
            first = last if i == 0 else first
            h.chunk(json.dumps({"model": name, "created_at": iso_now(), "response": text,
                                "done": False}) + "\n")
        final: dict[str, Any] = {
            "model": name, "created_at": iso_now(), "response": "", "done": True,
            "done_reason": "length" if n == limit else "stop",
            "total_duration": int((time.perf_counter() - started) * NS),
            "load_duration": load_ns, "prompt_eval_count": len(tokens),
            "prompt_eval_duration": prefill_ns, "eval_count": n,
            "eval_duration": int((last - first) * NS),
        }
        self.last_final = {k: v for k, v in final.items() if v != 0}  # omitempty
        h.chunk(json.dumps(self.last_final) + "\n")
        h.end_stream()


class _OpenAIStream(FakeServer):
    """What vLLM, LM Studio and mlx_lm share: ``/v1/models`` and streamed completions."""

    model_ids: tuple[str, ...] = ()
    tokens_per_chunk = 1
    fingerprint: str | None = None
    send_usage = True
    """False: ignore ``stream_options`` as LM Studio builds before it was supported did."""
    send_done = True

    def get_v1_models(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"object": "list", "data": [self.card(m) for m in self.model_ids]})

    def card(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "organization_owner"}

    def chunk(self, model: str, text: str | None, finish: str | None, **extra: Any) -> dict[str, Any]:
        event: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion", "created": int(time.time()),
                                 "model": model}
        if self.fingerprint:
            event["system_fingerprint"] = self.fingerprint
        event["choices"] = [] if text is None else [
            {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]
        event.update(extra)
        return event

    def usage(self, prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
        usage: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                 "completion_tokens": completion}
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage

    def stream_completion(self, h: Handler, body: dict[str, Any], tokens: list[str], n: int,
                          cached: int | None, finish: str, keepalive: bool = False,
                          continuous: bool = False, final_extra: dict[str, Any] | None = None) -> None:
        model = str(body.get("model") or "default_model")
        h.start_stream("text/event-stream")
        if keepalive:
            h.chunk(f": keepalive {len(tokens) // 2}/{len(tokens)}\n\n")
        self.prefill(tokens)
        pending: list[str] = []
        done = 0
        for i, text in self.paced(n):
            pending.append(text)
            if len(pending) < self.tokens_per_chunk and i < n - 1:
                continue
            done += len(pending)
            extra = {"usage": self.usage(len(tokens), done, None)} if continuous else {}
            h.sse(self.chunk(model, "".join(pending), finish if done == n else None, **extra))
            pending = []
        options = body.get("stream_options") or {}
        if options.get("include_usage") and self.send_usage:
            h.sse(self.chunk(model, None, None, usage=self.usage(len(tokens), n, cached),
                             **(final_extra or {})))
        if self.send_done:
            h.sse("[DONE]")
        h.end_stream()


class FakeVLLM(_OpenAIStream):
    """vLLM 0.11-style OpenAI server: several tokens per chunk, usage on a final chunk."""

    version = "0.11.0"

    def __init__(self, model: str = "meta-llama/Llama-3.2-1B-Instruct", tokens_per_chunk: int = 3,
                 eos_after: int | None = None, speculative: bool = False,
                 prompt_details: bool = True, per_request_metrics: bool = False,
                 mode: str = "ok") -> None:
        super().__init__(mode)
        self.model_ids = (model,)
        self.tokens_per_chunk = tokens_per_chunk
        self.eos_after = eos_after
        self.speculative = speculative
        self.prompt_details = prompt_details
        self.per_request_metrics = per_request_metrics
        self.fingerprint = None
        self.salted: dict[str, list[list[str]]] = {}

    def card(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "vllm",
                "root": model, "parent": None, "max_model_len": 8192}

    def get_version(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"version": self.version})

    def get_health(self, h: Handler, body: Any) -> None:
        h.send_bytes(200, b"", "application/json")

    def get_metrics(self, h: Handler, body: Any) -> None:
        model = self.model_ids[0]
        lines = [f'vllm:num_requests_running{{model_name="{model}"}} 0.0',
                 'vllm:cache_config_info{block_size="16",enable_prefix_caching="True"} 1.0']
        if self.speculative:
            lines.append(f'vllm:spec_decode_num_drafts_total{{model_name="{model}"}} 12.0')
        h.send_text(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4")

    def post_tokenize(self, h: Handler, body: Any) -> None:
        words = tokens_of(body.get("prompt", ""))[1:]
        ids = [1] + [100 + sum(map(ord, w)) % 30000 for w in words]
        h.send_json(200, {"count": len(ids), "max_model_len": 8192, "tokens": ids, "token_strs": None})

    def post_v1_completions(self, h: Handler, body: Any) -> None:
        model = body.get("model")
        if model not in self.model_ids:
            h.send_json(404, {"object": "error", "message": f"The model `{model}` does not exist.",
                              "type": "NotFoundError", "param": None, "code": 404})
            return
        if body.get("stream_options") and not body.get("stream"):
            h.send_json(400, {"object": "error", "message": "Stream options can only be defined "
                              "when `stream=True`.", "type": "BadRequestError", "code": 400})
            return
        if self.mode == "error":
            h.send_json(500, {"object": "error", "message": "CUDA out of memory. Tried to allocate "
                              "2.00 GiB", "type": "InternalServerError", "param": None, "code": 500})
            return
        tokens = tokens_of(body["prompt"])
        history = self.salted.setdefault(str(body.get("cache_salt")), [])
        best = max((common_prefix(tokens, p) for p in history), default=0)
        history.append(tokens)
        cached = min(best, len(tokens) - 1) // 16 * 16
        max_tokens = int(body.get("max_tokens", 16))
        ignore = bool(body.get("ignore_eos"))
        n = max_tokens if ignore else generated_count(max_tokens, self.eos_after, int(body.get("min_tokens", 0)))
        extra: dict[str, Any] = {"system_fingerprint": f"vllm-{self.version}-3f2a9c1e"}
        if self.per_request_metrics:
            metrics: dict[str, Any] = {"time_to_first_token_ms": 4.0,
                                       "generation_time_ms": (n - 1) * self.token_s * 1000,
                                       "queue_time_ms": 0.1, "mean_itl_ms": self.token_s * 1000}
            if self.speculative:
                metrics["speculative_decoding"] = {"num_draft_tokens": n, "num_accepted_tokens": n // 2}
            extra["metrics"] = metrics
        options = body.get("stream_options") or {}
        self.stream_completion(h, body, tokens, n, cached if self.prompt_details else None,
                               "length" if n == max_tokens else "stop",
                               continuous=bool(options.get("continuous_usage_stats")),
                               final_extra=extra)


class FakeLMStudio(_OpenAIStream):
    """LM Studio 0.3-style server: OpenAI endpoints plus REST v0 with stats."""

    def __init__(self, models: tuple[tuple[str, str], ...] = (
            ("qwen2.5-7b-instruct", "loaded"), ("meta-llama-3.1-8b-instruct", "not-loaded")),
                 eos_after: int | None = None, draft_model: str | None = None,
                 mode: str = "ok") -> None:
        super().__init__(mode)
        self.catalog = models
        self.model_ids = tuple(m for m, _ in models)
        self.eos_after = eos_after
        self.draft_model = draft_model

    def _entry(self, model: str, state: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "type": "llm", "publisher": "lmstudio-community",
                "arch": "qwen2", "compatibility_type": "gguf", "quantization": "Q4_K_M",
                "state": state, "max_context_length": 32768}

    def get_api_v0_models(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"object": "list", "data": [self._entry(m, s) for m, s in self.catalog]})

    def _unknown(self, h: Handler, model: Any) -> bool:
        if model in self.model_ids:
            return False
        h.send_json(404, {"error": {"message": f'Model "{model}" not found. Please load it or check '
                                               f"the model identifier.", "type": "invalid_request_error",
                                    "param": "model", "code": "model_not_found"}})
        return True

    def post_api_v0_completions(self, h: Handler, body: Any) -> None:
        if self._unknown(h, body.get("model")):
            return
        tokens = tokens_of(body.get("prompt", ""))
        n = generated_count(int(body.get("max_tokens", 16)), self.eos_after)
        stats: dict[str, Any] = {"tokens_per_second": 57.7, "time_to_first_token": 0.011,
                                 "generation_time": 0.156,
                                 "stop_reason": "maxPredictedTokensReached" if self.eos_after is None else "eosFound"}
        if self.draft_model:
            stats.update(draft_model=self.draft_model, total_draft_tokens_count=n,
                         accepted_draft_tokens_count=n // 2, rejected_draft_tokens_count=n - n // 2,
                         ignored_draft_tokens_count=0)
        h.send_json(200, {
            "id": "cmpl-p9rtxv6fky2v9k8jrd8cc", "object": "text_completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "text": " tok" * n, "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": len(tokens), "completion_tokens": n, "total_tokens": len(tokens) + n},
            "stats": stats,
            "model_info": {"arch": "qwen2", "quant": "Q4_K_M", "format": "gguf", "context_length": 4096},
            "runtime": {"name": "llama.cpp-linux-x86_64-nvidia-cuda-avx2", "version": "1.52.1",
                        "supported_formats": ["gguf"]},
        })

    def post_v1_completions(self, h: Handler, body: Any) -> None:
        if self._unknown(h, body.get("model")):
            return
        tokens = tokens_of(body.get("prompt", ""))
        max_tokens = int(body.get("max_tokens", 16))
        n = generated_count(max_tokens, self.eos_after)
        self.fingerprint = str(body["model"])
        self.stream_completion(h, body, tokens, n, None, "length" if n == max_tokens else "stop")


class FakeMLX(_OpenAIStream):
    """mlx_lm.server 0.28-style: fingerprint, keep-alive comments, usage chunk, no timings."""

    tokens_per_chunk = 2

    def __init__(self, model: str = "mlx-community/Llama-3.2-3B-Instruct-4bit",
                 cache_models: tuple[str, ...] = ("mlx-community/Qwen2.5-7B-Instruct-4bit",),
                 eos_after: int | None = None, mode: str = "ok") -> None:
        super().__init__(mode)
        self.model_ids = (*cache_models, model)
        self.loaded = model
        self.eos_after = eos_after
        self.fingerprint = "0.28.3-0.29.2-macOS-15.6.1-arm64-arm-64bit-applegpu_g15s"

    def get_health(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"status": "ok"})

    def post_v1_completions(self, h: Handler, body: Any) -> None:
        model = body.get("model", "default_model")
        if model not in ("default_model", *self.model_ids):
            h.send_json(500, {"error": f"404 Client Error. Repository Not Found for url: "
                                       f"https://huggingface.co/api/models/{model}/revision/main."})
            return
        tokens = tokens_of(body.get("prompt", ""))
        cached = self.cached(tokens)
        max_tokens = int(body.get("max_tokens", 512))
        n = generated_count(max_tokens, self.eos_after)
        finish = "length" if n == max_tokens else "stop"
        if not body.get("stream"):
            h.send_json(200, {**self.chunk(model, " tok" * n, finish),
                              "usage": self.usage(len(tokens), n, cached)})
            return
        self.stream_completion(h, body, tokens, n, cached, finish, keepalive=True)

    def chunk(self, model: str, text: str | None, finish: str | None, **extra: Any) -> dict[str, Any]:
        event = super().chunk(model, text, finish, **extra)
        if text is None:
            event["object"] = "chat.completion"  # mlx_lm's usage chunk, even for text completions
        return event


class FakeSGLang(FakeServer):
    """SGLang 0.5-style native API: ``/generate`` SSE with cumulative text and meta_info."""

    version = "0.5.3"

    def __init__(self, model_path: str = "Qwen/Qwen2.5-0.5B-Instruct", speculative: str | None = None,
                 radix_cache: bool = True, mode: str = "ok") -> None:
        super().__init__(mode)
        self.model_path = model_path
        self.speculative = speculative
        self.radix_cache = radix_cache

    def get_health(self, h: Handler, body: Any) -> None:
        h.send_bytes(200, b"", "text/plain")

    def get_get_model_info(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"model_path": self.model_path, "tokenizer_path": self.model_path,
                          "is_generation": True, "preferred_sampling_params": None,
                          "weight_version": "default", "has_image_understanding": False})

    def get_get_server_info(self, h: Handler, body: Any) -> None:
        h.send_json(200, {
            "model_path": self.model_path, "served_model_name": self.model_path, "tp_size": 1,
            "dp_size": 1, "device": "cuda", "dtype": "auto", "context_length": None,
            "attention_backend": "fa3", "chunked_prefill_size": 8192,
            "speculative_algorithm": self.speculative, "disable_radix_cache": not self.radix_cache,
            "stream_interval": 1, "internal_states": [{"last_gen_throughput": 0.0}],
            "version": self.version,
        })

    def post_generate(self, h: Handler, body: Any) -> None:
        if self.mode == "error":
            h.send_json(500, {"error": {"message": "Internal server error: the scheduler died"}})
            return
        params = body.get("sampling_params") or {}
        tokens = tokens_of(body.get("text", ""))
        cached = self.cached(tokens) if self.radix_cache else 0
        max_new = int(params.get("max_new_tokens", 128))
        n = max_new if params.get("ignore_eos") else min(max_new, 7)
        started = time.perf_counter()
        h.start_stream("text/event-stream")
        self.prefill(tokens)
        text = ""
        for i, piece in self.paced(n):
            text += piece
            meta: dict[str, Any] = {
                "id": "9f1c", "finish_reason": {"type": "length", "length": n} if i == n - 1 else None,
                "prompt_tokens": len(tokens), "completion_tokens": i + 1, "cached_tokens": cached,
                "e2e_latency": time.perf_counter() - started,
            }
            if self.speculative:
                meta["spec_verify_ct"] = (i + 2) // 2
            h.sse({"text": text, "meta_info": meta})
        h.sse("[DONE]")
        h.end_stream()
