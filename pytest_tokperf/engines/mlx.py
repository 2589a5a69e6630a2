"""Adapter for Apple MLX's ``mlx_lm.server`` (OpenAI-compatible ``/v1/completions``):
``max_tokens`` only caps; the engine's decode clock is its DEBUG log (``log_decode``)."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise
from typing import Any

from pytest_tokperf.engines.openai_compat import OpenAICompatible
from pytest_tokperf.engines.wire import json_field, probe_ready, wrong_engine
from pytest_tokperf.errors import EngineError
from pytest_tokperf.results import EngineInfo, Generation, GenerationRequest, ModelInfo
from pytest_tokperf.transport.answers import error_text

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


_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) - (\w+) - (.*)$")
_STARTS = ("Starting stream:", "Starting completion:")
_NOT_TOKENS = ("Incoming Request Body", "Outgoing Response")


def log_decode(text: str) -> tuple[int, float] | None:
    """(tokens, first-to-last seconds) of the last generation in a DEBUG log, or None."""
    times: list[float] | None = None
    for line in text.splitlines():
        match = _LOG_LINE.match(line)
        if match is None or match.group(3) != "DEBUG":
            continue
        message = match.group(4)
        if message.startswith(_STARTS):
            times = []
        elif times is not None and not message.startswith(_NOT_TOKENS):
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
            times.append(stamp.timestamp() + int(match.group(2)) / 1000)
    if not times or len(times) < 2:
        return None
    return len(times), times[-1] - times[0]


IDENTITY_PROMPT = "tokperf model identity: time year people way day"
"""What ``model_identity`` asks every mlx_lm model to continue (greedy, 8 tokens)."""


class MLX(OpenAICompatible):
    name = "mlx"
    display = "mlx_lm.server"

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._probe: str | None = None

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

    def generate(self, request: GenerationRequest) -> Generation:
        """The stream's generation, with mlx_lm's logged decode time where known."""
        log_path = dict(self._settings).get("log_path")
        try:
            offset = os.path.getsize(log_path) if log_path else 0
        except OSError:
            offset = 0
        generation = super().generate(request)
        if log_path is None or generation.engine is None:
            return generation
        try:
            with open(log_path, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode(errors="replace")
        except OSError:
            return generation
        found = log_decode(text)
        if found is None or found[0] != generation.generated_tokens:
            return generation
        return replace(generation, engine=replace(generation.engine, decode_s=found[1]))

    def prompt_cache_off(self) -> str | None:
        args = (dict(self._settings).get("clean_flags", "") + " "
                + dict(self._settings).get("server_args", "")).split()
        for flag, value in pairwise(args):
            if flag == "--prompt-cache-size" and value == "0":
                return "started with --prompt-cache-size 0"
        return None

    def model_identity(self) -> ModelInfo | None:
        """The served model as its output tells it: a hash of a greedy continuation."""
        self._fingerprint_now()
        if self._probe is None:
            return None
        digest = hashlib.sha256(self._probe.encode()).hexdigest()[:16]
        return ModelInfo(file_name=f"{self.model() or 'default_model'} (output {digest})")

    def _fingerprint_now(self) -> str | None:
        if self._fingerprint is None:
            url = f"{self.base_url}/v1/completions"
            body: dict[str, Any] = {"prompt": IDENTITY_PROMPT, "max_tokens": 8,
                                    "temperature": 0.0, "stream": False}
            if self.model() is not None:
                body["model"] = self.model()
            response = self._post(url, body, 120.0)
            try:
                data = response.json()
            except ValueError:
                data = None
            if isinstance(data, dict) and isinstance(data.get("system_fingerprint"), str):
                self._fingerprint = data["system_fingerprint"]
                choices = data.get("choices")
                first = choices[0] if isinstance(choices, list) and choices else None
                text = first.get("text") if isinstance(first, dict) else None
                usage = data.get("usage")
                prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
                self._probe = f"{text!r} {prompt!r}"
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
        settings.pop("log_path", None)  # read per request; a per-process path is not identity
        settings["mlx_version"] = fingerprint.mlx
        settings["platform"] = fingerprint.platform
        on_gpu = fingerprint.gpu_arch.startswith("applegpu")
        settings["device"] = "metal" if on_gpu else "cpu"
        settings["device_source"] = (
            f"mlx_lm system_fingerprint: default device architecture {fingerprint.gpu_arch!r}"
            f" ({'Metal GPU' if on_gpu else 'mlx CPU backend'})")
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
