"""What the adapters share above the stream: prompt text, identity, the chunk log."""

from __future__ import annotations

import hashlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from pytest_tokperf.errors import EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import EngineTimings, Generation, GenerationRequest
from pytest_tokperf.transport.answers import auth_hint, error_text, html_title, looks_like_html
from pytest_tokperf.transport.events import StreamStats

FILLER_WORDS = (  # noqa: SIM905 (a paragraph of words reads better than a list)
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


_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def salt_head(salt: int) -> str:
    """The tag's first two characters: ``salt``'s last two base-36 digits, reversed."""
    low = salt % (36 * 36)
    return _BASE36[low % 36] + _BASE36[low // 36]


def text_prompt(n_tokens: int, salt: int) -> str:
    """About ``n_tokens`` tokens, the first line unique per ``salt``, then open words."""
    digest = hashlib.sha256(f"tokperf-{salt}".encode()).hexdigest()
    tag = salt_head(salt) + digest[:10]
    words = max(n_tokens - SALT_LINE_TOKENS, 1)
    start = int(digest[12:20], 16) % len(FILLER_WORDS)
    body = " ".join(FILLER_WORDS[(start + i * 7) % len(FILLER_WORDS)] for i in range(words))
    return f"{tag} run: word list\n{body}"


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        return client.get(url, timeout=3.0)
    except (httpx.HTTPError, EngineProtocolError):  # a path refused unread: not this engine's
        return None


def _json_dict(response: httpx.Response | None) -> dict[str, Any] | None:
    if response is None or response.status_code != 200:
        return None
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


_SIGNS = (  # GET path, the key its JSON object has, what it is in words, its engine
    ("/api/version", "version", "Ollama {} (GET /api/version)", "ollama"),
    ("/props", "build_info", "llama-server {} (GET /props)", "llama-server"),
    ("/get_model_info", "model_path", "SGLang (GET /get_model_info)", "sglang"),
    ("/api/v0/models", "data", "LM Studio (GET /api/v0/models)", "lmstudio"),  # a list
    ("/version", "version", "vLLM {} (GET /version)", "vllm"),
)


def recognize(client: httpx.Client, base_url: str) -> tuple[str, str | None]:
    """What answers at ``base_url`` in words, and its ``--tokperf-engine`` name if known."""
    for path, key, words, engine in _SIGNS:
        found = _json_dict(_get(client, base_url + path))
        if found and key in found and (key != "data" or isinstance(found[key], list)):
            return words.format(_said(found[key])), engine
    health = _get(client, f"{base_url}/health")
    if _json_dict(health) == {"status": "ok"} and health is not None and "BaseHTTP" in \
            health.headers.get("server", ""):
        return ("mlx_lm.server (Python's http.server answering GET /health "
                '{"status": "ok"})'), "mlx"
    found = _json_dict(_get(client, f"{base_url}/v1/models"))
    if found and isinstance(found.get("data"), list):
        ids = [str(m.get("id")) for m in found["data"] if isinstance(m, dict)]
        return f"an OpenAI-compatible server serving {ids!r} (GET /v1/models)", "openai"
    response = _get(client, base_url + "/")
    if response is None:
        return "nothing: the connection failed", None
    if looks_like_html(response.text):
        title = html_title(response.text)
        return (f"a web page{f' titled {title!r}' if title else ''} "
                f"(HTTP {response.status_code})"), None
    return f"HTTP {response.status_code} {response.text[:80]!r} on GET /", None


def _said(value: object) -> str:
    """A version or build as an engine gave it, short; anything but text as its repr."""
    return f"{value:.60}" if isinstance(value, str) else f"{value!r:.60}"


def _tls_problem(host: str, port: int) -> str | None:
    """Why a TLS handshake with ``host:port`` fails, in words; None when it succeeds."""
    import ssl

    context = ssl.create_default_context()
    try:
        with socket.create_connection((host, port), timeout=5.0) as raw, \
                context.wrap_socket(raw, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as exc:
        return (f"it speaks TLS, but its certificate is not trusted here "
                f"({exc.verify_message}); install its CA or use the engine's plain-http URL")
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        return (f"it answers, but not with TLS ({reason}): this is a plain-http port; use "
                f"http://{host}:{port} instead of https://")


def not_ready_error(engine: str, base_url: str, option: str = "--tokperf-url",
                    fix: str = "start the server or fix the URL") -> EngineUnavailable:
    """Why an attached engine is not ready, in words: refused, silent, or still loading."""
    parts = urlsplit(base_url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=5.0):
            pass
    except ConnectionRefusedError:
        why = f"connection refused: nothing listens on {host}:{port}"
    except TimeoutError:
        why = f"no answer from {host}:{port} within 5 s (a firewall, or the wrong host)"
    except OSError as exc:
        why = f"cannot connect to {host}:{port}: {exc}"
    else:
        why = "it answers, but its health endpoint does not say ready yet (loading a model?)"
        if parts.scheme == "https":
            why = _tls_problem(host, port) or why
    return EngineUnavailable(
        f"{option} {base_url!r} does not answer as a ready {engine}: {why}; {fix}"
    )


def probe_ready(engine: str, base_url: str, client: httpx.Client, path: str,
                looks_right: Callable[[httpx.Response], bool], expected: str) -> bool:
    """GET ``path``: False while down or loading, True if ``looks_right``, else raises
    ``wrong_engine``'s error."""
    try:
        response = client.get(f"{base_url}{path}", timeout=5.0)
    except httpx.HTTPError:
        return False
    if response.status_code == 503:
        return False
    if response.status_code == 200 and looks_right(response):
        return True
    if response.status_code in (401, 403):
        raise EngineProtocolError(
            f"{base_url}{path} answered HTTP {response.status_code}: "
            f"{error_text(response.text)}{auth_hint(response.status_code)}")
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


def wrong_engine(engine: str, base_url: str, expected: str,
                 client: httpx.Client) -> EngineProtocolError:
    """The error for a URL that is not ``engine``, naming the engine that fits."""
    what, other = recognize(client, base_url)
    default = " (the default)" if engine == "llama-server" else ""
    fix = (f"Pass --tokperf-engine {other} to measure it" if other and other != engine
           else "Pass the --tokperf-engine that matches it")
    return EngineProtocolError(
        f"--tokperf-engine {engine!r}{default}: {base_url} does not answer as {engine} "
        f"({expected}); it looks like {what}. {fix}, or point --tokperf-url at a {engine} "
        f"server."
    )


def model_ids(payload: Any) -> list[str]:
    """Model names from an OpenAI ``/v1/models`` or LM Studio ``/api/v0/models`` list."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        return []
    return [str(m["id"]) for m in payload["data"] if isinstance(m, dict) and "id" in m]


@dataclass
class ChunkLog:
    """Arrival times and token counts of the content chunks, and their client cost."""

    request: GenerationRequest
    url: str
    sent_s: float = field(default_factory=time.perf_counter)
    times_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    reasoning: list[bool] = field(default_factory=list)
    stats: StreamStats = field(default_factory=StreamStats)
    sent_mark: tuple[float, object] | None = None
    """(time, the engine's clock) when the request was made, when it has a clock."""
    first_mark: tuple[float, object] | None = None
    """(time, the engine's clock) at the first content chunk, when the request has a clock."""

    def __post_init__(self) -> None:
        if self.request.clock is not None:
            self.sent_mark = (self.sent_s, self.request.clock())

    def cut_short(self, engine: str, marker: str, last: object) -> EngineProtocolError:
        """The error for a stream that ended without ``marker``: fails the repetition."""
        return EngineProtocolError(
            f"{engine} at {self.url}: the stream ended after {sum(self.tokens)} of "
            f"{self.request.generate_tokens} tokens without {marker} (the last event: "
            f"{last!r:.200}): the engine died or the connection was cut, so this repetition "
            f"failed; see the engine's log")

    def add(self, now_s: float, n_tokens: int, text: str, reasoning: bool = False) -> None:
        """Record one event (the stream has already held it to the request's limits)."""
        if text:
            self.text.append(text)
        if n_tokens > 0:
            if not self.times_s and self.request.clock is not None:
                self.first_mark = (now_s, self.request.clock())
            self.times_s.append(now_s)
            self.tokens.append(n_tokens)
            self.reasoning.append(reasoning)

    def generation(self, *, generated_tokens: int | None, prompt_tokens: int | None,
                   stop_reason: str | None, engine: EngineTimings | None) -> Generation:
        """What was logged, as the ``Generation`` of ``request``."""
        marks = None
        if self.sent_mark is not None and self.first_mark is not None and self.request.clock:
            marks = (self.sent_mark, self.first_mark, (time.perf_counter(), self.request.clock()))
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
            client_s_per_event=self.stats.busy_s_per_event,
            clock_marks=marks,
        )

