"""Adapter for vLLM's OpenAI-compatible server: exact counts, token-id prompts,
``cache_salt``; the engine's clock is the growth of its ``/metrics`` histograms."""

from __future__ import annotations

import math
import re
import shutil
import time
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import httpx

from pytest_tokperf.engines.base import get_json
from pytest_tokperf.engines.openai_compat import OpenAICompatible
from pytest_tokperf.engines.values import (MAX_TOKENS, Fields, Unusable, count_or_none, seconds_of,
                                           shown)
from pytest_tokperf.engines.wire import json_field, probe_ready, text_prompt, wrong_engine
from pytest_tokperf.errors import EngineError
from pytest_tokperf.hardware.placement import DEVICE_KINDS
from pytest_tokperf.results import EngineInfo, Generation, GenerationRequest, ModelInfo


class VLLM(OpenAICompatible):
    name = "vllm"
    display = "vLLM"
    send_ignore_eos = True
    continuous_usage = True

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._tokenize = True
        self._prefix_caching: str | None = None

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
        ids = ([count_or_none(t, MAX_TOKENS) for t in tokens[: request.prompt_tokens]]
               if isinstance(tokens, list) else [])
        if len(ids) < request.prompt_tokens or None in ids:
            self._tokenize = False
            return text_prompt(request.prompt_tokens, request.salt)
        return [t for t in ids if t is not None]

    def completion_body(self, request: GenerationRequest) -> dict[str, Any]:
        body = super().completion_body(request)
        body["min_tokens"] = request.generate_tokens
        body["cache_salt"] = f"tokperf-{request.salt}"
        body["return_token_ids"] = True  # each chunk's token ids: "text": "" still counts
        return body

    def generate(self, request: GenerationRequest) -> Generation:
        before = histograms(self._metrics_text())
        generation = super().generate(request)
        engine = generation.engine
        if engine is None or engine.decode_s is not None or not before:
            return generation
        for attempt in range(3):  # the histograms are updated as the request finishes
            after = histograms(self._metrics_text())
            itl = _grown(before, after, "vllm:inter_token_latency_seconds")
            if itl is not None and itl[0] == generation.generated_tokens - 1:
                ttft = _grown(before, after, "vllm:time_to_first_token_seconds")
                prefill = ttft[1] if ttft is not None and ttft[0] == 1 else engine.prefill_s
                decode, why = _seconds(itl[1], "vllm:inter_token_latency_seconds_sum")
                prefill, also = _seconds(prefill, "vllm:time_to_first_token_seconds_sum")
                dropped = (*engine.dropped, *(w for w in (why, also) if w))
                return replace(generation, engine=replace(engine, decode_s=decode,
                                                          prefill_s=prefill, dropped=dropped))
            time.sleep(0.05 * (attempt + 1))
        return generation

    def prompt_cache_off(self) -> str | None:
        flags = dict(self._settings).get("clean_flags", "") + " " + dict(self._settings).get(
            "server_args", "")
        if "--no-enable-prefix-caching" in flags.split():
            return "started with --no-enable-prefix-caching"
        if self._prefix_caching is None:
            self._prefix_caching = _prefix_caching(self._metrics_text())
        if self._prefix_caching == "false":
            return 'GET /metrics: enable_prefix_caching="False"'
        return None

    def info(self) -> EngineInfo:
        url = f"{self.base_url}/version"
        version = get_json(self._client, url, "vLLM version")
        if not isinstance(version, dict) or "version" not in version:
            raise wrong_engine(self.name, self.base_url, "no version at GET /version", self._client)
        text = Fields(self.name, url, version).text("version", refuse=True)  # the series key
        self.check_model()
        card = Fields(self.name, f"{self.base_url}/v1/models", self._model_card() or {},
                      "data[]")
        settings = dict(self._settings)
        settings.pop("log_path", None)  # a per-process path is not identity
        context = card.tokens("max_model_len")
        root = card.text("root")
        if card.raw:
            settings["max_model_len"] = str(context)
            if root and root != card.get("id"):
                settings["model_root"] = root
        metrics = self._metrics_text()
        speculative = "vllm:spec_decode" in metrics
        self._prefix_caching = _prefix_caching(metrics)
        if self._prefix_caching:
            settings["prefix_caching"] = self._prefix_caching
        device = _device(metrics, settings) or _local_cpu(self.base_url)
        if device is not None:
            settings["device"], settings["device_source"] = device
        warnings = (("speculative decoding is configured (vllm:spec_decode_* in /metrics): "
                     "decode speed is not the base speed"),) if speculative else ()
        return EngineInfo(
            name=self.name,
            version=text,
            build=self._fingerprint or (f"vllm-{text}" if text is not None else None),
            base_url=self.base_url,
            model_path=root or None,
            model_name=self.model(),
            context_size=context,
            speculative=speculative,
            settings=tuple(sorted(settings.items())),
            warnings=(*warnings, *card.warning()),
        )

    def model_identity(self) -> ModelInfo | None:
        """What ``GET /v1/models`` says: name, ``root``, ``max_model_len``."""
        found = self._model_card()
        if found is None:
            return None
        card = Fields(self.name, f"{self.base_url}/v1/models", found, "data[]")
        return ModelInfo(file_name=str(card.get("id")), path=card.text("root") or None,
                         context_length=card.tokens("max_model_len"))

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


def _prefix_caching(metrics: str) -> str | None:
    found = re.search(r'enable_prefix_caching="(\w+)"', metrics)
    return found.group(1).lower() if found else None


def _device(metrics: str, settings: dict[str, str]) -> tuple[str, str] | None:
    """Where vLLM runs (its start platform, else ``/metrics`` labels); None when unknown."""
    target = settings.get("vllm_target_device")
    if target:
        return target, f"vLLM started with VLLM_TARGET_DEVICE={target}"
    found = re.search(r'\bdevice(?:_type)?="(\w+)"', metrics)
    if found and found.group(1).lower() in DEVICE_KINDS:
        return found.group(1).lower(), f'vLLM GET /metrics: device="{found.group(1)}"'
    return None


_SERIES = re.compile(r"^(vllm:[a-z_]+)_(sum|count)(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.MULTILINE)


def histograms(metrics: str) -> dict[str, float]:
    """``{"vllm:x_seconds_sum": total, "..._count": total}`` over every label set."""
    out: dict[str, float] = {}
    for name, kind, value in _SERIES.findall(metrics):
        try:
            number = float(value)
        except ValueError:
            continue
        key = f"{name}_{kind}"
        out[key] = out.get(key, 0.0) + number
    return out


def _seconds(value: float | None, name: str) -> tuple[float | None, str | None]:
    """A duration read off ``/metrics``, or None and why it cannot be used."""
    if value is None:
        return None, None
    try:
        return seconds_of(value), None
    except Unusable as why:
        return None, f"GET /metrics {name} grew by {shown(value)} ({why})"


def _grown(before: dict[str, float], after: dict[str, float], name: str
           ) -> tuple[int, float] | None:
    """(observations, seconds) a histogram gained between two readings."""
    keys = (f"{name}_count", f"{name}_sum")
    if not all(k in before and k in after for k in keys):
        return None
    observed = after[keys[0]] - before[keys[0]]
    if not math.isfinite(observed):
        return None
    return round(observed), after[keys[1]] - before[keys[1]]


def _local_cpu(base_url: str) -> tuple[str, str] | None:
    """A loopback vLLM on a machine without an NVIDIA driver runs on its CPU platform."""
    host = urlsplit(base_url).hostname or ""
    if host in ("127.0.0.1", "localhost", "::1") and shutil.which("nvidia-smi") is None:
        return "cpu", "vLLM on this machine's loopback, which has no NVIDIA driver"
    return None
