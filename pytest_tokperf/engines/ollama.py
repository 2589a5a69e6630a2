"""Adapter for Ollama's native API (``/api/generate`` NDJSON).

Timings are nanoseconds, zero values omitted; ``num_predict`` only caps, so the real
``eval_count`` is recorded. Wire notes: docs/design.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.transport.answers import decode_json, error_text
from pytest_tokperf.engines.wire import (
    ChunkLog,
    count,
    json_field,
    json_object,
    probe_ready,
    text_prompt,
    wrong_engine,
)
from pytest_tokperf.errors import ConfigError, EngineError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import (
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    ModelInfo,
)

NS = 1e9


def canonical(name: str) -> str:
    """Ollama names default to the ``latest`` tag: ``llama3.2`` is ``llama3.2:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def parse_parameters(text: str | None) -> dict[str, str]:
    """``/api/show`` ``parameters``: one ``key value`` per line (keys may repeat: last wins)."""
    result: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            result[key] = value.strip().strip('"')
    return result


def modelfile_source(show: dict[str, Any]) -> str | None:
    """The GGUF blob ``/api/show``'s modelfile says ``FROM`` (an absolute path), if any."""
    for line in str(show.get("modelfile") or "").splitlines():
        if line.startswith("FROM "):
            source = line[5:].strip()
            return source if source.startswith("/") else None
    return None


def modelfile_draft(show: dict[str, Any]) -> str | None:
    """The draft model the modelfile names (``DRAFT <path>``, Ollama >= 0.30), if any."""
    for line in str(show.get("modelfile") or "").splitlines():
        if line.startswith("DRAFT "):
            return line[6:].strip().strip('"') or None
    return None


@dataclass(frozen=True, slots=True)
class Draft:
    model: str
    num_predict: str


def version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split("-")[0].split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


class Ollama(HttpAdapter):
    """A running Ollama server reached over HTTP."""

    name = "ollama"

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._show: dict[str, Any] | None = None

    def ready(self) -> bool:
        return probe_ready(self.name, self.base_url, self._client, "/api/version",
                           lambda r: json_field(r, "version"), "no version at GET /api/version")

    # -- models ---------------------------------------------------------------------

    def _get(self, path: str, what: str) -> dict[str, Any]:
        data = get_json(self._client, f"{self.base_url}{path}", what)
        if not isinstance(data, dict):
            raise EngineProtocolError(
                f"{self.base_url}{path} ({what}) is not an object: {data!r:.200}"
            )
        return data

    def _loaded(self) -> list[dict[str, Any]]:
        models = self._get("/api/ps", "loaded models").get("models")
        return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []

    def available_models(self) -> list[str]:
        try:
            models = self._get("/api/tags", "local models").get("models")
        except EngineError:
            return []
        return [str(m.get("name") or m.get("model")) for m in models or [] if isinstance(m, dict)]

    def model(self) -> str:
        """The asked-for model, else the only one loaded; Ollama needs a name per request."""
        if self._model is None:
            loaded = [str(m.get("name") or m.get("model")) for m in self._loaded()]
            if len(loaded) != 1:
                pulled = ", ".join(repr(m) for m in self.available_models()) or "none"
                state = f"{len(loaded)} models are loaded ({', '.join(loaded)})" if loaded \
                    else "no model is loaded"
                raise ConfigError(
                    f"Ollama at {self.base_url}: {state}, so name one with --tokperf-model; "
                    f"pulled models: {pulled}"
                )
            self._model = loaded[0]
        return self._model

    def unknown_model(self, detail: str) -> EngineProtocolError:
        pulled = ", ".join(repr(m) for m in self.available_models()) or "none"
        return EngineProtocolError(
            f"Ollama at {self.base_url} has no model {self._model!r} ({detail}); pulled models: "
            f"{pulled}. Pass one with --tokperf-model, or `ollama pull {self._model}` first."
        )

    def _on_error(self, status: int, body: str) -> EngineError | None:
        if status == 404:
            return self.unknown_model(f"HTTP 404: {error_text(body)}")
        return None

    def show(self) -> dict[str, Any]:
        if self._show is None:
            url = f"{self.base_url}/api/show"
            try:
                response = self._client.post(url, json={"model": self.model()}, timeout=30.0)
            except httpx.HTTPError as exc:
                raise EngineUnavailable(f"cannot reach {url}: {exc}") from exc
            if response.status_code >= 400:
                raise self._on_error(response.status_code, response.text) or EngineProtocolError(
                    f"{url} answered HTTP {response.status_code}: {error_text(response.text)}"
                )
            data = decode_json(response.text, "model details", url)
            self._show = data if isinstance(data, dict) else {}
        return self._show

    def _tag(self) -> dict[str, Any]:
        """This model's ``/api/tags`` entry (``size`` is its bytes on disk), or {}."""
        try:
            models = self._get("/api/tags", "local models").get("models")
        except EngineError:
            return {}
        me = canonical(self.model())
        for entry in models if isinstance(models, list) else []:
            if isinstance(entry, dict) and canonical(str(entry.get("name") or entry.get("model"))) == me:
                return entry
        return {}

    def model_identity(self) -> ModelInfo:
        """The model as ``/api/show`` and ``/api/tags`` describe it; ``path``: its blob."""
        show = self.show()
        details = json_object(show, "details")
        info = json_object(show, "model_info")
        arch = info.get("general.architecture") or details.get("family")
        quant = str(details["quantization_level"]) if details.get("quantization_level") else None
        return ModelInfo(
            file_name=self.model(),
            path=modelfile_source(show),
            file_bytes=count(self._tag().get("size")),
            architecture=str(arch) if arch else None,
            parameter_count=count(info.get("general.parameter_count")),
            file_type=quant,
            context_length=count(info.get(f"{arch}.context_length")) if arch else None,
        )

    # -- info -----------------------------------------------------------------------

    def info(self) -> EngineInfo:
        version = self._get("/api/version", "Ollama version")
        if "version" not in version:
            raise wrong_engine(self.name, self.base_url, "no version at GET /api/version",
                               self._client)
        show = self.show()
        me = canonical(self.model())
        details = json_object(show, "details")
        settings = dict(self._settings)
        for key in ("parameter_size", "quantization_level", "family", "format"):
            if details.get(key):
                settings[f"model_{key}"] = str(details[key])
        warnings: list[str] = []
        loaded = self._loaded()
        names = [str(m.get("name") or m.get("model")) for m in loaded]
        settings["loaded_models"] = str(len(loaded))
        if len(loaded) > 1:
            warnings.append(
                f"{len(loaded)} models loaded at once in Ollama ({', '.join(names)}): they "
                f"share memory and bandwidth, so decode is slower than with {me} alone "
                f"(OLLAMA_MAX_LOADED_MODELS=1 keeps one)"
            )
        context: int | None = None
        for entry in loaded:
            if canonical(str(entry.get("name") or entry.get("model"))) != me:
                continue
            size, vram = count(entry.get("size")), count(entry.get("size_vram")) or 0
            context = count(entry.get("context_length"))
            if size:
                settings["size_bytes"] = str(size)
                settings["size_vram_bytes"] = str(vram)
                settings["gpu_share"] = f"{vram / size:.0%}"
                if vram < size:
                    warnings.append(
                        f"partial offload: {vram / size:.0%} of {me} is in GPU memory and "
                        f"{(size - vram) / size:.0%} in system memory ({vram / 1e9:.2f} GB of "
                        f"{size / 1e9:.2f} GB, /api/ps size_vram of size); the part in system "
                        f"memory bounds decode"
                    )
        draft = self._draft(show)
        if draft is not None:
            settings["draft_model"] = draft.model
            settings["draft_num_predict"] = draft.num_predict
            warnings.append(
                f"speculative decoding: {me} drafts with {draft.model} (draft_num_predict "
                f"{draft.num_predict}): decode speed is not the base speed; set "
                f"draft_num_predict 0 to measure it"
            )
        text = str(version["version"])
        settings["runner"] = "llama-server" if version_tuple(text) >= (0, 30) else "ollama"
        return EngineInfo(
            name=self.name,
            version=text,
            build=f"ollama-{text}",
            base_url=self.base_url,
            model_name=self.model(),
            model_path=modelfile_source(show),
            context_size=context,
            speculative=draft is not None,
            settings=tuple(sorted(settings.items())),
            warnings=tuple(warnings),
        )

    @staticmethod
    def _draft(show: dict[str, Any]) -> Draft | None:
        """How the model drafts, if it does (a ``DRAFT`` model, or MTP layers when set)."""
        parameters = parse_parameters(show.get("parameters"))
        raw = parameters.get("draft_num_predict")
        asked = _int(raw) if raw is not None else None
        if asked is not None and asked <= 0:
            return None
        source = modelfile_draft(show)
        if source is not None:
            name = source.replace("\\", "/").rsplit("/", 1)[-1]
            return Draft(name, str(asked) if asked is not None else "4 (default)")
        mtp = any(key.endswith(".nextn_predict_layers") and (count(value) or 0) > 0
                  for key, value in json_object(show, "model_info").items())
        if mtp and asked is not None:
            return Draft("mtp (embedded layers)", str(asked))
        return None

    # -- generation -----------------------------------------------------------------

    def _options(self, request: GenerationRequest) -> dict[str, Any]:
        options: dict[str, Any] = {
            "num_predict": request.generate_tokens, "temperature": 0.0, "seed": 1234,
        }
        # another num_ctx reloads the model: set only when asked for or when too short
        asked = dict(self._settings).get("ctx_size") or dict(self._settings).get("num_ctx")
        need = request.prompt_tokens * 2 + request.generate_tokens + 64
        if asked:
            options["num_ctx"] = int(asked)
        else:
            loaded = [count(m.get("context_length")) for m in self._loaded()
                      if canonical(str(m.get("name") or m.get("model"))) == canonical(self.model())]
            if not loaded or (loaded[0] or 0) < need:
                options["num_ctx"] = max(4096, -(-need // 1024) * 1024)
        return options

    supports_chat = True
    """A chat workload drops ``raw``; thinking streams in ``thinking``."""

    def generate(self, request: GenerationRequest) -> Generation:
        body = {
            "model": self.model(),
            "prompt": text_prompt(request.prompt_tokens, request.salt),
            "raw": not request.chat,
            "stream": True,
            "keep_alive": "30m",
            "options": self._options(request),
        }
        url = f"{self.base_url}/api/generate"
        log = ChunkLog(request, url)
        final: dict[str, Any] | None = None
        last: object = None
        for now, event in self._streams.events(url, body, request, self._on_error,
                                                ndjson=True, stats=log.stats):
            last = event
            answer, thought = str(event.get("response") or ""), str(event.get("thinking") or "")
            log.add(now, 1 if answer or thought else 0, thought + answer,
                    reasoning=bool(thought) and not answer)
            if event.get("done"):
                final = event
                break
        if final is None:
            raise log.cut_short(self.name, "the final done:true object", last)
        if not log.times_s:
            raise EngineProtocolError(
                f"{url} streamed no generated tokens (done_reason {final.get('done_reason')!r})"
            )
        timings = _timings(final)
        return log.generation(generated_tokens=timings.generated_tokens,
                              prompt_tokens=timings.prompt_tokens,
                              stop_reason=final.get("done_reason"), engine=timings)


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _timings(final: dict[str, Any]) -> EngineTimings:
    """The done:true object, ns -> s; absent fields are zero (``omitempty``), not unknown."""

    def seconds(key: str) -> float:
        return (count(final.get(key)) or 0) / NS

    return EngineTimings(
        prompt_tokens=count(final.get("prompt_eval_count")) or 0,
        prefill_s=seconds("prompt_eval_duration"),
        generated_tokens=count(final.get("eval_count")) or 0,
        decode_s=seconds("eval_duration"),
    )
