"""Streamed bytes in, JSON events out: SSE or NDJSON, with a cap on their size."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest_tokperf.jsontext as jsontext
from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.transport.answers import decode_json, error_text


@dataclass(slots=True)
class StreamStats:
    """What reading one stream cost the client; ``busy_s``: time between reads."""

    busy_s: float = 0.0
    events: int = 0
    comments: int = 0
    done: bool = False
    """True once SSE's ``data: [DONE]`` arrived: the engine said the stream is whole."""

    @property
    def busy_s_per_event(self) -> float | None:
        return self.busy_s / self.events if self.events else None


class EventParser:
    """Bytes in, complete SSE ``data:`` payloads or NDJSON lines out."""

    __slots__ = ("ndjson", "url", "limit", "parts", "partial_bytes", "stats", "sep")

    def __init__(self, ndjson: bool, url: str, limit: int, stats: StreamStats) -> None:
        self.ndjson = ndjson
        self.url = url
        self.limit = limit
        self.parts: list[bytes] = []
        """Bytes of an event (SSE) or line (NDJSON) whose end has not arrived."""
        self.partial_bytes = 0
        self.stats = stats
        self.sep = b"\n" if ndjson else b"\n\n"

    def _too_long(self, size: int) -> EngineProtocolError:
        what = "a line" if self.ndjson else "an event"
        return EngineProtocolError(
            f"{self.url} sent {what} of more than {self.limit >> 20} MiB ({size} bytes "
            f"without its end): refused, so memory stays bounded. Is this URL a streaming "
            f"engine?"
        )

    def _hold(self, data: bytes) -> None:
        self.parts.append(data)
        self.partial_bytes += len(data)
        if self.partial_bytes > self.limit:
            raise self._too_long(self.partial_bytes)

    def feed(self, block: bytes) -> list[bytes]:
        if self.parts:
            self.parts.append(block)
            block = b"".join(self.parts)
            self.parts = []
            self.partial_bytes = 0
        if b"\r" in block:
            block = block.replace(b"\r\n", b"\n")
            if block[-1:] == b"\r":  # its LF may come with the next block
                self._hold(block)
                return []
        if self.sep not in block:
            if block:
                self._hold(block)
            return []
        pieces = block.split(self.sep)
        tail = pieces.pop()
        if tail:
            self._hold(tail)
        if self.ndjson:
            return [line for line in pieces if line.strip()]
        out: list[bytes] = []
        for piece in pieces:
            if piece[:6] == b"data: " and b"\n" not in piece:
                out.append(piece[6:])
            elif piece:
                self._event_lines(piece, out)
        return out

    def _event_lines(self, piece: bytes, out: list[bytes]) -> None:
        data: list[bytes] = []
        for line in piece.split(b"\n"):
            if line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line[:1] == b":":
                self.stats.comments += 1
            elif line[:6] == b"error:":
                raise EngineProtocolError(
                    f"{self.url}: the engine sent an SSE error event: "
                    f"{line.decode('utf-8', 'replace')[:200]!r}")
        if data:
            out.append(b"\n".join(data))

    def end(self) -> list[bytes]:
        """What is left when the stream ends: a last line or event without its end."""
        rest = b"".join(self.parts).replace(b"\r\n", b"\n").rstrip(b"\r\n")
        self.parts = []
        if not rest.strip():
            return []
        if self.ndjson:
            return [line for line in rest.split(b"\n") if line.strip()]
        out: list[bytes] = []
        self._event_lines(rest, out)
        return out


_scan: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")
"""The C scanner ``JSONDecoder`` builds for itself (``_json.make_scanner``)."""


def decode_event(payload: bytes, url: str, ndjson: bool) -> dict[str, Any] | None:
    """One payload as a JSON object; None for SSE's ``[DONE]``."""
    what = "an NDJSON line" if ndjson else "a stream event"
    try:
        text = payload.decode()
        event, end = _scan(text, 0)
        if end != len(text) and text[end:].strip():
            raise ValueError("extra data")
    except (ValueError, StopIteration, RecursionError):
        if not ndjson and payload.strip() == b"[DONE]":
            return None
        event = decode_json(payload, what, url)
    else:
        if (payload.count(b"[") + payload.count(b"{") > jsontext.MAX_DEPTH
                and jsontext.depth(event) > jsontext.MAX_DEPTH):
            event = decode_json(payload, what, url)  # refuses it, in words
    if type(event) is not dict:
        raise EngineProtocolError(
            f"{url} sent a non-object {'line' if ndjson else 'event'}: {event!r:.200}")
    if "error" in event or event.get("object") == "error":
        raise EngineProtocolError(f"{url} reported an error mid-stream: "
                                  f"{error_text(payload.decode('utf-8', 'replace'))}")
    return event
