"""Adapter for Ollama's native API (``/api/generate`` NDJSON): timings in nanoseconds,
zero values omitted; ``num_predict`` only caps, so the real ``eval_count`` is recorded.
Clocks: docs/engines.md."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_tokperf.engines.base import HttpAdapter, get_json
from pytest_tokperf.engines.values import (MAX_TOKENS, Fields, count_or_none, int_or_none,
                                           unusable_warning)
from pytest_tokperf.engines.wire import (ChunkLog, json_field, probe_ready, text_prompt,
                                         wrong_engine)
from pytest_tokperf.errors import ConfigError, EngineError, EngineProtocolError
from pytest_tokperf.results import (EngineInfo, EngineTimings, Generation, GenerationRequest,
                                    ModelInfo)
from pytest_tokperf.transport.answers import decode_json, error_text

NS = 1e9


def canonical(name: str) -> str:
    """Ollama names default to the ``latest`` tag: ``llama3.2`` is ``llama3.2:latest``."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def parse_parameters(text: object) -> dict[str, str]:
    """``/api/show`` ``parameters``: one ``key value`` per line (keys may repeat: last wins)."""
    result: dict[str, str] = {}
    for line in (text if isinstance(text, str) else "").splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            result[key] = value.strip().strip('"')
    return result


def model_name(entry: dict[str, Any]) -> str | None:
    """An ``/api/tags`` or ``/api/ps`` entry's ``name`` (else ``model``), when it is text."""
    for key in ("name", "model"):
        value = entry.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def modelfile(show: dict[str, Any], keyword: str) -> str:
    """What the first ``keyword`` line of ``/api/show``'s modelfile names ("" if none):
    ``FROM`` the GGUF blob (an absolute path), ``DRAFT`` the draft model (Ollama >= 0.30)."""
    text = show.get("modelfile")
    for line in text.splitlines() if isinstance(text, str) else []:
        if line.startswith(f"{keyword} "):
            return line[len(keyword) + 1:].strip()
    return ""


def modelfile_source(show: dict[str, Any]) -> str | None:
    source = modelfile(show, "FROM")
    return source if source.startswith("/") else None


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

    def _get(self, path: str, what: str) -> dict[str, Any]:
        data = get_json(self._client, f"{self.base_url}{path}", what)
        if not isinstance(data, dict):
            raise EngineProtocolError(
                f"{self.base_url}{path} ({what}) is not an object: {data!r:.200}"
            )
        return data

    def _models(self, path: str = "/api/ps", what: str = "loaded models") -> list[dict[str, Any]]:
        """The entries of ``path``'s ``models`` that name a model (loaded: ``/api/ps``)."""
        models = self._get(path, what).get("models")
        return [m for m in models if isinstance(m, dict) and model_name(m)] \
            if isinstance(models, list) else []

    def available_models(self) -> list[str]:
        try:
            return [str(model_name(m)) for m in self._models("/api/tags", "local models")]
        except EngineError:
            return []

    def model(self) -> str:
        """The asked-for model, else the only one loaded; Ollama needs a name per request."""
        if self._model is None:
            loaded = [str(model_name(m)) for m in self._models()]
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
            response = self._post(url, {"model": self.model()}, 30.0)
            data = decode_json(response.text, "model details", url)
            self._show = data if isinstance(data, dict) else {}
        return self._show

    def _tag(self) -> dict[str, Any]:
        """This model's ``/api/tags`` entry (``size`` is its bytes on disk), or {}."""
        try:
            tags = self._models("/api/tags", "local models")
        except EngineError:
            return {}
        me = canonical(self.model())
        return next((tag for tag in tags if canonical(str(model_name(tag))) == me), {})

    def model_identity(self) -> ModelInfo:
        """The model as ``/api/show`` and ``/api/tags`` describe it; ``path``: its blob."""
        show = Fields(self.name, f"{self.base_url}/api/show", self.show())
        details, info = show.inside("details"), show.inside("model_info")
        arch = info.text("general.architecture") or details.text("family")
        tag = Fields(self.name, f"{self.base_url}/api/tags", self._tag())
        return ModelInfo(
            file_name=self.model(),
            path=modelfile_source(self.show()),
            file_bytes=tag.count("size"),
            architecture=arch or None,
            parameter_count=info.count("general.parameter_count"),
            file_type=details.text("quantization_level") or None,
            context_length=info.tokens(f"{arch}.context_length") if arch else None,
        )

    def info(self) -> EngineInfo:
        version = self._get("/api/version", "Ollama version")
        said = Fields(self.name, f"{self.base_url}/api/version", version)
        text = said.text("version", refuse=True)  # the build: the series key
        if text is None:
            raise wrong_engine(self.name, self.base_url, "no version at GET /api/version",
                               self._client)
        show = self.show()
        me = canonical(self.model())
        notes: list[str] = []
        details = Fields(self.name, f"{self.base_url}/api/show", show, notes=notes).inside(
            "details")
        settings = dict(self._settings)
        for key in ("parameter_size", "quantization_level", "family", "format"):
            value = details.text(key)
            if value:
                settings[f"model_{key}"] = value
        warnings: list[str] = []
        loaded = self._models()
        names = [str(model_name(m)) for m in loaded]
        settings["loaded_models"] = str(len(loaded))
        if len(loaded) > 1:
            warnings.append(
                f"{len(loaded)} models loaded at once in Ollama ({', '.join(names)}): they "
                f"share memory and bandwidth, so decode is slower than with {me} alone "
                f"(OLLAMA_MAX_LOADED_MODELS=1 keeps one)"
            )
        context: int | None = None
        for index, entry in enumerate(loaded):
            if canonical(str(model_name(entry))) != me:
                continue
            ps = Fields(self.name, f"{self.base_url}/api/ps", entry, f"models[{index}]", notes)
            size, vram = ps.count("size"), ps.count("size_vram") or 0
            context = ps.tokens("context_length")
            if size and vram > size:
                notes.append(f"models[{index}].size_vram={vram} (more than its size, {size})")
                size = None
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
        warnings.extend(unusable_warning(self.name, self.base_url, notes))
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
        asked = int_or_none(parameters.get("draft_num_predict"))
        if asked is not None and asked <= 0:
            return None
        source = modelfile(show, "DRAFT").strip('"')
        if source:
            name = source.replace("\\", "/").rsplit("/", 1)[-1]
            return Draft(name, str(asked) if asked is not None else "4 (default)")
        info = show.get("model_info")
        mtp = isinstance(info, dict) and any(
            isinstance(key, str) and key.endswith(".nextn_predict_layers")
            and (count_or_none(value) or 0) > 0 for key, value in info.items())
        if mtp and asked is not None:
            return Draft("mtp (embedded layers)", str(asked))
        return None

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
            loaded = [count_or_none(m.get("context_length"), MAX_TOKENS) for m in self._models()
                      if canonical(str(model_name(m))) == canonical(self.model())]
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
            answer, thought = event.get("response"), event.get("thinking")
            answer = answer if isinstance(answer, str) else ""
            thought = thought if isinstance(thought, str) else ""
            log.add(now, 1 if answer or thought else 0, thought + answer,
                    reasoning=bool(thought) and not answer)
            if event.get("done"):
                final = event
                break
        if final is None:
            raise log.cut_short(self.name, "the final done:true object", last)
        if not log.times_s:
            raise EngineProtocolError(
                f"{url} streamed no generated tokens (done_reason "
                f"{final.get('done_reason')!r:.80})")
        said = Fields(self.name, url, final)
        stop_reason = said.text("done_reason")
        timings = _timings(said, request.generate_tokens)
        return log.generation(generated_tokens=timings.generated_tokens,
                              prompt_tokens=timings.prompt_tokens,
                              stop_reason=stop_reason, engine=timings)


def _timings(final: Fields, asked: int) -> EngineTimings:
    """The done:true object, ns -> s; absent fields are zero (``omitempty``), not unknown,
    unusable ones unknown."""

    def tokens(key: str, most: int = MAX_TOKENS) -> int | None:
        return final.tokens(key, most=most) if final.has(key) else 0

    def seconds(key: str) -> float | None:
        return final.seconds(key, per_s=NS) if final.has(key) else 0.0

    return final.timings(EngineTimings(
        prompt_tokens=tokens("prompt_eval_count"),
        prefill_s=seconds("prompt_eval_duration"),
        generated_tokens=tokens("eval_count", asked),
        decode_s=seconds("eval_duration"),
    ))
