"""Adapter for Apple MLX's ``mlx_lm.server`` (ml-explore/mlx-lm ``mlx_lm/server.py``,
``mlx_lm/SERVER.md``).

OpenAI-compatible ``/v1/completions``; no ``ignore_eos``, so ``max_tokens`` only caps
and the real count is recorded. With ``stream_options.include_usage`` one extra chunk
(``object: "chat.completion"`` even for text completions) carries ``usage`` with
``prompt_tokens_details.cached_tokens`` from its LRU prompt cache, then ``[DONE]``.
A chunk can hold several tokens (text held back while it may still match a stop
sequence); ``: keepalive`` comments arrive during long prompts. The server reports no
timings of its own.

Identity: ``system_fingerprint`` is ``<mlx_lm>-<mlx>-<platform>-<gpu arch>``, read from
one tiny non-streamed request. Without ``--tokperf-model`` no ``model`` is sent and the
server uses its ``--model`` (``/v1/models`` lists the whole HF cache, so its first entry
says nothing about what is loaded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

from pytest_tokperf.engines.openai_compat import OpenAICompatible
from pytest_tokperf.engines.answers import error_text
from pytest_tokperf.engines.wire import json_field, probe_ready, wrong_engine
from pytest_tokperf.errors import EngineError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import EngineInfo

_VERSION = re.compile(r"^\d+(\.\d+)+\w*$")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    mlx_lm: str
    mlx: str
    platform: str
    gpu_arch: str


def parse_fingerprint(text: str | None) -> Fingerprint | None:
    """``"0.32.0-0.29.1-macOS-15.5-arm64-arm-64bit-applegpu_g15s"`` -> its four parts."""
    if not text:
        return None
    parts = text.split("-")
    if len(parts) < 4 or not _VERSION.match(parts[0]) or not _VERSION.match(parts[1]):
        return None
    return Fingerprint(parts[0], parts[1], "-".join(parts[2:-1]), parts[-1])


class MLX(OpenAICompatible):
    name = "mlx"
    display = "mlx_lm.server"

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/health",
                           lambda r: json_field(r, "status", "ok"),
                           'no {"status": "ok"} at GET /health')

    def model(self) -> str | None:
        return self._requested_model

    def check_model(self) -> None:
        """mlx_lm loads any HF repo on request, so an unlisted name is not yet an error."""

    def _on_error(self, status: int, body: str) -> EngineError | None:
        if self._requested_model is not None and status in (404, 500):
            return self.unknown_model(f"HTTP {status}: {error_text(body)}")
        return None

    def _fingerprint_now(self) -> str | None:
        if self._fingerprint is None:
            url = f"{self.base_url}/v1/completions"
            body: dict[str, Any] = {"prompt": "Hello", "max_tokens": 1, "stream": False}
            if self.model() is not None:
                body["model"] = self.model()
            try:
                response = self._client.post(url, json=body, timeout=120.0)
            except httpx.HTTPError as exc:
                raise EngineUnavailable(f"cannot reach {url}: {exc}") from exc
            if response.status_code >= 400:
                raise self._on_error(response.status_code, response.text) or EngineProtocolError(
                    f"{url} answered HTTP {response.status_code}: {error_text(response.text)}"
                )
            try:
                data = response.json()
            except ValueError:
                data = None
            if isinstance(data, dict) and isinstance(data.get("system_fingerprint"), str):
                self._fingerprint = data["system_fingerprint"]
        return self._fingerprint

    def info(self) -> EngineInfo:
        fingerprint = parse_fingerprint(self._fingerprint_now())
        if fingerprint is None:
            raise wrong_engine(
                self.name, self.base_url,
                f"system_fingerprint {self._fingerprint!r} is not <mlx_lm>-<mlx>-<platform>-<gpu>",
                self._client,
            )
        settings = dict(self._settings)
        settings["mlx_version"] = fingerprint.mlx
        settings["platform"] = fingerprint.platform
        settings["speculative"] = "unknown: mlx_lm.server does not report --draft-model"
        return EngineInfo(
            name=self.name,
            version=fingerprint.mlx_lm,
            build=self._fingerprint,
            base_url=self.base_url,
            backend=f"mlx {fingerprint.mlx} {fingerprint.gpu_arch}",
            model_name=self.model() or "default_model",
            settings=tuple(sorted(settings.items())),
        )
