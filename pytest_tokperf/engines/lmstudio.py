"""Adapter for LM Studio's server: ``/v1/completions``, and chat with ``chat.end`` stats;
``max_tokens`` only caps, so the real count is recorded. Clocks: docs/engines.md."""

from __future__ import annotations

import re
from typing import Any

from pytest_tokperf.engines.base import get_json
from pytest_tokperf.engines.openai_compat import OpenAICompatible
from pytest_tokperf.engines.values import MAX_COUNT, Fields, Unusable, seconds_of, shown
from pytest_tokperf.engines.wire import ChunkLog, probe_ready, text_prompt, wrong_engine
from pytest_tokperf.errors import EngineError, EngineProtocolError
from pytest_tokperf.results import (EngineInfo, EngineTimings, Generation, GenerationRequest,
                                    ModelInfo)
from pytest_tokperf.transport.answers import error_text


class LMStudio(OpenAICompatible):
    name = "lmstudio"
    display = "LM Studio"

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._probe: dict[str, Any] | None = None
        self._v1_models: list[dict[str, Any]] | None = None
        """``GET /api/v1/models``'s list; empty when the build has no v1 REST API."""

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/api/v0/models",
                           self._looks_right, "no model list at GET /api/v0/models")

    def _catalog(self) -> list[dict[str, Any]]:
        listing = get_json(self._client, f"{self.base_url}/api/v0/models", "LM Studio model list")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise wrong_engine(self.name, self.base_url, "no model list at GET /api/v0/models",
                               self._client)
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)
                and m.get("type", "llm") in ("llm", "vlm")]

    def available_models(self) -> list[str]:
        try:
            return [m["id"] for m in self._catalog()]
        except EngineError:
            return []

    def model(self) -> str | None:
        """The asked-for model, else the one loaded (LM Studio serves loaded models first)."""
        if self._model is None:
            catalog = self._catalog()
            loaded = [m["id"] for m in catalog if m.get("state") == "loaded"]
            names = loaded or [m["id"] for m in catalog]
            self._model = names[0] if names else None
        return self._model

    def _probe_answer(self) -> dict[str, Any]:
        """One non-streamed two-token completion: the v0 API's runtime and model_info."""
        if self._probe is None:
            url = f"{self.base_url}/api/v0/completions"
            body = {"model": self.model(), "prompt": "Hello", "max_tokens": 2, "stream": False,
                    "temperature": 0.0}
            response = self._post(url, body, 120.0, " (LM Studio REST stats)")
            try:
                data = response.json()
            except ValueError as exc:
                raise EngineProtocolError(
                    f"{url} did not answer JSON: {error_text(response.text)}"
                ) from exc
            self._probe = data if isinstance(data, dict) else {}
        return self._probe

    def info(self) -> EngineInfo:
        catalog = self._catalog()
        self.check_model()
        said = Fields(self.name, f"{self.base_url}/api/v0/completions", self._probe_answer())
        runtime = said.inside("runtime")
        model_info = said.inside("model_info")
        stats = said.inside("stats")
        settings = dict(self._settings)
        loaded = [m["id"] for m in catalog if m.get("state") == "loaded"]
        settings["loaded_models"] = str(len(loaded))
        for key in ("arch", "quant", "format"):
            value = model_info.text(key)
            if value:
                settings[f"model_{key}"] = value
        draft = stats.text("draft_model")
        speculative = bool(stats.get("draft_model"))  # unusable: it may still draft
        if speculative:
            settings["draft_model"] = draft or "unnamed"
        warnings = []
        if len(loaded) > 1:
            warnings.append(
                f"{len(loaded)} models loaded at once in LM Studio ({', '.join(loaded)}): they "
                f"share memory and bandwidth, so decode is slower than with one"
            )
        if speculative:
            warnings.append(
                f"speculative decoding with draft model {draft!r}: decode "
                f"speed is not the base speed")
        name = runtime.text("name", refuse=True)  # the runtime and its version: the series key
        version = runtime.text("version", refuse=True)
        context = model_info.tokens("context_length")
        return EngineInfo(
            name=self.name,
            version=version or None,
            build=f"{name} {version}" if name and version else None,
            base_url=self.base_url,
            backend=name or None,
            model_name=self.model(),
            context_size=context,
            speculative=speculative,
            settings=tuple(sorted(settings.items())),
            warnings=(*warnings, *said.warning()),
        )

    def _v1_catalog(self) -> list[dict[str, Any]]:
        """``GET /api/v1/models``'s ``models``, or [] on builds without the v1 API."""
        if self._v1_models is None:
            try:
                listing = get_json(self._client, f"{self.base_url}/api/v1/models",
                                   "LM Studio v1 model list")
            except EngineError:
                listing = None
            models = listing.get("models") if isinstance(listing, dict) else None
            self._v1_models = [m for m in models if isinstance(m, dict)] \
                if isinstance(models, list) else []
        return self._v1_models

    def model_identity(self) -> ModelInfo | None:
        model = self.model()
        if model is None:
            return None
        for entry in self._v1_catalog():
            said = Fields(self.name, f"{self.base_url}/api/v1/models", entry)
            listed = entry.get("loaded_instances")
            instances = {i["id"] for i in listed if isinstance(i, dict)
                         and isinstance(i.get("id"), str)} if isinstance(listed, list) else set()
            key = said.text("key") or ""
            if model == key or model in instances or (key and key.endswith(f"/{model}")):
                return ModelInfo(
                    file_name=model,
                    file_bytes=said.count("size_bytes"),
                    architecture=said.text("architecture") or None,
                    parameter_count=size_label_count(entry.get("params_string")),
                    file_type=said.inside("quantization").text("name") or None,
                    context_length=said.tokens("max_context_length"),
                )
        for entry in self._catalog():
            if entry["id"] == model:
                said = Fields(self.name, f"{self.base_url}/api/v0/models", entry)
                return ModelInfo(
                    file_name=model,
                    architecture=said.text("arch") or None,
                    file_type=said.text("quantization") or None,
                    context_length=said.tokens("max_context_length"),
                )
        return None

    def generate(self, request: GenerationRequest) -> Generation:
        """A chat through the v1 REST API, with LM Studio's own stats, where it has one."""
        if not request.chat or not self._v1_catalog():
            return super().generate(request)
        body: dict[str, Any] = {
            "model": self.model(),
            "input": text_prompt(request.prompt_tokens, request.salt),
            "stream": True,
            "temperature": 0.0,
            "max_output_tokens": request.generate_tokens,
            "store": False,
        }
        url = f"{self.base_url}/api/v1/chat"
        log = ChunkLog(request, url)
        end: Fields | None = None
        last: object = None
        for now, event in self._streams.events(url, body, request, self._on_error,
                                                stats=log.stats):
            last = event
            kind = event.get("type")
            content = event.get("content")
            if kind in ("message.delta", "reasoning.delta") and isinstance(content, str):
                log.add(now, 1 if content else 0, content, reasoning=kind == "reasoning.delta")
            elif kind == "chat.end":
                end = Fields(self.name, url, event).inside("result")
        if end is None:
            raise log.cut_short(self.name, "its chat.end event", last)
        if not log.times_s:
            raise EngineProtocolError(f"{url} streamed no generated tokens ({end.raw!r:.200})")
        timings = chat_end_timings(end.inside("stats"), request.generate_tokens)
        return log.generation(generated_tokens=timings.generated_tokens,
                              prompt_tokens=timings.prompt_tokens, stop_reason=None,
                              engine=timings)


def chat_end_timings(stats: Fields, asked: int) -> EngineTimings:
    """``chat.end``'s ``result.stats`` as ``EngineTimings`` (docs/engines.md)."""
    generated = stats.tokens("total_output_tokens", most=asked)
    rate = stats.rate("tokens_per_second")
    return stats.timings(EngineTimings(
        prompt_tokens=stats.tokens("input_tokens"),
        prefill_s=stats.seconds("time_to_first_token_seconds"),
        generated_tokens=generated,
        decode_s=_decode_s(stats, generated, rate),
    ))


def _decode_s(stats: Fields, generated: int | None, rate: float | None) -> float | None:
    """LM Studio's decode time from its rate; None (noted) when no duration fits it."""
    if not generated or rate is None:
        return None
    try:
        return seconds_of(generated / rate)
    except Unusable as why:
        stats.notes.append(f"{stats.name('tokens_per_second')}={shown(rate)} (a decode "
                           f"{why})")
        return None


_SIZE_LABEL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMBT])", re.IGNORECASE)
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def size_label_count(label: Any) -> int | None:
    """``"7B"`` -> 7e9, ``"26B-A4B"`` -> 26e9 (total, not active): a size label, rounded."""
    match = _SIZE_LABEL.match(label) if isinstance(label, str) else None
    if match is None:
        return None
    count = float(match.group(1)) * _SCALE[match.group(2).lower()]
    return round(count) if count <= MAX_COUNT else None
