"""Property-based fuzzing (hypothesis) of what an engine answers, at the transport level:
``/props`` bodies, streamed SSE events and NDJSON lines, and the headers around them
(status, Content-Type, Content-Encoding, Content-Length, Transfer-Encoding), served by a
real server on 127.0.0.1 (``canned_http``) to both readers; the event parser, error
bodies, URLs and API keys are fed to their functions directly.

The property is the fuzz suite's (``tests/package/test_fuzz_inputs.py``): the answer is
read, or refused with tokperf's own error (``EngineError``, ``ConfigError``) carrying one
line that shows no secret; never another exception, and never longer than the request's
deadline. Example counts keep the file well under 40 s on 2 cores; ``deadline=None``
because a shared CI core makes timing noisy (the bound asserted is the request's own).
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_tokperf.engines.base import get_json, make_client
from pytest_tokperf.errors import ConfigError, EngineError, EngineProtocolError
from pytest_tokperf.results import GenerationRequest
from pytest_tokperf.transport.answers import error_text
from pytest_tokperf.transport.credentials import (
    ApiKey,
    Endpoint,
    redact_url,
    url_problem,
)
from pytest_tokperf.transport.events import EventParser, StreamStats, decode_event
from pytest_tokperf.transport.rawhttp import open_raw
from pytest_tokperf.transport.stream import StreamClient
from tests.transport.canned_http import Canned

DEADLINE_S = 3.0
SECRET = "sk-fuzz-SECRET-77e1"
PASSWORD = "hunter2"
SERVED = settings(max_examples=100, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
QUICK = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LINE = b"@@LINE@@"
"""Replaced by the request's first line (which carries the query's secret): an echo."""


def one_line(message: str) -> None:
    assert message and "\n" not in message and "\r" not in message, message
    assert "Traceback" not in message and SECRET not in message, message


@pytest.fixture(scope="module")
def server() -> Iterator[Canned]:
    with Canned(b"") as canned:
        yield canned


def serve(server: Canned, status: int, fields: list[tuple[str, str]], body: bytes,
          length: str | None, chunks: int) -> None:
    """Answer with ``body`` (the request line put in for ``LINE``) under ``fields``;
    ``length``: 'true', an exact header value, or None (chunked when ``chunks``, else the
    end of the body is the connection's)."""

    def answer(line: str) -> bytes:
        data = body.replace(LINE, line.encode("latin-1"))
        head = [f"HTTP/1.1 {status} X", *(f"{k}: {v.replace('@@LINE@@', line)}"
                                          for k, v in fields)]
        if chunks and length is None:
            head.append("Transfer-Encoding: chunked")
            size = max(1, len(data) // chunks)
            pieces = [data[i:i + size] for i in range(0, len(data), size)]
            data = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + \
                b"0\r\n\r\n"
        elif length is not None:
            head.append(f"Content-Length: {len(data) if length == 'true' else length}")
        head.append("Connection: close")
        return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data

    server.answer = answer


def json_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                    inner, max_size=4),
        max_leaves=12)


def compressed(data: bytes, how: str) -> bytes:
    if how == "gzip":
        return gzip.compress(data)
    return zlib.compress(data) if how == "deflate" else data


STATUSES = st.sampled_from([200, 200, 200, 200, 204, 301, 302, 304, 400, 401, 404, 500, 503,
                            599, 999])
CONTENT_TYPES = st.sampled_from(["application/json", "application/json; charset=utf-8",
                                 "application/json; charset=zzz", "text/html",
                                 "text/event-stream", "application/x-ndjson", "text/plain",
                                 ""])
ENCODINGS = st.sampled_from([None, None, None, "identity", "gzip", "deflate", "br", "zstd",
                             "GZIP", "gzip, identity", "\u00e9"])
LENGTHS = st.one_of(st.sampled_from(["true", "true", None, "-1", "0", "+5", "1e3", "5, 5",
                                     " 7 ", "99999999999999999999", "0x10", "\u00b2"]),
                    st.integers(-3, 1 << 16).map(str))
HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=255,
                                    blacklist_characters="\r\n\x7f"), max_size=30)


@st.composite
def headers(draw: st.DrawFn, kinds: st.SearchStrategy[str]) -> list[tuple[str, str]]:
    fields = [("Content-Type", draw(kinds))]
    encoding = draw(ENCODINGS)
    if encoding is not None:
        fields.append(("Content-Encoding", encoding))
    if draw(st.booleans()):
        fields.append(("Location", draw(st.sampled_from(
            ["http://other/x?key=@@LINE@@", "/login", "", "https://sso/?t=" + SECRET]))))
    if draw(st.booleans()):
        fields.append((draw(st.sampled_from(["Server", "X-Pad", "Set-Cookie", "Vary"])),
                       draw(HEADER_TEXT)))
    return fields


@st.composite
def props_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["json", "json", "error", "text", "deep", "bytes", "echo"]))
    if kind == "json":
        data = json.dumps(draw(json_values())).encode()
    elif kind == "error":
        data = json.dumps({"error": {"message": draw(st.text(max_size=80)) + "@@LINE@@"}}
                          ).encode()
    elif kind == "text":
        data = draw(st.text(max_size=200)).encode()
    elif kind == "deep":
        data = draw(st.sampled_from([b"[", b"{\"a\":", b"[{\"b\":"])) * draw(
            st.sampled_from([65, 500, 5000, 200_000]))
    elif kind == "echo":
        data = b'{"build_info": "@@LINE@@"}'
    else:
        data = draw(st.binary(max_size=300))
    return compressed(data, draw(st.sampled_from(["none", "none", "gzip", "deflate"])))


def client(reader: str) -> tuple[httpx.Client, Endpoint]:
    endpoint = Endpoint.of(f"http://127.0.0.1:1/?key={SECRET}", ApiKey(SECRET))
    transport = httpx.HTTPTransport() if reader == "httpx" else None
    return make_client(DEADLINE_S, transport, endpoint), endpoint


def timed(call: Any) -> Any:
    """``call()``, its error if it is tokperf's own (one line, no secret), within the
    request deadline."""
    start = time.perf_counter()
    try:
        return call()
    except (EngineError, ConfigError) as exc:
        one_line(str(exc))
        return exc
    finally:
        assert time.perf_counter() - start < DEADLINE_S + 2.0


@SERVED
@given(reader=st.sampled_from(["stdlib", "httpx"]), status=STATUSES,
       fields=headers(CONTENT_TYPES), body=props_bodies(), length=LENGTHS,
       chunks=st.integers(0, 3))
@example(reader="stdlib", status=200, fields=[("Content-Type", "application/json"),
                                               ("Content-Encoding", "gzip")],
         body=gzip.compress(b" " * (32 << 20)), length="true", chunks=0)
@example(reader="httpx", status=200, fields=[("Content-Type", "application/json")],
         body=b"[" * (2 << 20), length=None, chunks=2)
@example(reader="stdlib", status=302, fields=[("Content-Type", "text/html"),
                                               ("Location", "/login?t=@@LINE@@")],
         body=b"", length="-1", chunks=0)
def test_any_props_answer_is_read_or_refused_in_one_line(
        server: Canned, reader: str, status: int, fields: list[tuple[str, str]], body: bytes,
        length: str | None, chunks: int) -> None:
    serve(server, status, fields, body, length, chunks)
    http, _ = client(reader)
    with http:
        timed(lambda: get_json(http, f"{server.url}/props", "server properties"))


STREAM_KINDS = st.sampled_from(["text/event-stream", "text/event-stream",
                                "application/x-ndjson", "text/event-stream; charset=utf-8",
                                "application/json", "text/html", ""])


@st.composite
def stream_bodies(draw: st.DrawFn) -> bytes:
    """Events as engines write them, and not: objects, [DONE], comments, error lines,
    non-objects, deep nesting, broken JSON, bare CR line ends."""
    ndjson = draw(st.booleans())
    parts = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["event", "event", "event", "done", "comment", "error",
                                     "list", "deep", "broken", "bytes", "echo"]))
        payload = {
            "event": lambda: json.dumps({"content": draw(st.text(max_size=6)),
                                         "stop": draw(st.booleans())}).encode(),
            "done": lambda: b"[DONE]",
            "comment": lambda: b": ping",
            "error": lambda: json.dumps({"error": draw(st.text(max_size=30))}).encode(),
            "list": lambda: json.dumps(draw(json_values())).encode(),
            "deep": lambda: b"[" * draw(st.sampled_from([65, 1000, 100_000])),
            "broken": lambda: b'{"content": "a',
            "bytes": lambda: draw(st.binary(max_size=40)),
            "echo": lambda: b'{"error": {"message": "@@LINE@@"}}',
        }[kind]()
        if ndjson or kind == "comment":
            parts.append(payload)
        else:
            parts.append(draw(st.sampled_from([b"data: ", b"data:", b"event: x\ndata: ",
                                               b"error: "])) + payload)
    sep = b"\n" if ndjson else draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n\r\n"]))
    data = sep.join(parts) + draw(st.sampled_from([sep, b"", b"\n"]))
    return compressed(data, draw(st.sampled_from(["none", "none", "none", "gzip"])))


@SERVED
@given(reader=st.sampled_from(["stdlib", "httpx"]), status=STATUSES,
       fields=headers(STREAM_KINDS), body=stream_bodies(), length=LENGTHS,
       chunks=st.integers(0, 6), ndjson=st.booleans())
def test_any_stream_is_read_or_refused_in_one_line(
        server: Canned, reader: str, status: int, fields: list[tuple[str, str]], body: bytes,
        length: str | None, chunks: int, ndjson: bool) -> None:
    serve(server, status, fields, body, length, chunks)
    http, endpoint = client(reader)
    streams = StreamClient(http, headers=endpoint.headers, query=endpoint.query(),
                           scrub=endpoint.scrub, stdlib=reader == "stdlib", engine="fuzz")
    request = GenerationRequest(4, 8, timeout_s=DEADLINE_S)
    with http:
        timed(lambda: [event for _, event in streams.events(
            f"{server.url}/completion", {"n_predict": 8}, request, ndjson=ndjson)])


@QUICK
@given(blocks=st.lists(st.binary(max_size=64) | st.sampled_from(
    [b"data: ", b"\n\n", b"\r\n", b"\r", b"[DONE]", b'{"a": 1}', b"[" * 80, b": c\n\n",
     b"error: x\n\n", b"data: [[[[" * 30]), max_size=12), ndjson=st.booleans())
def test_any_bytes_through_the_event_parser_are_events_or_one_line(
        blocks: list[bytes], ndjson: bool) -> None:
    parser = EventParser(ndjson, "http://e/completion", 1 << 12, StreamStats())
    try:
        payloads = [p for block in blocks for p in parser.feed(block)] + parser.end()
        for payload in payloads:
            event = decode_event(payload, "http://e/completion", ndjson)
            assert event is None or type(event) is dict
    except EngineProtocolError as exc:
        one_line(str(exc))


@QUICK
@given(body=st.text(max_size=300) | st.builds(
    lambda v: json.dumps(v), st.fixed_dictionaries(
        {"error": st.text(max_size=60) | st.fixed_dictionaries({"message": json_values()})})))
def test_any_error_body_is_quoted_on_one_line(body: str) -> None:
    text = error_text(body)
    assert "\n" not in text and "\r" not in text and len(text) <= 1024


URL_CHARS = st.sampled_from(list("09:/?#@%[]. -_~é８") + ["\u200b", "\t", "xn--", "::1"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http://", "https://", "ftp://", "", "http:/"]))
    password = PASSWORD + "".join(draw(st.lists(URL_CHARS, max_size=3)))
    userinfo = draw(st.sampled_from(["", f"me:{password}@", f"{password}@"]))
    host = draw(st.sampled_from(["127.0.0.1", "localhost", "[::1]", "１２７.０.０.１", "bücher.de",
                                 "例え.jp", "", "a b", "[::1"]) | st.text(max_size=8))
    port = draw(st.sampled_from(["", ":8080", ":0", ":65536", ":-1", ":８０", ":+80", ":"])
                | st.integers(-2, 70000).map(lambda n: f":{n}"))
    rest = "".join(draw(st.lists(URL_CHARS | st.text(max_size=3), max_size=5)))
    return scheme + userinfo + host + port + rest


@QUICK
@given(url=urls())
@example(url="http://127.0.0.1:８０８０")
@example(url="http://me:hunter2/x@127.0.0.1:8080")
@example(url="http://me:hunter2\u200b/@127.0.0.1")  # urlsplit quotes the password escaped
@example(url="http://[::1]@]")  # userinfo "[::1]", host "]": the stdlib cannot split it
def test_any_url_is_usable_by_both_clients_or_refused_in_one_line(url: str) -> None:
    secret = "//me:" in url  # user:password: the password shows nowhere, parsed or not
    assert not secret or PASSWORD not in redact_url(url), redact_url(url)
    try:
        endpoint = Endpoint.of(url)
    except ConfigError as exc:
        one_line(str(exc))
        assert not secret or PASSWORD not in str(exc), str(exc)
        return
    assert url_problem(url.strip()) is None
    httpx.URL(endpoint.base_url + "/completion")
    with pytest.raises((TimeoutError, OSError)):  # parsed, then no time left to connect
        open_raw(endpoint.base_url + "/completion", b"", (), _no_time)


def _no_time(now: float) -> float:
    raise TimeoutError("no connecting in a parse test")


@QUICK
@given(tail=st.text(min_size=0, max_size=40), head=st.sampled_from(["", " ", "\n"]))
def test_any_api_key_is_sent_as_ascii_or_refused_without_showing_it(head: str, tail: str) -> None:
    # "sk-" + a tail: a key the message's own words cannot contain by chance
    key = f"{head}sk-{tail}"
    try:
        api_key = ApiKey(key)
    except ValueError as exc:
        one_line(str(exc))
        assert key.strip() not in str(exc)
        return
    make_client(1.0, None, Endpoint.of("http://127.0.0.1:1", api_key)).close()
    f"Bearer {api_key.reveal()}".encode("ascii")
