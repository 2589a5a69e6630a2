"""Adapter for SGLang's native ``/generate`` API (exact counts, no engine timings): text
may stream cumulative or incremental; ``meta_info.completion_tokens`` counts tokens."""

from __future__ import annotations

from typing import Any

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.engines.values import Fields
from pytest_tokperf.engines.wire import (ChunkLog, json_field, probe_ready, text_prompt,
                                         wrong_engine)
from pytest_tokperf.errors import EngineError, EngineProtocolError
from pytest_tokperf.results import (EngineInfo, EngineTimings, Generation, GenerationRequest,
                                    ModelInfo)
from pytest_tokperf.transport.answers import error_text

SERVER_SETTINGS = (
    "tp_size", "dp_size", "device", "dtype", "quantization", "kv_cache_dtype",
    "attention_backend", "context_length", "chunked_prefill_size", "max_running_requests",
    "speculative_algorithm", "speculative_num_draft_tokens", "disable_radix_cache",
    "stream_interval",
)


class SGLang(HttpAdapter):
    """A running SGLang server reached over HTTP."""

    name = "sglang"

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/get_model_info",
                           lambda r: json_field(r, "model_path"),
                           "no model_path at GET /get_model_info")

    def _model_info(self) -> tuple[Fields, str]:
        """``GET /get_model_info`` and its ``model_path``: what is served (refused unless
        text)."""
        url = f"{self.base_url}/get_model_info"
        info = get_json(self._client, url, "SGLang model info")
        if not isinstance(info, dict) or "model_path" not in info:
            raise wrong_engine(self.name, self.base_url, "no model_path at GET /get_model_info",
                               self._client)
        said = Fields(self.name, url, info)
        return said, said.text("model_path", refuse=True) or ""

    def _server(self) -> Fields:
        data: object = {}
        for path in ("/get_server_info", "/server_info"):
            try:
                data = get_json(self._client, f"{self.base_url}{path}", "SGLang server info")
            except EngineProtocolError:
                continue
            if isinstance(data, dict):
                break
        return Fields(self.name, f"{self.base_url}/get_server_info",
                      data if isinstance(data, dict) else {})

    def _check_model(self, served: tuple[str, ...]) -> None:
        if self._model is None:
            return
        names = {s for s in served if s} | {s.rstrip("/").rsplit("/", 1)[-1] for s in served if s}
        if self._model not in names:
            raise EngineProtocolError(
                f"SGLang at {self.base_url} serves {served[0]!r}, not {self._model!r}; it serves "
                f"one model (--model-path at launch). Pass --tokperf-model {served[0]!r} or "
                f"drop the option."
            )

    def info(self) -> EngineInfo:
        model_info, model_path = self._model_info()
        server = self._server()
        served_name = server.text("served_model_name")
        self._check_model((model_path, served_name or ""))
        settings = dict(self._settings)
        for key in SERVER_SETTINGS:
            value = server.scalar(key)
            if value is not None:
                settings[key] = value
        weights = model_info.scalar("weight_version")
        if weights is not None:
            settings["weight_version"] = weights
        algorithm = server.text("speculative_algorithm")
        speculative = bool(server.get("speculative_algorithm"))  # unusable: it may draft
        warnings = ((f"speculative decoding ({algorithm or 'unnamed'}) is on: decode speed "
                     f"is not the base speed"),) if speculative else ()
        version = server.text("version", refuse=True)  # the build: the series key
        device = server.text("device")
        return EngineInfo(
            name=self.name,
            version=version or None,
            build=f"sglang-{version}" if version else None,
            base_url=self.base_url,
            backend=device or None,
            model_path=model_path,
            model_name=served_name or model_path,
            context_size=server.tokens("context_length"),
            speculative=speculative,
            settings=tuple(sorted(settings.items())),
            warnings=(*warnings, *model_info.warning(), *server.warning()),
        )

    def model_identity(self) -> ModelInfo | None:
        """``model_path``, ``quantization``, ``context_length`` (no size or parameters)."""
        path = self._model_info()[1]
        server = self._server()
        return ModelInfo(file_name=path.rstrip("/").rsplit("/", 1)[-1], path=path,
                         file_type=server.text("quantization") or None,
                         context_length=server.tokens("context_length"))

    def _on_error(self, status: int, body: str) -> EngineError | None:
        return EngineProtocolError(
            f"{self.base_url}/generate answered HTTP {status}: {error_text(body)}"
        )

    def generate(self, request: GenerationRequest) -> Generation:
        body = {
            "text": text_prompt(request.prompt_tokens, request.salt),
            "sampling_params": {
                "max_new_tokens": request.generate_tokens,
                "min_new_tokens": request.generate_tokens,
                "ignore_eos": True,
                "temperature": 0.0,
            },
            "stream": True,
        }
        url = f"{self.base_url}/generate"
        log = ChunkLog(request, url)
        notes: list[str] = []
        meta = Fields(self.name, url, {}, "meta_info", notes)
        last: dict[str, Any] = {}
        seen_text = ""
        seen_tokens = 0
        asked = request.generate_tokens
        for now, event in self._streams.events(url, body, request, self._on_error,
                                                stats=log.stats):
            last = event
            meta = Fields(self.name, url, event, notes=notes).inside("meta_info")
            text = event.get("text")
            text = text if isinstance(text, str) else ""
            if text.startswith(seen_text):
                new_text, seen_text = text[len(seen_text):], text
            else:
                new_text, seen_text = text, seen_text + text
            total = meta.tokens("completion_tokens", most=asked)
            if total is not None and total < seen_tokens:
                notes.append(f"meta_info.completion_tokens went down from {seen_tokens} to "
                             f"{total}")
                total = None
            if total is not None:
                n, seen_tokens = total - seen_tokens, total
            else:
                n = 1 if new_text else 0
                seen_tokens += n
            log.add(now, n, new_text)
        finish = meta.get("finish_reason")
        if finish is None and not log.stats.done:
            raise log.cut_short(self.name, "a meta_info.finish_reason or data: [DONE]", last)
        if not log.times_s:
            raise EngineProtocolError(
                f"{url} streamed no generated tokens (last meta_info {meta.raw!r:.200})"
            )
        stop = (meta.inside("finish_reason").text("type") if isinstance(finish, dict)
                else meta.text("finish_reason"))
        drafted, accepted = _draft_counts(meta)
        timings = meta.timings(EngineTimings(
            prompt_tokens=meta.tokens("prompt_tokens"),
            cached_prompt_tokens=meta.tokens("cached_tokens"),
            generated_tokens=meta.tokens("completion_tokens", most=asked),
            draft_tokens=drafted,
            draft_accepted_tokens=accepted,
        ))
        return log.generation(generated_tokens=timings.generated_tokens,
                              prompt_tokens=timings.prompt_tokens,
                              stop_reason=stop, engine=timings)


def _draft_counts(meta: Fields) -> tuple[int | None, int | None]:
    """Drafted and accepted tokens from ``meta_info`` (with speculation only)."""

    def first(*keys: str) -> int | None:
        return next((value for value in (meta.tokens(k) for k in keys if meta.has(k))
                     if value is not None), None)

    drafted = first("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num",
                    "spec_verify_ct")
    accepted = first("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
    return drafted, accepted if drafted is not None else None
