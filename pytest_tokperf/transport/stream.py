"""Streamed generations read with a bounded cost: a deadline, an idle limit, a size cap;
the stdlib reader (``rawhttp``) reads http(s) streams, httpx only a given transport."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_tokperf.errors import (EngineError, EngineProtocolError, EngineUnavailable,
                                   RequestStopped)
from pytest_tokperf.results import GenerationRequest
from pytest_tokperf.transport import DEFAULT_IDLE_TIMEOUT_S
from pytest_tokperf.transport.answers import auth_hint, check_head, error_text
from pytest_tokperf.transport.events import EventParser, StreamStats, decode_event
from pytest_tokperf.transport.rawhttp import (MalformedResponse, RawResponse, capped_text,
                                              open_raw, refused_hint)

MAX_EVENT_BYTES = 8 << 20
"""The longest line or event accepted (llama-server's final event repeats the prompt)."""

MAX_ERROR_BYTES = 64 << 10
"""How much of an error answer is read to quote it."""

MAX_WAIT_S = 86400.0
"""The longest one read may block (a socket timeout must be finite, a limit need not)."""

SLICE_S = 1.0
"""A silent body is waited on in slices this long, so a request's ``stop`` is asked."""


def event_cap(generate_tokens: int) -> int:
    """The most events one stream may send: one per token plus a margin."""
    return generate_tokens + max(32, generate_tokens // 8)


OnError = Callable[[int, str], EngineError | None]


class _Clock:
    """The limits of one stream, on the monotonic clock."""

    __slots__ = ("url", "request", "idle_s", "deadline_s", "last_event_s", "stats")

    def __init__(self, url: str, request: GenerationRequest, idle_s: float,
                 stats: StreamStats) -> None:
        self.url = url
        self.request = request
        self.idle_s = idle_s
        self.deadline_s = time.perf_counter() + request.timeout_s
        self.last_event_s: float | None = None
        self.stats = stats

    def wait_s(self, now: float) -> float:
        """How long the next read may block; past a limit, the error that says which."""
        left = self.deadline_s - now
        if self.last_event_s is not None:
            left = min(left, self.last_event_s + self.idle_s - now)
        if left <= 0 or (self.request.stop is not None and self.request.stop()):
            raise self.expired(now)
        return min(left, MAX_WAIT_S)

    def expired(self, now: float) -> EngineError:
        """The error for the limit that bound the last wait (stopped, idle, else deadline)."""
        stats, request = self.stats, self.request
        if request.stop is not None and request.stop():
            return RequestStopped(f"{self.url}: stopped by its caller after {stats.events} "
                                  f"streamed events of {request.generate_tokens} tokens asked")
        pings = (f"; meanwhile the server sent only {stats.comments} keep-alive comment(s)"
                 if stats.comments else "")
        last = self.last_event_s
        if last is not None and last + self.idle_s < self.deadline_s:
            return EngineUnavailable(
                f"{self.url}: no token for {self.idle_s:g} s (ini tokperf_idle_timeout) after "
                f"{stats.events} streamed events of {request.generate_tokens} tokens asked "
                f"for{pings}: the engine stalled mid-generation. If it legitimately pauses "
                f"longer between tokens, raise ini tokperf_idle_timeout or PYTEST_TOKPERF_IDLE_TIMEOUT"
            )
        if last is None:
            return EngineUnavailable(
                f"{self.url}: no token within {request.timeout_s:g} s of the request "
                f"(--tokperf-request-timeout){pings}: the engine is stuck, or prefill of "
                f"{request.prompt_tokens} prompt tokens takes longer; raise "
                f"--tokperf-request-timeout for long prompts or slow hardware"
            )
        return EngineUnavailable(
            f"{self.url} did not finish {request.generate_tokens} tokens within "
            f"{request.timeout_s:g} s; raise --tokperf-request-timeout or use a smaller model "
            f"({stats.events} events had arrived, the last {now - last:.1f} s before the "
            f"deadline{pings})"
        )


def _check_answer(url: str, status: int, headers: Mapping[str, str], body: Callable[[], str],
                  on_error: OnError | None) -> None:
    """Refuse a redirect, a compressed body, an error status, an HTML page or one JSON
    document before streaming."""
    check_head(url, status, headers)
    content_type = headers.get("content-type", "")
    if status >= 400:
        text = body()
        specific = on_error(status, text) if on_error else None
        raise specific or EngineProtocolError(
            f"{url} answered HTTP {status}: {error_text(text)}{auth_hint(status)}")
    if "text/html" in content_type:
        raise EngineProtocolError(
            f"{url} answered with {error_text(body())}; is --tokperf-url the engine itself "
            f"and not a proxy or web UI?")
    if content_type.startswith("application/json"):
        raise EngineProtocolError(
            f"{url} answered one JSON document, not a stream ({error_text(body())}); does "
            f"this server support streaming on this endpoint?")


@dataclass
class StreamClient:
    """How one adapter streams: its httpx client, headers and query, the idle limit."""

    client: httpx.Client
    idle_s: float = DEFAULT_IDLE_TIMEOUT_S
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    query: str = field(default="", repr=False)
    scrub: Callable[[str], str] = field(default=str, repr=False)
    stdlib: bool = True
    engine: str = ""
    """The adapter's name (``vllm``), said by an error that ends a stream midway."""

    def events(self, url: str, body: dict[str, Any], request: GenerationRequest,
               on_error: OnError | None = None, *, ndjson: bool = False,
               stats: StreamStats | None = None) -> Iterator[tuple[float, dict[str, Any]]]:
        """POST ``body``; each streamed JSON object with its arrival time. A payload that is
        not an object, or an error object mid-stream, raises with the engine's words."""
        stats = stats if stats is not None else StreamStats()
        clock = _Clock(url, request, self.idle_s, stats)
        parser = EventParser(ndjson, url, MAX_EVENT_BYTES, stats)
        # the stdlib reader takes http(s); httpx reads only a given transport
        stdlib = self.stdlib and url.startswith(("http://", "https://"))
        reader = self._stdlib if stdlib else self._httpx
        cap = event_cap(request.generate_tokens)
        events = reader(url, body, clock, parser, on_error)
        last: dict[str, Any] | None = None
        try:
            for item in events:
                if stats.events > cap:
                    raise EngineProtocolError(
                        f"{url} streamed {stats.events} events for {request.generate_tokens} "
                        f"tokens asked (the cap is {cap}: the tokens asked plus a margin for "
                        f"role, usage and final events): cut off. The engine ignores the "
                        f"token limit it was sent (n_predict / max_tokens / num_predict)")
                last = item[1]
                yield item
        except _Lost as exc:
            who = f"{self.engine} at {url}" if self.engine else url
            raise EngineUnavailable(self.scrub(
                f"{who} lost the connection during generation after {stats.events} streamed "
                f"event(s) of {request.generate_tokens} tokens asked (the last event: "
                f"{last!r:.200}): {exc.reason}; the engine died or the connection was cut, so "
                f"this repetition failed; see the engine's log")) from exc.__cause__
        except EngineError as exc:
            message = self.scrub(str(exc))
            if message != str(exc):
                raise type(exc)(message) from exc.__cause__
            raise
        finally:
            events.close()

    # -- stdlib: one socket, chunked decoding and line splitting in bytes ------------

    def _stdlib(self, url: str, body: dict[str, Any], clock: _Clock, parser: EventParser,
                on_error: OnError | None) -> Generator[tuple[float, dict[str, Any]]]:
        target = url + (("&" if "?" in url else "?") + self.query if self.query else "")
        data = json.dumps(body).encode()
        response: RawResponse | None = None
        try:
            response = open_raw(target, data, self.headers, clock.wait_s)
            _check_answer(url, response.status, response.headers,
                          lambda: self.scrub(capped_text(response.blocks(clock.wait_s),
                                                         MAX_ERROR_BYTES) if response else ""),
                          on_error)
            stats = clock.stats
            perf = time.perf_counter
            feed, read, ndjson = parser.feed, response.read, parser.ndjson
            arrived = perf()
            while True:
                now = perf()
                stats.busy_s += now - arrived
                try:
                    block = read(min(clock.wait_s(now), SLICE_S))
                except TimeoutError:  # a slice: wait_s says next whether a limit passed
                    arrived = perf()
                    continue
                arrived = perf()
                if block is None:
                    break
                payloads = feed(block)
                if payloads:
                    stats.events += len(payloads)
                    clock.last_event_s = arrived
                    for payload in payloads:
                        event = decode_event(payload, url, ndjson)
                        if event is None:
                            clock.stats.done = True
                            return
                        yield arrived, event
            for payload in parser.end():
                stats.events += 1
                event = decode_event(payload, url, ndjson)
                if event is None:
                    clock.stats.done = True
                    return
                yield arrived, event
        except TimeoutError as exc:
            now = time.perf_counter()
            if response is None and now + 0.05 < clock.deadline_s:
                raise EngineUnavailable(f"cannot reach {url}: the connection timed out") from exc
            raise clock.expired(now) from exc
        except MalformedResponse as exc:
            raise EngineProtocolError(f"{url} sent a malformed HTTP response: {exc}") from exc
        except ConnectionRefusedError as exc:
            raise EngineUnavailable(f"cannot reach {url}: connection refused "
                                    f"({refused_hint(url)})") from exc
        except OSError as exc:
            if response is None:
                raise EngineUnavailable(f"cannot reach {url}: {exc}") from exc
            raise _Lost(str(exc) or type(exc).__name__) from exc
        finally:
            if response is not None:
                response.close()

    # -- httpx: the same parser over iter_bytes, with a watchdog for blocked reads ----

    def _httpx(self, url: str, body: dict[str, Any], clock: _Clock, parser: EventParser,
               on_error: OnError | None) -> Generator[tuple[float, dict[str, Any]]]:
        watchdog = _Watchdog(clock)
        try:
            timeout = httpx.Timeout(min(clock.request.timeout_s, MAX_WAIT_S), connect=10.0)
            with self.client.stream("POST", url, json=body, timeout=timeout) as response:
                watchdog.watch(response)
                _check_answer(url, response.status_code, response.headers,
                              lambda: self.scrub(capped_text(response.iter_bytes(),
                                                             MAX_ERROR_BYTES)), on_error)
                stats = clock.stats
                perf = time.perf_counter
                arrived = perf()
                for block in response.iter_bytes():
                    arrived = perf()
                    clock.wait_s(arrived)
                    payloads = parser.feed(block)
                    if payloads:
                        stats.events += len(payloads)
                        clock.last_event_s = arrived
                        for payload in payloads:
                            event = decode_event(payload, url, parser.ndjson)
                            if event is None:
                                clock.stats.done = True
                                return
                            yield arrived, event
                    stats.busy_s += perf() - arrived
                for payload in parser.end():
                    stats.events += 1
                    event = decode_event(payload, url, parser.ndjson)
                    if event is None:
                        clock.stats.done = True
                        return
                    yield arrived, event
        except httpx.ConnectTimeout as exc:
            raise EngineUnavailable(f"cannot reach {url}: the connection timed out") from exc
        except httpx.TimeoutException as exc:
            raise clock.expired(time.perf_counter()) from exc
        except httpx.ConnectError as exc:
            refused = "refused" in str(exc).lower()
            raise EngineUnavailable(
                f"cannot reach {url}: " + (f"connection refused ({refused_hint(url)})" if refused
                                           else str(exc))) from exc
        except httpx.HTTPError as exc:
            if watchdog.fired:
                raise clock.expired(time.perf_counter()) from exc
            raise _Lost(str(exc) or type(exc).__name__) from exc
        finally:
            watchdog.stop()


class _Lost(EngineUnavailable):
    """The connection ended mid-stream; ``StreamClient.events`` says who and after what."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Watchdog:
    """Shuts an httpx stream's socket down once a limit passes, waking a blocked read."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    def watch(self, response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        self._thread = threading.Thread(target=self._run, args=(response, sock), daemon=True,
                                        name="tokperf-stream-watchdog")
        self._thread.start()

    def _run(self, response: httpx.Response, sock: socket.socket | None) -> None:
        while True:
            try:
                wait = self._clock.wait_s(time.perf_counter())
            except EngineError:
                break
            if self._done.wait(min(wait, 1.0)):
                return
        self.fired = True
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                response.close()
        except (OSError, RuntimeError, httpx.HTTPError):
            pass

    def stop(self) -> None:
        self._done.set()
