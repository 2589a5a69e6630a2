"""Adapter for SGLang's native ``/generate`` API (exact counts, no engine timings).

Text may stream cumulative or incremental; ``meta_info.completion_tokens`` counts tokens.
"""

from __future__ import annotations

from typing import Any

import httpx

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.transport.answers import error_text
from pytest_tokperf.engines.wire import (
    ChunkLog,
    count,
    probe_ready,
    text_prompt,
    wrong_engine,
)
from pytest_tokperf.errors import EngineError, EngineProtocolError
from pytest_tokperf.results import (
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    ModelInfo,
)

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
                           lambda r: self._model_info_from(r) is not None,
                           "no model_path at GET /get_model_info")

    @staticmethod
    def _model_info_from(response: httpx.Response) -> dict[str, Any] | None:
        if response.status_code != 200:
            return None
        try:
            data = response.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) and "model_path" in data else None

    def _model_info(self) -> dict[str, Any]:
        info = get_json(self._client, f"{self.base_url}/get_model_info", "SGLang model info")
        if not isinstance(info, dict) or "model_path" not in info:
            raise wrong_engine(self.name, self.base_url, "no model_path at GET /get_model_info",
                               self._client)
        return info

    def _server_info(self) -> dict[str, Any]:
        for path in ("/get_server_info", "/server_info"):
            try:
                data = get_json(self._client, f"{self.base_url}{path}", "SGLang server info")
            except EngineProtocolError:
                continue
            if isinstance(data, dict):
                return data
        return {}

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
        model_info = self._model_info()
        server = self._server_info()
        model_path = str(model_info.get("model_path"))
        served_name = server.get("served_model_name")
        self._check_model((model_path, str(served_name) if served_name else ""))
        settings = dict(self._settings)
        for key in SERVER_SETTINGS:
            if server.get(key) is not None:
                settings[key] = str(server[key])
        if model_info.get("weight_version") is not None:
            settings["weight_version"] = str(model_info["weight_version"])
        speculative = bool(server.get("speculative_algorithm"))
        warnings = (f"speculative decoding ({server['speculative_algorithm']}) is on: decode "
                    f"speed is not the base speed",) if speculative else ()
        version = server.get("version")
        return EngineInfo(
            name=self.name,
            version=str(version) if version else None,
            build=f"sglang-{version}" if version else None,
            base_url=self.base_url,
            backend=str(server["device"]) if server.get("device") else None,
            model_path=model_path,
            model_name=str(served_name) if served_name else model_path,
            context_size=count(server.get("context_length")),
            speculative=speculative,
            settings=tuple(sorted(settings.items())),
            warnings=warnings,
        )

    def model_identity(self) -> ModelInfo | None:
        """``model_path``, ``quantization``, ``context_length`` (no size or parameters)."""
        path = str(self._model_info().get("model_path"))
        server = self._server_info()
        quant = server.get("quantization")
        return ModelInfo(file_name=path.rstrip("/").rsplit("/", 1)[-1], path=path,
                         file_type=str(quant) if quant else None,
                         context_length=count(server.get("context_length")))

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
        meta: dict[str, Any] = {}
        last: dict[str, Any] = {}
        seen_text = ""
        seen_tokens = 0
        for now, event in self._streams.events(url, body, request, self._on_error,
                                                stats=log.stats):
            last = event
            meta_info = event.get("meta_info")
            meta = meta_info if isinstance(meta_info, dict) else {}
            text = str(event.get("text") or "")
            if text.startswith(seen_text):
                new_text, seen_text = text[len(seen_text):], text
            else:
                new_text, seen_text = text, seen_text + text
            total = count(meta.get("completion_tokens"))
            if total is not None:
                n, seen_tokens = total - seen_tokens, total
            else:
                n = 1 if new_text else 0
            log.add(now, n, new_text)
        if meta.get("finish_reason") is None and not log.stats.done:
            raise log.cut_short(self.name, "a meta_info.finish_reason or data: [DONE]", last)
        if not log.times_s:
            raise EngineProtocolError(
                f"{url} streamed no generated tokens (last meta_info {meta!r:.200})"
            )
        drafted, accepted = _draft_counts(meta)
        timings = EngineTimings(
            prompt_tokens=count(meta.get("prompt_tokens")),
            cached_prompt_tokens=count(meta.get("cached_tokens")),
            generated_tokens=count(meta.get("completion_tokens")),
            draft_tokens=drafted,
            draft_accepted_tokens=accepted,
        )
        finish = meta.get("finish_reason")
        stop = finish.get("type") if isinstance(finish, dict) else finish
        return log.generation(generated_tokens=timings.generated_tokens,
                              prompt_tokens=timings.prompt_tokens,
                              stop_reason=str(stop) if stop is not None else None, engine=timings)


def _draft_counts(meta: dict[str, Any]) -> tuple[int | None, int | None]:
    """Drafted and accepted tokens from ``meta_info`` (with speculation only)."""

    def first(*keys: str) -> int | None:
        return next((count(meta[k]) for k in keys if count(meta.get(k)) is not None), None)

    drafted = first("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num",
                    "spec_verify_ct")
    accepted = first("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
    return drafted, accepted if drafted is not None else None
