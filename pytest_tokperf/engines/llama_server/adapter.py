"""Adapter for llama.cpp's ``llama-server``, native ``/completion`` API: token-id prompts,
``n_predict`` with ``ignore_eos``, no prompt cache; the last SSE event carries ``timings``.
Clocks: docs/engines.md."""

from __future__ import annotations

import random
import re
from typing import Any

import httpx

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.engines.llama_server import llama_server_settings
from pytest_tokperf.engines.openai_compat import llama_cpp_timings
from pytest_tokperf.engines.values import MAX_TOKENS, Fields, int_or_none
from pytest_tokperf.engines.wire import (ChunkLog, json_field, probe_ready, text_prompt,
                                         wrong_engine)
from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.results import EngineInfo, Generation, GenerationRequest, ModelInfo

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
            url = f"{self.base_url}/v1/models"
            models = get_json(self._client, url, "model list")
            meta = Fields(self.name, url, _first_model_meta(models) or {}, "data[0].meta")
            n_vocab = meta.count("n_vocab", most=MAX_TOKENS, refuse=True)
            if n_vocab is None:
                raise EngineProtocolError(
                    f"{url} has no data[0].meta.n_vocab: {models!r:.200}. "
                    f"Is this a llama-server with a model loaded?"
                )
            if n_vocab < 4:
                raise meta.refusal("n_vocab", n_vocab, "too few tokens to make a prompt of")
            self._n_vocab = n_vocab
        return self._n_vocab

    def info(self) -> EngineInfo:
        url = f"{self.base_url}/props"
        try:
            props = get_json(self._client, url, "server properties")
        except EngineProtocolError as exc:
            # mlx_lm.server answers /health too, then 404s /props: name the engine there
            raise wrong_engine(self.name, self.base_url, f"GET /props failed: {exc}",
                               self._client) from exc
        if not isinstance(props, dict) or "build_info" not in props:
            raise wrong_engine(self.name, self.base_url,
                               f"no build_info in GET /props: {props!r:.120}", self._client)
        said = Fields(self.name, url, props)
        build_info = said.text("build_info", refuse=True)  # the build: the series key
        build, _commit = parse_build(build_info)
        defaults = said.inside("default_generation_settings")
        settings = dict(self._settings)
        settings["total_slots"] = str(said.count("total_slots", most=MAX_TOKENS))
        # typed speed settings (args, /props, start-up log): engines.speed_settings owns them
        server = llama_server_settings(settings, props)
        settings.update(server.to_pairs())
        settings.pop("log_path", None)  # read above; a per-process path is not identity
        defaults.flag("speculative")  # noted unless true or false; truthy: it may draft
        configured = bool(defaults.get("speculative")) or "draft_model" in settings
        # b11434's /props no longer says; each slot in /slots still does.
        drafting = self._slots_drafting()
        warnings: list[str] = []
        if drafting and not configured:
            settings["speculative_source"] = "/slots"
            warnings.append(
                f"llama-server at {self.base_url} drafts (GET /slots: speculative true) "
                "though no draft model was configured here: its decode speed is not the base "
                "speed, so the result is kept apart from the base series")
        model_path = said.text("model_path")
        model_name = said.text("model_alias") or model_path
        context_size = defaults.tokens("n_ctx")
        return EngineInfo(
            name=self.name,
            version=build,
            # builds.identity's label: one build_info can be several binaries
            build=settings.get("build_label") or build_info,
            base_url=self.base_url,
            backend=server.backend,
            model_path=model_path,
            model_name=model_name,
            context_size=context_size,
            threads=int_or_none(settings.get("threads")),
            speculative=configured or bool(drafting),
            settings=tuple(sorted(settings.items())),
            warnings=(*warnings, *said.warning()),
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
        url = f"{self.base_url}/props"
        props = Fields(self.name, url, get_json(self._client, url, "server properties"))
        path = props.text("model_path")
        if not path:
            return None
        models = f"{self.base_url}/v1/models"
        meta = Fields(self.name, models, _first_model_meta(get_json(self._client, models,
                                                                    "model list")) or {})
        ftype = meta.text("ftype") or props.text("model_ftype")
        return ModelInfo(
            file_name=path.replace("\\", "/").rsplit("/", 1)[-1],
            path=path,
            parameter_count=meta.count("n_params"),
            file_type=ftype or None,
            context_length=meta.tokens("n_ctx_train"),
        )

    supports_chat = True

    def generate(self, request: GenerationRequest) -> Generation:
        """Token ids to ``/completion``; a chat goes through the template at
        ``/v1/chat/completions``, thinking and answer apart."""
        chat, asked = request.chat, request.generate_tokens
        body: dict[str, Any] = {"ignore_eos": True, "cache_prompt": request.reuse_prefix,
                                "temperature": 0.0, "seed": 1234, "stream": True}
        if chat:
            url, what = f"{self.base_url}/v1/chat/completions", "its usage/timings chunk"
            prompt = text_prompt(request.prompt_tokens, request.salt)
            body.update(messages=[{"role": "user", "content": prompt}], max_tokens=asked,
                        stream_options={"include_usage": True})
        else:
            url, what = f"{self.base_url}/completion", "a final (stop) event"
            body.update(n_predict=asked, prompt=prompt_token_ids(
                request.prompt_tokens, self._vocab_size(), request.salt))
        log = ChunkLog(request, url)
        final: dict[str, Any] | None = None
        last: object = None
        for now, event in self._streams.events(url, body, request, stats=log.stats):
            last = event
            if not chat:
                tokens, content = event.get("tokens"), event.get("content")
                text = content if isinstance(content, str) else ""
                log.add(now, len(tokens) if isinstance(tokens, list) and tokens
                        else (1 if text else 0), text)
                final = event if event.get("stop") else final
            else:
                choices = event.get("choices")
                first = choices[0] if isinstance(choices, list) and choices else None
                delta = first.get("delta") if isinstance(first, dict) else None
                delta = delta if isinstance(delta, dict) else {}
                thought, answer = delta.get("reasoning_content"), delta.get("content")
                thought = thought if isinstance(thought, str) else ""
                answer = answer if isinstance(answer, str) else ""
                if thought or answer:
                    log.add(now, 1, thought + answer, reasoning=bool(thought) and not answer)
                if "timings" in event or "usage" in event:
                    final = event
        if final is None:
            raise log.cut_short(self.name, what, last)
        if not log.times_s:
            raise EngineProtocolError(f"{url} streamed no generated tokens (the final event: "
                                      f"{final!r:.200})")
        said = Fields(self.name, url, final)
        timings = (llama_cpp_timings(said.inside("timings"), asked) if said.has("timings")
                   else None)
        counts = said.inside("usage") if chat else said
        generated, prompted = (("completion_tokens", "prompt_tokens") if chat
                               else ("tokens_predicted", "tokens_evaluated"))
        return log.generation(
            generated_tokens=timings.generated_tokens if timings
            else counts.tokens(generated, most=asked),
            prompt_tokens=timings.prompt_tokens if timings else counts.tokens(prompted),
            stop_reason=None if chat else said.text("stop_type"), engine=said.noted(timings))


def _first_model_meta(models: Any) -> dict[str, Any] | None:
    if isinstance(models, dict):
        data = models.get("data")
        if isinstance(data, list) and data and isinstance(data[0], dict):
            meta = data[0].get("meta")
            return meta if isinstance(meta, dict) else None
    return None

