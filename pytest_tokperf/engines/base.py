"""The one Protocol every engine adapter implements, and the HTTP client they share;
transport failures become ``EngineUnavailable`` or ``EngineProtocolError`` ``from exc``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

import httpx

from pytest_tokperf.engines import DEFAULT_IDLE_TIMEOUT_S
from pytest_tokperf.errors import EngineError, EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import EngineInfo, Generation, GenerationRequest, ModelInfo
from pytest_tokperf.transport import MAX_BODY_BYTES
from pytest_tokperf.transport.answers import auth_hint, decode_json, error_text
from pytest_tokperf.transport.bounded import BodyTooLarge, BoundedTransport, DeadlineExceeded
from pytest_tokperf.transport.credentials import MASK, ApiKey, Endpoint
from pytest_tokperf.transport.rawhttp import refused_hint
from pytest_tokperf.transport.stream import MAX_WAIT_S, StreamClient


@runtime_checkable
class Engine(Protocol):
    """A running engine reachable over HTTP."""

    name: str
    base_url: str

    def ready(self) -> bool:
        """True when the engine answers its health endpoint and a model is loaded."""
        ...

    def info(self) -> EngineInfo:
        """Version, build and what the engine says about its model and settings."""
        ...

    def generate(self, request: GenerationRequest) -> Generation:
        """One streamed generation with client timestamps per content chunk."""
        ...

    def close(self) -> None:
        """Release the HTTP client (does not stop a server)."""
        ...


@runtime_checkable
class IdentifiesModel(Protocol):
    """An engine that can say what its model is without a file to read (optional)."""

    def model_identity(self) -> ModelInfo | None:
        """Name, size, quantization and parameter count as the engine reports them."""
        ...


def model_identity(engine: Engine) -> ModelInfo | None:
    """What ``engine`` says about its model, or None; optional, not part of ``Engine``."""
    if not isinstance(engine, IdentifiesModel):
        return None
    try:
        return engine.model_identity()
    except EngineError:
        return None


def prompt_cache_off(engine: Engine) -> str | None:
    """Why ``engine``'s prefix cache is known to be off, or None (on, or not known)."""
    says = getattr(engine, "prompt_cache_off", None)
    found = says() if callable(says) else None
    return found if isinstance(found, str) else None


class HttpAdapter:
    """What every built-in adapter holds: its URL (no credentials:
    ``credentials.Endpoint``), a client without keep-alive, the settings it was started
    with, and the model asked for (None: the one served)."""

    def __init__(
        self, base_url: str, *, timeout_s: float = 600.0,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, model: str | None = None,
        settings: tuple[tuple[str, str], ...] = (), transport: httpx.BaseTransport | None = None,
        api_key: ApiKey | None = None, max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        endpoint = Endpoint.of(base_url, api_key)
        self.base_url = endpoint.base_url
        self._client = make_client(timeout_s, transport, endpoint, max_body_bytes)
        self._streams = StreamClient(
            self._client, idle_timeout_s, headers=endpoint.headers,
            query=endpoint.query(), scrub=endpoint.scrub, stdlib=transport is None,
            engine=str(getattr(self, "name", "")))
        self._settings = settings
        self._model = model

    def close(self) -> None:
        """Release the HTTP client (does not stop a server)."""
        self._client.close()

    def _on_error(self, status: int, body: str) -> EngineError | None:
        """The error for an HTTP error answer when the adapter knows a better one."""
        return None

    def _post(self, url: str, body: dict[str, Any], timeout_s: float,
              what: str = "") -> httpx.Response:
        """POST ``body``; an error answer is ``_on_error``'s error, else the engine's words."""
        try:
            response = self._client.post(url, json=body, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"cannot reach {url}{what}: {exc}") from exc
        if response.status_code >= 400:
            raise self._on_error(response.status_code, response.text) or EngineProtocolError(
                f"{url} answered HTTP {response.status_code}: {error_text(response.text)}")
        return response


def make_client(timeout_s: float, transport: httpx.BaseTransport | None = None,
                endpoint: Endpoint | None = None,
                max_body_bytes: int = MAX_BODY_BYTES) -> httpx.Client:
    """An httpx client for one engine, without keep-alive (engines drop idle connections),
    under ``bounded``'s deadline and ``max_body_bytes`` cap; bodies are scrubbed of
    credentials."""
    endpoint = endpoint or Endpoint("")
    hooks: dict[str, list[Callable[[httpx.Response], None]]] = {}
    if endpoint.secrets:
        hooks["response"] = [_scrubber(endpoint)]
    return httpx.Client(
        timeout=httpx.Timeout(min(timeout_s, MAX_WAIT_S), connect=10.0),
        transport=BoundedTransport(transport, max_body_bytes=max_body_bytes),
        limits=httpx.Limits(max_keepalive_connections=0),
        trust_env=False,  # the transport takes the environment's proxy itself, bounded
        headers=dict(endpoint.headers),
        params=endpoint.params,
        event_hooks=hooks,
    )


class _ScrubbedStream(httpx.SyncByteStream):
    """Secrets masked across chunk boundaries (a tail that could begin one is held back)."""

    def __init__(self, inner: httpx.SyncByteStream, secrets: tuple[bytes, ...]) -> None:
        self._inner = inner
        self._secrets = secrets

    def __iter__(self) -> Iterator[bytes]:
        held = b""
        for chunk in self._inner:
            chunk = scrub_bytes(held + chunk, self._secrets)
            keep = _secret_prefix(chunk, self._secrets)
            held = chunk[len(chunk) - keep:] if keep else b""
            chunk = chunk[:len(chunk) - keep]
            if chunk:
                yield chunk
        if held:
            yield held

    def close(self) -> None:
        self._inner.close()


def scrub_bytes(data: bytes, secrets: tuple[bytes, ...]) -> bytes:
    for secret in secrets:
        if secret in data:
            data = data.replace(secret, MASK.encode())
    return data


def _secret_prefix(data: bytes, secrets: tuple[bytes, ...]) -> int:
    """The length of the longest tail of ``data`` that is a proper prefix of a secret."""
    best = 0
    for secret in secrets:
        for size in range(min(len(secret) - 1, len(data)), best, -1):
            if data.endswith(secret[:size]):
                best = size
                break
    return best


def _scrubber(endpoint: Endpoint) -> Callable[[httpx.Response], None]:
    secrets = tuple(s.encode() for s in endpoint.secrets)

    def hook(response: httpx.Response) -> None:
        if isinstance(response.stream, httpx.SyncByteStream):
            response.stream = _ScrubbedStream(response.stream, secrets)

    return hook


def get_json(client: httpx.Client, url: str, what: str) -> Any:
    """GET a JSON document, mapping transport errors and HTML answers to ours."""
    try:
        response = client.get(url)
    except BodyTooLarge as exc:
        raise EngineProtocolError(f"{what}: {exc}") from exc
    except DeadlineExceeded as exc:
        raise EngineUnavailable(f"{what}: {exc}") from exc
    except httpx.HTTPError as exc:
        text = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.ConnectError) and "refused" in text.lower():
            text = f"connection refused ({refused_hint(url)})"
        raise EngineUnavailable(f"cannot reach {url} ({what}): {text}") from exc
    if response.status_code >= 400:
        raise EngineProtocolError(
            f"{url} ({what}) answered HTTP {response.status_code}: {error_text(response.text)}"
            f"{auth_hint(response.status_code)}"
        )
    return decode_json(response.text, what, url)
