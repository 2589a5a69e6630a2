"""Adapter for vLLM's OpenAI-compatible server (vLLM
``entrypoints/openai/completion/protocol.py``; https://docs.vllm.ai/en/latest/features/per_request_metrics).

- Exact counts: ``max_tokens: N`` with ``min_tokens: N`` and ``ignore_eos: true``; the
  prompt is sent as token ids (``/v1/completions`` takes a list of ints), cut to exactly
  the asked length from ``POST /tokenize`` of the salted text; without ``/tokenize`` the
  text goes as is and the engine's ``usage.prompt_tokens`` is recorded.
- Prefix cache: ``cache_salt`` per request salts the cache key; ``cached_tokens`` in
  ``usage.prompt_tokens_details`` (only with ``--enable-prompt-tokens-details``) is checked.
- Usage arrives in one final chunk with ``choices: []``; ``continuous_usage_stats`` adds
  it to every chunk, which is how the tokens in a multi-token chunk
  (``--stream-interval``) are counted.
- Version from ``GET /version``; speculative decoding shows as ``vllm:spec_decode_*``
  series in ``GET /metrics`` (registered only with ``--speculative-config``) and as
  ``metrics.speculative_decoding`` on a request when per-request metrics are on.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from pytest_tokperf.engines.base import get_json
from pytest_tokperf.engines.openai_compat import OpenAICompatible
from pytest_tokperf.engines.wire import count, json_field, probe_ready, text_prompt, wrong_engine
from pytest_tokperf.errors import EngineError
from pytest_tokperf.results import EngineInfo, GenerationRequest, ModelInfo


class VLLM(OpenAICompatible):
    name = "vllm"
    display = "vLLM"
    send_ignore_eos = True
    continuous_usage = True

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._tokenize = True

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/version",
                           lambda r: json_field(r, "version"), "no version at GET /version")

    def prompt(self, request: GenerationRequest) -> str | list[int]:
        if not self._tokenize:
            return text_prompt(request.prompt_tokens, request.salt)
        longer = request.prompt_tokens + request.prompt_tokens // 2 + 8
        body: dict[str, Any] = {"prompt": text_prompt(longer, request.salt)}
        if self.model() is not None:
            body["model"] = self.model()
        try:
            response = self._client.post(f"{self.base_url}/tokenize", json=body, timeout=30.0)
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            data = None
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or len(tokens) < request.prompt_tokens:
            self._tokenize = False
            return text_prompt(request.prompt_tokens, request.salt)
        return [int(t) for t in tokens[: request.prompt_tokens]]

    def completion_body(self, request: GenerationRequest) -> dict[str, Any]:
        body = super().completion_body(request)
        body["min_tokens"] = request.generate_tokens
        body["cache_salt"] = f"tokperf-{request.salt}"
        return body

    def info(self) -> EngineInfo:
        version = get_json(self._client, f"{self.base_url}/version", "vLLM version")
        if not isinstance(version, dict) or "version" not in version:
            raise wrong_engine(self.name, self.base_url, "no version at GET /version", self._client)
        self.check_model()
        card = self._model_card()
        settings = dict(self._settings)
        if card:
            settings["max_model_len"] = str(card.get("max_model_len"))
            if card.get("root") and card.get("root") != card.get("id"):
                settings["model_root"] = str(card["root"])
        metrics = self._metrics_text()
        speculative = "vllm:spec_decode" in metrics
        prefix = re.search(r'enable_prefix_caching="(\w+)"', metrics)
        if prefix:
            settings["prefix_caching"] = prefix.group(1).lower()
        warnings = ("speculative decoding is configured (vllm:spec_decode_* in /metrics): "
                    "decode speed is not the base speed",) if speculative else ()
        return EngineInfo(
            name=self.name,
            version=str(version["version"]),
            build=self._fingerprint or f"vllm-{version['version']}",
            base_url=self.base_url,
            model_path=str(card.get("root")) if card and card.get("root") else None,
            model_name=self.model(),
            context_size=count(card.get("max_model_len")) if card else None,
            speculative=speculative,
            settings=tuple(sorted(settings.items())),
            warnings=warnings,
        )

    def model_identity(self) -> ModelInfo | None:
        """What ``GET /v1/models`` says of the served model: its name, ``root`` (the path
        or Hugging Face id it was loaded from) and ``max_model_len``; vLLM reports no size,
        quantization or parameter count there."""
        card = self._model_card()
        if card is None:
            return None
        root = card.get("root")
        return ModelInfo(file_name=str(card.get("id")), path=str(root) if root else None,
                         context_length=count(card.get("max_model_len")))

    def _model_card(self) -> dict[str, Any] | None:
        try:
            listing = get_json(self._client, f"{self.base_url}/v1/models", "model list")
        except EngineError:
            return None
        data = listing.get("data") if isinstance(listing, dict) else None
        for card in data if isinstance(data, list) else []:
            if isinstance(card, dict) and card.get("id") == self.model():
                return card
        return None

    def _metrics_text(self) -> str:
        try:
            response = self._client.get(f"{self.base_url}/metrics", timeout=5.0)
        except httpx.HTTPError:
            return ""
        return response.text if response.status_code == 200 else ""
