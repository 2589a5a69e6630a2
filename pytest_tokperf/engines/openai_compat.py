"""Generic adapter for any OpenAI-compatible server: streaming ``POST /v1/completions``.
Usage in any chunk or none, several tokens per chunk and keep-alives are taken;
``ignore_eos`` is sent only where the subclass says the server takes it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.engines.values import MAX_TOKENS, Fields
from pytest_tokperf.engines.wire import ChunkLog, model_ids, probe_ready, text_prompt
from pytest_tokperf.errors import EngineError, EngineProtocolError
from pytest_tokperf.results import EngineInfo, EngineTimings, Generation, GenerationRequest
from pytest_tokperf.transport.answers import error_text


class OpenAICompatible(HttpAdapter):
    """Any server with OpenAI's streaming ``/v1/completions`` and ``/v1/models``."""

    name = "openai"
    display = "OpenAI-compatible server"
    send_ignore_eos = False
    """Add llama.cpp/vLLM's ``ignore_eos: true``; servers that reject unknown fields say no."""
    continuous_usage = False
    """Ask for usage on every chunk (vLLM ``continuous_usage_stats``) to count tokens per chunk."""
    supports_chat = True
    """Chat goes to ``/v1/chat/completions``; thinking as ``delta.reasoning(_content)``."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._requested_model = self._model
        self._fingerprint: str | None = None

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/v1/models",
                           self._looks_right, "no model list at GET /v1/models")

    def _looks_right(self, response: httpx.Response) -> bool:
        try:
            data = response.json()
        except ValueError:
            return False
        return isinstance(data, dict) and isinstance(data.get("data"), list)

    def available_models(self) -> list[str]:
        """What the server says it can serve (``GET /v1/models``); empty when it cannot say."""
        try:
            return model_ids(get_json(self._client, f"{self.base_url}/v1/models", "model list"))
        except EngineError:
            return []

    def model(self) -> str | None:
        """The model to request: the one asked for, else the first the server lists."""
        if self._model is None:
            models = self.available_models()
            self._model = models[0] if models else None
        return self._model

    def unknown_model(self, detail: str) -> EngineProtocolError:
        models = self.available_models()
        listed = ", ".join(repr(m) for m in models) if models else "(the server lists none)"
        return EngineProtocolError(
            f"{self.display} at {self.base_url} has no model {self._model!r} ({detail}); "
            f"available: {listed}. Pass one with --tokperf-model."
        )

    def check_model(self) -> None:
        """Fail early, naming the alternatives, when the asked-for model is not listed."""
        if self._requested_model is None:
            return
        models = self.available_models()
        if models and self._requested_model not in models:
            raise self.unknown_model("not in GET /v1/models")

    def info(self) -> EngineInfo:
        self.check_model()
        return EngineInfo(
            name=self.name,
            version=None,
            build=self._fingerprint,
            base_url=self.base_url,
            model_name=self.model(),
            settings=self._settings,
        )

    def prompt(self, request: GenerationRequest) -> str | list[int]:
        return text_prompt(request.prompt_tokens, request.salt)

    def completion_body(self, request: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "max_tokens": request.generate_tokens,
            "temperature": 0.0,
            "seed": 1234,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.chat:
            body["messages"] = [{"role": "user",
                                 "content": text_prompt(request.prompt_tokens, request.salt)}]
        else:
            body["prompt"] = self.prompt(request)
        model = self.model()
        if model is not None:
            body["model"] = model
        if self.send_ignore_eos:
            body["ignore_eos"] = True
        if self.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
        return body

    def prompt_cache_off(self) -> str | None:
        """Why the prefix cache is known to be off, or None (on, or not known)."""
        return None

    def _on_error(self, status: int, body: str) -> EngineError | None:
        detail = error_text(body)
        if (status == 404 or (status in (400, 500) and "model" in detail.lower())) and \
                self._model is not None and (status == 404 or self._model in detail):
            return self.unknown_model(f"HTTP {status}: {detail}")
        return None

    def generate(self, request: GenerationRequest) -> Generation:
        body = self.completion_body(request)
        url = f"{self.base_url}/v1/{'chat/completions' if request.chat else 'completions'}"
        log = ChunkLog(request, url)
        notes: list[str] = []
        usage: dict[str, Any] | None = None
        last: dict[str, Any] = {}
        finish: str | None = None
        seen_tokens = 0
        for now, event in self._streams.events(url, body, request, self._on_error,
                                                stats=log.stats):
            last = event
            fingerprint = event.get("system_fingerprint")
            if isinstance(fingerprint, str) and fingerprint:
                self._fingerprint = fingerprint
            chunk_usage = event.get("usage") if isinstance(event.get("usage"), dict) else None
            if chunk_usage is not None:
                usage = chunk_usage
            choices = event.get("choices")
            if not isinstance(choices, list) or not choices:
                continue
            choice = choices[0] if isinstance(choices[0], dict) else {}
            text, thought = _choice_text(choice)
            reason = choice.get("finish_reason")
            finish = reason if isinstance(reason, str) and reason else finish
            cumulative = (self._cumulative(chunk_usage, seen_tokens, request, url, notes)
                          if chunk_usage else None)
            if isinstance(choice.get("token_ids"), list):  # vLLM return_token_ids: exact
                n = len(choice["token_ids"])
                seen_tokens += n
            elif cumulative is not None:
                n, seen_tokens = cumulative - seen_tokens, cumulative
            else:
                n = 1 if text or thought else 0
                seen_tokens += n
            log.add(now, n, thought + text, reasoning=bool(thought) and not text)
        if finish is None and not log.stats.done:
            raise log.cut_short(self.name, "a finish_reason or data: [DONE]", last)
        if not log.times_s:
            raise EngineProtocolError(
                f"{url} streamed no generated tokens (finish_reason {finish!r}, last event "
                f"{last!r:.200})"
            )
        said = Fields(self.name, url, last, notes=notes)
        timings = said.noted(self.timings(said, usage, request.generate_tokens))
        return log.generation(generated_tokens=timings.generated_tokens if timings else None,
                              prompt_tokens=timings.prompt_tokens if timings is not None else None,
                              stop_reason=finish, engine=timings)

    def _cumulative(self, usage: dict[str, Any], seen: int, request: GenerationRequest,
                    url: str, notes: list[str]) -> int | None:
        """A chunk's running ``usage.completion_tokens`` (vLLM ``continuous_usage_stats``):
        None when absent or unusable (above the request's tokens, or lower than before)."""
        value = usage.get("completion_tokens")
        if type(value) is int and seen <= value <= request.generate_tokens:
            return value  # the usual case, without a reader per streamed event
        total = Fields(self.name, url, usage, "usage", notes).tokens(
            "completion_tokens", most=request.generate_tokens)
        if total is not None and total < seen:
            notes.append(f"usage.completion_tokens went down from {seen} to {total}")
            return None
        return total

    def timings(self, last: Fields, usage: dict[str, Any] | None,
                asked: int) -> EngineTimings | None:
        """Counts from ``usage``; durations from llama.cpp ``timings`` or vLLM ``metrics``."""
        if usage is None and not isinstance(last.get("timings"), dict):
            return None
        counts = Fields(last.engine, last.url, usage or {}, "usage", last.notes)
        result = EngineTimings(
            prompt_tokens=counts.tokens("prompt_tokens"),
            cached_prompt_tokens=counts.inside("prompt_tokens_details").tokens("cached_tokens"),
            generated_tokens=counts.tokens("completion_tokens", most=asked),
        )
        if last.has("timings"):
            result = llama_cpp_timings(last.inside("timings"), asked, result)
        metrics = last.inside("metrics") if last.has("metrics") else counts.inside("metrics")
        if metrics.raw:
            result = _with_vllm_metrics(result, metrics)
        return result


def _choice_text(choice: dict[str, Any]) -> tuple[str, str]:
    """(answer text, reasoning text) of a completion or chat chunk's first choice."""
    text = choice.get("text")
    if isinstance(text, str):
        return text, ""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return "", ""
    answer = delta.get("content")
    thought = delta.get("reasoning") or delta.get("reasoning_content")
    return (answer if isinstance(answer, str) else "",
            thought if isinstance(thought, str) else "")


def llama_cpp_timings(raw: Fields, asked: int,
                      base: EngineTimings | None = None) -> EngineTimings:
    """llama.cpp ``timings``: ms, ``prompt_n`` excludes ``cache_n`` (engines.md section 1);
    a count it lacks or sent unusable is ``base``'s. ``asked``: the request's tokens."""

    base = base or EngineTimings()

    def tokens(key: str, fallback: int | None, most: int = asked) -> int | None:
        value = raw.tokens(key, most=most)
        return value if value is not None else fallback

    return EngineTimings(
        prompt_tokens=tokens("prompt_n", base.prompt_tokens, MAX_TOKENS),
        cached_prompt_tokens=tokens("cache_n", base.cached_prompt_tokens, MAX_TOKENS),
        prefill_s=raw.seconds("prompt_ms", per_s=1e3),
        generated_tokens=tokens("predicted_n", base.generated_tokens),
        decode_s=raw.seconds("predicted_ms", per_s=1e3),
        draft_tokens=raw.tokens("draft_n"),
        draft_accepted_tokens=raw.tokens("draft_n_accepted"),
    )


def _with_vllm_metrics(base: EngineTimings, raw: Fields) -> EngineTimings:
    """vLLM per-request ``metrics`` as the engine's own TTFT and decode time."""
    ttft = raw.seconds("time_to_first_token_ms", per_s=1e3)
    generation = raw.seconds("generation_time_ms", per_s=1e3)
    draft: int | None = None
    accepted: int | None = None
    if raw.has("speculative_decoding"):
        spec = raw.inside("speculative_decoding")
        draft = spec.tokens("num_draft_tokens") or 0
        accepted = spec.tokens("num_accepted_tokens")
    return replace(
        base,
        prefill_s=ttft if ttft is not None else base.prefill_s,
        decode_s=generation if generation is not None else base.decode_s,
        draft_tokens=draft if draft is not None else base.draft_tokens,
        draft_accepted_tokens=accepted if accepted is not None else base.draft_accepted_tokens,
    )
