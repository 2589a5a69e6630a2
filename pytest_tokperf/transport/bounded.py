"""One policy for every plain request the tool makes: a total deadline and a byte cap."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

import pytest_tokperf.jsontext as jsontext
from pytest_tokperf.errors import EngineUnavailable
from pytest_tokperf.transport import MAX_BODY_BYTES
from pytest_tokperf.transport.answers import AnswerRefused, check_head
from pytest_tokperf.transport.rawhttp import MalformedResponse, ProxyError, RawResponse, open_raw

DEFAULT_DEADLINE_S = 600.0
"""The total deadline of a request that names no read timeout."""

_STREAM_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")
_OWN_HEADERS = frozenset({"host", "user-agent", "accept", "accept-encoding", "content-type",
                          "content-length", "connection", "transfer-encoding"})


class BodyTooLarge(httpx.RemoteProtocolError):
    """An answer longer than the byte cap; its message says which cap and how to raise it."""


class DeadlineExceeded(httpx.ReadTimeout):
    """The total deadline of one request passed before its answer was whole."""


class EngineResponse(httpx.Response):
    """An answer whose ``json()`` refuses JSON nested past ``jsontext.MAX_DEPTH`` too."""

    def json(self, **kwargs: Any) -> Any:
        return jsontext.loads(self.content)


def _streamed(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in _STREAM_TYPES


def _too_large(url: str, cap: int) -> str:
    return (f"{url} sent an answer of more than {cap} bytes ({cap / (1 << 20):g} MiB): "
            f"refused, so memory stays bounded. Is this URL the engine? Raise "
            f"ini tokperf_max_body (or PYTEST_TOKPERF_MAX_BODY) if its answers are legitimately that large")


def _expired(url: str, total_s: float) -> str:
    return (f"{url} did not answer in full within {total_s:g} s (a total deadline: bytes "
            f"trickling in do not extend it); the engine is stuck or far too slow, or raise "
            f"--tokperf-request-timeout")


class _Deadline:
    __slots__ = ("url", "total_s", "end_s")

    def __init__(self, url: str, total_s: float) -> None:
        self.url = url
        self.total_s = total_s
        self.end_s = time.perf_counter() + total_s

    def wait_s(self, now: float) -> float:
        left = self.end_s - now
        if left <= 0:
            raise TimeoutError(_expired(self.url, self.total_s))
        return left


class _RawBody(httpx.SyncByteStream):
    """A stdlib response's body, read within the deadline and up to the cap."""

    def __init__(self, response: RawResponse, deadline: _Deadline, cap: int | None,
                 request: httpx.Request) -> None:
        self._response = response
        self._deadline = deadline
        self._cap = cap
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        deadline, request = self._deadline, self._request
        try:
            for block in self._response.blocks(deadline.wait_s):
                size += len(block)
                if self._cap is not None and size > self._cap:
                    raise BodyTooLarge(_too_large(deadline.url, self._cap), request=request)
                if block:
                    yield block
        except TimeoutError as exc:
            raise DeadlineExceeded(_expired(deadline.url, deadline.total_s),
                                   request=request) from exc
        except MalformedResponse as exc:
            raise AnswerRefused(f"{deadline.url} sent a malformed HTTP answer: {exc}") \
                from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc

    def close(self) -> None:
        self._response.close()


class _CheckedBody(httpx.SyncByteStream):
    """Another transport's body, checked per chunk and cut at the deadline."""

    def __init__(self, inner: httpx.SyncByteStream, deadline: _Deadline, cap: int | None,
                 request: httpx.Request, sock: socket.socket | None) -> None:
        self._inner = inner
        self._deadline = deadline
        self._cap = cap
        self._request = request
        self._done = threading.Event()
        self._fired = False
        if sock is not None:
            threading.Thread(target=self._watch, args=(sock,), daemon=True,
                             name="tokperf-request-watchdog").start()

    def _watch(self, sock: socket.socket) -> None:
        if self._done.wait(max(self._deadline.end_s - time.perf_counter(), 0.0)):
            return
        self._fired = True
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        deadline, request = self._deadline, self._request
        try:
            for block in self._inner:
                if time.perf_counter() > deadline.end_s:
                    raise DeadlineExceeded(_expired(deadline.url, deadline.total_s),
                                           request=request)
                size += len(block)
                if self._cap is not None and size > self._cap:
                    raise BodyTooLarge(_too_large(deadline.url, self._cap), request=request)
                yield block
        except httpx.TransportError as exc:
            if self._fired and not isinstance(exc, DeadlineExceeded):
                raise DeadlineExceeded(_expired(deadline.url, deadline.total_s),
                                       request=request) from exc
            raise
        finally:
            self._done.set()

    def close(self) -> None:
        self._done.set()
        self._inner.close()


class BoundedTransport(httpx.BaseTransport):
    """``inner`` under the policy above; without one, http(s) goes through the stdlib reader
    (via the environment's proxy when ``proxies``; the client needs ``trust_env=False``)."""

    def __init__(self, inner: httpx.BaseTransport | None = None, *,
                 max_body_bytes: int = MAX_BODY_BYTES, proxies: bool = True) -> None:
        self._stdlib = inner is None
        self._inner = inner if inner is not None else httpx.HTTPTransport()
        self._proxies = proxies
        self.max_body_bytes = max_body_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url.copy_with(query=None))
        timeouts = request.extensions.get("timeout") or {}
        read = timeouts.get("read") if isinstance(timeouts, dict) else None
        deadline = _Deadline(url, float(read) if read else DEFAULT_DEADLINE_S)
        if self._stdlib and request.url.scheme in ("http", "https"):
            return self._raw(request, url, deadline)
        request.headers["Accept-Encoding"] = "identity"
        response = self._inner.handle_request(request)
        stream = response.stream
        if not isinstance(stream, httpx.SyncByteStream):
            return response
        try:
            check_head(url, response.status_code, response.headers)
        except AnswerRefused:
            stream.close()
            raise
        cap = None if _streamed(response.headers.get("content-type", "")) \
            else self.max_body_bytes
        network = response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        return EngineResponse(response.status_code, headers=response.headers,
                              stream=_CheckedBody(stream, deadline, cap, request, sock),
                              extensions=response.extensions, request=request)

    def _raw(self, request: httpx.Request, url: str, deadline: _Deadline) -> httpx.Response:
        headers = tuple((k, v) for k, v in request.headers.items()
                        if k.lower() not in _OWN_HEADERS)
        try:
            raw = open_raw(str(request.url), request.read(), headers, deadline.wait_s,
                           method=request.method, proxies=self._proxies)
        except TimeoutError as exc:
            if time.perf_counter() >= deadline.end_s - 0.05:
                raise DeadlineExceeded(_expired(url, deadline.total_s), request=request) \
                    from exc
            raise httpx.ConnectTimeout(f"the connection to {url} timed out",
                                       request=request) from exc
        except MalformedResponse as exc:
            raise AnswerRefused(f"{url} sent a malformed HTTP answer: {exc}") from exc
        except ProxyError as exc:
            raise EngineUnavailable(f"cannot reach {url}: {exc}") from exc
        except ConnectionRefusedError as exc:
            raise httpx.ConnectError(f"[Errno 111] Connection refused ({exc})",
                                     request=request) from exc
        except (socket.gaierror, OSError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        cap = None if _streamed(raw.headers.get("content-type", "")) else self.max_body_bytes
        length = raw.headers.get("content-length", "")
        try:
            check_head(url, raw.status, raw.headers)
            if cap is not None and length.isdigit() and int(length) > cap:
                raise BodyTooLarge(_too_large(url, cap), request=request)
        except (AnswerRefused, BodyTooLarge):
            raw.close()
            raise
        fields = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in raw.headers.items()]
        return EngineResponse(raw.status, headers=fields,
                              stream=_RawBody(raw, deadline, cap, request),
                              extensions={"http_version": b"HTTP/1.1"}, request=request)

    def close(self) -> None:
        self._inner.close()


def bounded_get(url: str, timeout_s: float) -> httpx.Response:
    """One GET under the policy (``timeout_s`` total, the default byte cap)."""
    with httpx.Client(transport=BoundedTransport(proxies=False), timeout=timeout_s,
                      trust_env=False) as client:
        return client.get(url)
