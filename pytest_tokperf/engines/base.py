"""The one Protocol every engine adapter implements, and the shared SSE reader.

An adapter speaks one engine's HTTP API with httpx and nothing else: it does not
start processes (see ``launcher``), compute statistics or store anything. It maps
``httpx.HTTPError`` to ``EngineUnavailable``/``EngineProtocolError`` ``from exc``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

import httpx

from pytest_tokperf.errors import EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import EngineInfo, Generation, GenerationRequest


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


class HttpAdapter:
    """What every built-in adapter holds: its URL, a client without keep-alive, the
    settings tokperf started the engine with, and the model asked for (None: the one
    the engine serves)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 600.0,
        model: str | None = None,
        settings: tuple[tuple[str, str], ...] = (),
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = make_client(timeout_s, transport)
        self._settings = settings
        self._model = model

    def close(self) -> None:
        """Release the HTTP client (does not stop a server)."""
        self._client.close()


def make_client(timeout_s: float, transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """An httpx client for one engine, without keep-alive.

    Engines' embedded HTTP servers close idle or much-used connections on their own
    (llama-server's after a few requests or seconds); reusing such a stale connection
    fails a generation with "Server disconnected without sending a response". A fresh
    loopback connection per request costs well under a millisecond of TTFT.
    """
    return httpx.Client(
        timeout=httpx.Timeout(timeout_s, connect=10.0),
        transport=transport,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def iter_sse_data(response: httpx.Response) -> Iterator[str]:
    """Yield the ``data:`` payloads of a server-sent-event stream as they arrive.

    Comment lines (``:`` pings) and other fields are skipped; multi-line data is
    joined with newlines as the SSE spec says.
    """
    buffer: list[str] = []
    for line in response.iter_lines():
        if line == "":
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith(":"):
            continue
        if line.startswith("data:"):
            value = line[5:]
            buffer.append(value[1:] if value.startswith(" ") else value)
        elif line.startswith("error:"):
            raise EngineProtocolError(f"the engine sent an SSE error event: {line!r}")
    if buffer:
        yield "\n".join(buffer)


def decode_json(payload: str, what: str, url: str) -> Any:
    """Parse one JSON payload or say plainly which engine sent what."""
    try:
        return json.loads(payload)
    except ValueError as exc:
        snippet = payload[:200]
        raise EngineProtocolError(
            f"{url} sent {what} that is not JSON: {snippet!r}. Is this URL really the "
            f"engine you named? Check --tokperf-url and --tokperf-engine."
        ) from exc


def get_json(client: httpx.Client, url: str, what: str) -> Any:
    """GET a JSON document, mapping transport errors and HTML answers to ours."""
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise EngineUnavailable(f"cannot reach {url} ({what}): {exc}") from exc
    if response.status_code >= 400:
        raise EngineProtocolError(
            f"{url} ({what}) answered HTTP {response.status_code}: {response.text[:200]!r}"
        )
    return decode_json(response.text, what, url)
