"""Adapter for llama.cpp's ``llama-server``, native ``/completion`` API.

Token-id prompts, ``n_predict`` with ``ignore_eos``, no prompt cache; the last SSE event
carries ``timings``. Wire notes: docs/design.md.
"""

from __future__ import annotations

import random
import re
from typing import Any

import httpx

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.engines.llama_server import llama_server_settings
from pytest_tokperf.engines.wire import (
    ChunkLog,
    count,
    json_field,
    probe_ready,
    text_prompt,
    wrong_engine,
)
from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.results import (
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    ModelInfo,
)

FIRST_PLAIN_TOKEN = 3 + 256
"""Skip <unk>/<s>/</s> and the 256 byte tokens of an SPM vocabulary."""


def prompt_token_ids(n_tokens: int, n_vocab: int, salt: int) -> list[int]:
    """A deterministic prompt of exactly ``n_tokens`` ids, unique at its start per salt."""
    low = FIRST_PLAIN_TOKEN if n_vocab > FIRST_PLAIN_TOKEN * 2 else 3
    rng = random.Random(f"tokperf-{salt}")
    return [rng.randrange(low, n_vocab) for _ in range(n_tokens)]


def parse_build(build_info: str | None) -> tuple[str | None, str | None]:
    """``"b11434-pypi-sdist"`` -> (``"b11434"``, ``"pypi-sdist"``)."""
    if not build_info:
        return None, None
    match = re.match(r"^(b\d+)-(.*)$", build_info)
    if match:
        return match.group(1), match.group(2)
    return build_info, None


class LlamaServer(HttpAdapter):
    """A running llama-server reached over HTTP."""

    name = "llama-server"

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._n_vocab: int | None = None

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/health",
                           lambda r: json_field(r, "status"), 'no {"status": ...} at GET /health')

    def _vocab_size(self) -> int:
        if self._n_vocab is None:
            models = get_json(self._client, f"{self.base_url}/v1/models", "model list")
            meta = _first_model_meta(models)
            if not meta or not isinstance(meta.get("n_vocab"), int):
                raise EngineProtocolError(
                    f"{self.base_url}/v1/models has no data[0].meta.n_vocab: {models!r:.200}. "
                    f"Is this a llama-server with a model loaded?"
                )
            self._n_vocab = int(meta["n_vocab"])
        return self._n_vocab

    def info(self) -> EngineInfo:
        try:
            props = get_json(self._client, f"{self.base_url}/props", "server properties")
        except EngineProtocolError as exc:
            # mlx_lm.server answers /health too, then 404s /props: name the engine there
            raise wrong_engine(self.name, self.base_url, f"GET /props failed: {exc}",
                               self._client) from exc
        if not isinstance(props, dict) or "build_info" not in props:
            raise wrong_engine(self.name, self.base_url,
                               f"no build_info in GET /props: {props!r:.120}", self._client)
        build, _commit = parse_build(props.get("build_info"))
        defaults = props.get("default_generation_settings") or {}
        settings = dict(self._settings)
        settings["total_slots"] = str(props.get("total_slots"))
        # typed speed settings (args, /props, start-up log): llama_server.speed_settings owns them
        server = llama_server_settings(settings, props)
        settings.update(server.to_pairs())
        settings.pop("log_path", None)  # read above; a per-process path is not identity
        configured = bool(defaults.get("speculative", False)) or "draft_model" in settings
        # b11434's /props no longer says; each slot in /slots still does.
        drafting = self._slots_drafting()
        warnings: list[str] = []
        if drafting and not configured:
            settings["speculative_source"] = "/slots"
            warnings.append(
                f"llama-server at {self.base_url} drafts (GET /slots: speculative true) "
                "though no draft model was configured here: its decode speed is not the base "
                "speed, so the result is kept apart from the base series")
        return EngineInfo(
            name=self.name,
            version=build,
            # builds.identity's label: one build_info can be several binaries
            build=settings.get("build_label") or props.get("build_info"),
            base_url=self.base_url,
            backend=server.backend,
            model_path=props.get("model_path"),
            model_name=props.get("model_alias") or props.get("model_path"),
            context_size=defaults.get("n_ctx"),
            threads=_int_or_none(settings.get("threads")),
            speculative=configured or bool(drafting),
            settings=tuple(sorted(settings.items())),
            warnings=tuple(warnings),
        )

    def _slots_drafting(self) -> bool | None:
        """Whether any slot can draft (``GET /slots``); None when the server won't say."""
        try:
            response = self._client.get(f"{self.base_url}/slots", timeout=10.0)
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        try:
            slots = response.json()
        except ValueError:
            return None
        if not isinstance(slots, list):
            return None
        return any(isinstance(slot, dict) and slot.get("speculative") is True for slot in slots)

    def model_identity(self) -> ModelInfo | None:
        """The model as ``/props`` and ``/v1/models`` describe it (no file size)."""
        props = get_json(self._client, f"{self.base_url}/props", "server properties")
        path = props.get("model_path") if isinstance(props, dict) else None
        if not path:
            return None
        meta = _first_model_meta(get_json(self._client, f"{self.base_url}/v1/models",
                                          "model list")) or {}
        ftype = meta.get("ftype") or (props.get("model_ftype") if isinstance(props, dict) else None)
        return ModelInfo(
            file_name=str(path).replace("\\", "/").rsplit("/", 1)[-1],
            path=str(path),
            parameter_count=count(meta.get("n_params")),
            file_type=str(ftype) if ftype else None,
            context_length=count(meta.get("n_ctx_train")),
        )

    supports_chat = True

    def generate(self, request: GenerationRequest) -> Generation:
        if request.chat:
            return self._chat(request)
        body: dict[str, Any] = {
            "prompt": prompt_token_ids(request.prompt_tokens, self._vocab_size(), request.salt),
            "n_predict": request.generate_tokens,
            "ignore_eos": True,
            "cache_prompt": request.reuse_prefix,
            "temperature": 0.0,
            "seed": 1234,
            "stream": True,
        }
        url = f"{self.base_url}/completion"
        log = ChunkLog(request, url)
        final: dict[str, Any] | None = None
        last: object = None
        for now, event in self._streams.events(url, body, request, stats=log.stats):
            last = event
            n = len(event.get("tokens") or ()) or (1 if event.get("content") else 0)
            log.add(now, n, str(event.get("content", "")))
            if event.get("stop"):
                final = event
        if final is None:
            raise log.cut_short(self.name, "a final (stop) event", last)
        timings = _timings(final.get("timings"))
        return log.generation(
            generated_tokens=timings.generated_tokens if timings else final.get("tokens_predicted"),
            prompt_tokens=timings.prompt_tokens if timings else final.get("tokens_evaluated"),
            stop_reason=final.get("stop_type"), engine=timings)

    def _chat(self, request: GenerationRequest) -> Generation:
        """``/v1/chat/completions`` through the template; thinking and answer apart."""
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": text_prompt(request.prompt_tokens, request.salt)}],
            "max_tokens": request.generate_tokens,
            "ignore_eos": True,
            "cache_prompt": request.reuse_prefix,
            "temperature": 0.0,
            "seed": 1234,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        url = f"{self.base_url}/v1/chat/completions"
        log = ChunkLog(request, url)
        final: dict[str, Any] | None = None
        last: object = None
        for now, event in self._streams.events(url, body, request, stats=log.stats):
            last = event
            choices = event.get("choices")
            first = choices[0] if isinstance(choices, list) and choices else None
            delta = first.get("delta") if isinstance(first, dict) else None
            delta = delta if isinstance(delta, dict) else {}
            thought = str(delta.get("reasoning_content") or "")
            answer = str(delta.get("content") or "")
            if thought or answer:
                log.add(now, 1, thought + answer, reasoning=bool(thought) and not answer)
            if "timings" in event or "usage" in event:
                final = event
        if final is None:
            raise log.cut_short(self.name, "its usage/timings chunk", last)
        timings = _timings(final.get("timings"))
        usage = final.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        return log.generation(
            generated_tokens=timings.generated_tokens if timings else usage.get("completion_tokens"),
            prompt_tokens=timings.prompt_tokens if timings else usage.get("prompt_tokens"),
            stop_reason=None, engine=timings)


def _first_model_meta(models: Any) -> dict[str, Any] | None:
    if isinstance(models, dict):
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], dict):
            meta = data[0].get("meta")
            return meta if isinstance(meta, dict) else None
    return None


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _timings(raw: Any) -> EngineTimings | None:
    if not isinstance(raw, dict):
        return None

    def seconds(key: str) -> float | None:
        value = raw.get(key)
        return float(value) / 1000.0 if isinstance(value, (int, float)) else None

    def count(key: str) -> int | None:
        value = raw.get(key)
        return int(value) if isinstance(value, (int, float)) else None

    return EngineTimings(
        prompt_tokens=count("prompt_n"),
        cached_prompt_tokens=count("cache_n"),
        prefill_s=seconds("prompt_ms"),
        generated_tokens=count("predicted_n"),
        decode_s=seconds("predicted_ms"),
        draft_tokens=count("draft_n"),
        draft_accepted_tokens=count("draft_n_accepted"),
    )
