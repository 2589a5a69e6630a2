"""What the text-prompt adapters share: prompt text, error bodies, streamed POSTs.

llama-server takes token ids; Ollama, LM Studio, mlx_lm and SGLang take text, so their
prompts are built here: a salted first line (no prefix cache can serve it) and common
words after it, about one token each; the engine's own prompt count is what gets
recorded. Error answers are read in every shape the engines use (``{"error": "..."}``,
``{"error": {"message": ...}}``, vLLM's flat ``{"object": "error", "message": ...}``,
an HTML page from a proxy) and ``identify`` says which engine a URL really is, so a
wrong ``--tokperf-engine`` is named, not guessed at.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_tokperf.engines.base import decode_json, iter_sse_data
from pytest_tokperf.errors import EngineError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import EngineTimings, Generation, GenerationRequest

FILLER_WORDS = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work number night point home water room mother area money story fact "
    "month right study book eye job word business issue side kind head house service "
    "friend father power hour game line end member law car city name team minute idea "
    "body back parent face level office door health person art war history party "
    "result change morning reason research girl moment air teacher force education"
).split()
"""Common English words: mostly one token each (leading space included) in BPE and SPM."""

SALT_LINE_TOKENS = 8
"""About how many tokens the salted first line takes."""


def text_prompt(n_tokens: int, salt: int) -> str:
    """A text of about ``n_tokens`` tokens whose first line is unique per ``salt``.

    The tag comes first so that only the BOS token can match an earlier prompt's prefix.
    It ends as an open word list, which models tend to continue rather than close,
    so engines that can only cap the output length rarely stop early.
    """
    tag = hashlib.sha256(f"tokperf-{salt}".encode()).hexdigest()[:12]
    words = max(n_tokens - SALT_LINE_TOKENS, 1)
    start = salt % len(FILLER_WORDS)
    body = " ".join(FILLER_WORDS[(start + i * 7) % len(FILLER_WORDS)] for i in range(words))
    return f"{tag} run {salt}: word list\n{body}"


def looks_like_html(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith("<!doctype html") or head.startswith("<html") or "<head" in head


def html_title(text: str) -> str | None:
    match = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    return match.group(1).strip()[:80] if match else None


def error_text(body: str) -> str:
    """The engine's own words from an error body, in any of the usual shapes."""
    if looks_like_html(body):
        title = html_title(body)
        return f"an HTML page{f' titled {title!r}' if title else ''}, not the engine's JSON"
    try:
        data = json.loads(body)
    except ValueError:
        return repr(body[:200])
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            if data.get(key):
                return str(data[key])
    return repr(body[:200])


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        return client.get(url, timeout=3.0)
    except httpx.HTTPError:
        return None


def _json_dict(response: httpx.Response | None) -> dict[str, Any] | None:
    if response is None or response.status_code != 200:
        return None
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def identify(client: httpx.Client, base_url: str) -> str:
    """Name what answers at ``base_url``, from the endpoints only one engine serves."""
    found = _json_dict(_get(client, f"{base_url}/api/version"))
    if found and "version" in found:
        return f"Ollama {found['version']} (GET /api/version)"
    found = _json_dict(_get(client, f"{base_url}/props"))
    if found and "build_info" in found:
        return f"llama-server {found['build_info']} (GET /props)"
    found = _json_dict(_get(client, f"{base_url}/get_model_info"))
    if found and "model_path" in found:
        return "SGLang (GET /get_model_info)"
    found = _json_dict(_get(client, f"{base_url}/api/v0/models"))
    if found and isinstance(found.get("data"), list):
        return "LM Studio (GET /api/v0/models)"
    found = _json_dict(_get(client, f"{base_url}/version"))
    if found and "version" in found:
        return f"vLLM {found['version']} (GET /version)"
    found = _json_dict(_get(client, f"{base_url}/v1/models"))
    if found and isinstance(found.get("data"), list):
        ids = [str(m.get("id")) for m in found["data"] if isinstance(m, dict)]
        return f"an OpenAI-compatible server serving {ids!r} (GET /v1/models)"
    response = _get(client, base_url + "/")
    if response is None:
        return "nothing: the connection failed"
    if looks_like_html(response.text):
        title = html_title(response.text)
        return f"a web page{f' titled {title!r}' if title else ''} (HTTP {response.status_code})"
    return f"HTTP {response.status_code} {response.text[:80]!r} on GET /"


def probe_ready(
    engine: str,
    base_url: str,
    client: httpx.Client,
    path: str,
    looks_right: Callable[[httpx.Response], bool],
    expected: str,
) -> bool:
    """GET ``path``: False while unreachable or loading (503), True when the answer
    ``looks_right``, else the engine at that URL is another one: ``wrong_engine``."""
    try:
        response = client.get(f"{base_url}{path}", timeout=5.0)
    except httpx.HTTPError:
        return False
    if response.status_code == 503:
        return False
    if response.status_code == 200 and looks_right(response):
        return True
    raise wrong_engine(engine, base_url, expected, client)


def json_field(response: httpx.Response, key: str, value: object = None) -> bool:
    """True when the response is a JSON object with ``key`` (equal to ``value`` if given)."""
    try:
        data = response.json()
    except ValueError:
        return False
    if not isinstance(data, dict) or key not in data:
        return False
    return value is None or data[key] == value


def wrong_engine(
    engine: str, base_url: str, expected: str, client: httpx.Client
) -> EngineProtocolError:
    """The error for a URL that does not answer as ``engine``: names both."""
    return EngineProtocolError(
        f"--tokperf-engine {engine!r}: {base_url} does not answer as {engine} ({expected}); "
        f"it looks like {identify(client, base_url)}. Point --tokperf-url at a {engine} "
        f"server or pass the --tokperf-engine that matches it."
    )


def model_ids(payload: Any) -> list[str]:
    """Model names from an OpenAI ``/v1/models`` or LM Studio ``/api/v0/models`` list."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        return []
    return [str(m["id"]) for m in payload["data"] if isinstance(m, dict) and "id" in m]


def too_slow(url: str, request: GenerationRequest) -> EngineUnavailable:
    return EngineUnavailable(
        f"{url} did not finish {request.generate_tokens} tokens within "
        f"{request.timeout_s:g} s; raise --tokperf-request-timeout or use a smaller model"
    )


@contextmanager
def stream_post(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    request: GenerationRequest,
    on_error: Callable[[int, str], EngineError | None] | None = None,
) -> Iterator[httpx.Response]:
    """POST ``body`` and yield the streaming response; every failure becomes ours.

    ``on_error(status, body)`` may turn an HTTP error into a more specific error (an
    unknown model, say); otherwise the message quotes the engine's own words.
    """
    try:
        with client.stream("POST", url, json=body, timeout=request.timeout_s) as response:
            if response.status_code >= 400:
                text = response.read().decode("utf-8", errors="replace")
                specific = on_error(response.status_code, text) if on_error else None
                raise specific or EngineProtocolError(
                    f"{url} answered HTTP {response.status_code}: {error_text(text)}"
                )
            kind = response.headers.get("content-type", "")
            if "text/html" in kind:
                text = response.read().decode("utf-8", errors="replace")
                raise EngineProtocolError(
                    f"{url} answered with {error_text(text)}; is --tokperf-url the engine "
                    f"itself and not a proxy or web UI?"
                )
            if kind.startswith("application/json"):
                text = response.read().decode("utf-8", errors="replace")
                raise EngineProtocolError(
                    f"{url} answered one JSON document, not a stream ({error_text(text)}); "
                    f"does this server support streaming on this endpoint?"
                )
            yield response
    except httpx.TimeoutException as exc:
        raise too_slow(url, request) from exc
    except httpx.HTTPError as exc:
        raise EngineUnavailable(f"lost {url} during generation: {exc}") from exc


def stream_events(
    client: httpx.Client,
    url: str,
    body: dict[str, Any],
    request: GenerationRequest,
    on_error: Callable[[int, str], EngineError | None] | None = None,
    *,
    ndjson: bool = False,
) -> Iterator[tuple[float, dict[str, Any]]]:
    """POST ``body`` and yield each streamed JSON object with its client arrival time.

    SSE ``data:`` payloads until ``[DONE]`` or the end of the stream, or NDJSON lines
    (Ollama). A payload that is not an object, or an error object mid-stream
    (``{"error": ...}``, vLLM's ``{"object": "error"}``), raises with the engine's words.
    """
    what = "line" if ndjson else "event"
    with stream_post(client, url, body, request, on_error) as response:
        payloads = ((line for line in response.iter_lines() if line.strip()) if ndjson
                    else iter_sse_data(response))
        for payload in payloads:
            now = time.perf_counter()
            if not ndjson and payload.strip() == "[DONE]":
                return
            event = decode_json(payload, "an NDJSON line" if ndjson else "a stream event", url)
            if not isinstance(event, dict):
                raise EngineProtocolError(f"{url} sent a non-object {what}: {event!r:.200}")
            if "error" in event or event.get("object") == "error":
                raise EngineProtocolError(f"{url} reported an error mid-stream: "
                                          f"{error_text(payload)}")
            yield now, event


@dataclass
class ChunkLog:
    """Client arrival times and token counts of the chunks that carried content."""

    request: GenerationRequest | None = None
    url: str = ""
    sent_s: float = field(default_factory=time.perf_counter)
    times_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning: list[bool] = field(default_factory=list)

    def add(self, now_s: float, n_tokens: int, text: str, reasoning: bool = False) -> None:
        """Record one event; past the request's deadline the generation has failed.

        httpx's read timeout bounds the gap between bytes, not the whole stream, so
        the total ``request.timeout_s`` is enforced here, as events arrive.
        """
        if self.request is not None and now_s - self.sent_s > self.request.timeout_s:
            raise too_slow(self.url, self.request)
        if text:
            self.text.append(text)
        if n_tokens > 0:
            self.times_s.append(now_s)
            self.tokens.append(n_tokens)
            self.reasoning.append(reasoning)

    def generation(self, *, generated_tokens: int | None, prompt_tokens: int | None,
                   stop_reason: str | None, engine: EngineTimings | None) -> Generation:
        """What was logged, as the ``Generation`` of ``request``; without an engine count
        the generated tokens are the ones the chunks carried."""
        assert self.request is not None, "a ChunkLog makes a Generation only for a request"
        return Generation(
            request=self.request,
            sent_s=self.sent_s,
            chunk_times_s=tuple(self.times_s),
            chunk_tokens=tuple(self.tokens),
            generated_tokens=generated_tokens if generated_tokens else sum(self.tokens),
            prompt_tokens=prompt_tokens,
            text="".join(self.text),
            stop_reason=stop_reason,
            engine=engine,
            chunk_reasoning=tuple(self.reasoning) if any(self.reasoning) else (),
        )


def json_object(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` when it is a JSON object, else an empty one."""
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def count(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
