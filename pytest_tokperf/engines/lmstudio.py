"""Adapter for LM Studio's server (shared/reference/engines.md, section 4).

Tokens stream from the OpenAI-compatible ``/v1/completions`` (``stream_options``
usage where the build sends it; one token per chunk otherwise). LM Studio takes no
``ignore_eos``, so ``max_tokens`` only caps: the real count is recorded and a short
run is noted. Its REST v0 API adds what the OpenAI endpoints lack, but only on
non-streamed answers (streams carry no ``stats``): ``info()`` sends one tiny
``POST /api/v0/completions`` and reads ``runtime{name, version}`` (the engine runtime,
e.g. ``llama.cpp-mac-arm64-apple-metal-advsimd 1.3.0``), ``model_info{arch, quant,
format, context_length}`` and ``stats`` (``draft_model`` there means speculative
decoding is on). ``GET /api/v0/models`` gives loaded versus downloaded models.
"""

from __future__ import annotations

from typing import Any

import httpx

from pytest_tokperf.engines.base import get_json
from pytest_tokperf.engines.openai_compat import OpenAICompatible
from pytest_tokperf.engines.answers import error_text
from pytest_tokperf.engines.wire import count, json_object, probe_ready, wrong_engine
from pytest_tokperf.errors import EngineError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import EngineInfo


class LMStudio(OpenAICompatible):
    name = "lmstudio"
    display = "LM Studio"

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._probe: dict[str, Any] | None = None

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/api/v0/models",
                           self._looks_right, "no model list at GET /api/v0/models")

    def _catalog(self) -> list[dict[str, Any]]:
        listing = get_json(self._client, f"{self.base_url}/api/v0/models", "LM Studio model list")
        data = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(data, list):
            raise wrong_engine(self.name, self.base_url, "no model list at GET /api/v0/models",
                               self._client)
        return [m for m in data if isinstance(m, dict) and m.get("type", "llm") in ("llm", "vlm")]

    def available_models(self) -> list[str]:
        try:
            return [str(m.get("id")) for m in self._catalog()]
        except EngineError:
            return []

    def model(self) -> str | None:
        """The asked-for model, else the one loaded (LM Studio serves loaded models first)."""
        if self._model is None:
            catalog = self._catalog()
            loaded = [str(m.get("id")) for m in catalog if m.get("state") == "loaded"]
            names = loaded or [str(m.get("id")) for m in catalog]
            self._model = names[0] if names else None
        return self._model

    def _probe_answer(self) -> dict[str, Any]:
        """One non-streamed two-token completion: the v0 API's runtime and model_info."""
        if self._probe is None:
            url = f"{self.base_url}/api/v0/completions"
            body = {"model": self.model(), "prompt": "Hello", "max_tokens": 2, "stream": False,
                    "temperature": 0.0}
            try:
                response = self._client.post(url, json=body, timeout=120.0)
            except httpx.HTTPError as exc:
                raise EngineUnavailable(
                    f"cannot reach {url} (LM Studio REST stats): {exc}"
                ) from exc
            if response.status_code >= 400:
                raise self._on_error(response.status_code, response.text) or EngineProtocolError(
                    f"{url} answered HTTP {response.status_code}: {error_text(response.text)}"
                )
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
        probe = self._probe_answer()
        runtime = json_object(probe, "runtime")
        model_info = json_object(probe, "model_info")
        stats = json_object(probe, "stats")
        settings = dict(self._settings)
        loaded = [str(m.get("id")) for m in catalog if m.get("state") == "loaded"]
        settings["loaded_models"] = str(len(loaded))
        for key in ("arch", "quant", "format"):
            if model_info.get(key):
                settings[f"model_{key}"] = str(model_info[key])
        speculative = bool(stats.get("draft_model"))
        if speculative:
            settings["draft_model"] = str(stats["draft_model"])
        warnings = []
        if len(loaded) > 1:
            warnings.append(
                f"{len(loaded)} models loaded at once ({', '.join(loaded)}): they share memory "
                f"and bandwidth, so decode is slower than with one"
            )
        if speculative:
            warnings.append(f"speculative decoding with draft model {stats['draft_model']!r}")
        if warnings:
            settings["warning"] = "; ".join(warnings)
        name = runtime.get("name")
        version = runtime.get("version")
        return EngineInfo(
            name=self.name,
            version=str(version) if version else None,
            build=f"{name} {version}" if name and version else None,
            base_url=self.base_url,
            backend=str(name) if name else None,
            model_name=self.model(),
            context_size=count(model_info.get("context_length")),
            speculative=speculative,
            settings=tuple(sorted(settings.items())),
        )
