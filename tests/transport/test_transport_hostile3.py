"""Hostile answers, third round: each ends in tokperf's own one-line error, bounded.

A gzip ``/props`` of 4 MB used to be decoded whole (the byte cap counted wire bytes) and
took pytest past 1 GB; 2 MB of brackets was a RecursionError; a redirect or a
``Content-Length: -1`` read "not JSON: ''"; a dead ``HTTP_PROXY`` read "not ready yet"; a
non-ASCII API key was a UnicodeEncodeError; a URL with full-width digits passed the option
check and failed every test with ``httpx.InvalidURL``. ``Canned`` serves the bytes; both
readers (the stdlib one, and httpx under a given transport) are tried where both apply.
"""

from __future__ import annotations

import gzip
import socket
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_tokperf.engines.base import get_json, make_client
from pytest_tokperf.errors import (
    ConfigError,
    EngineError,
    EngineProtocolError,
    EngineUnavailable,
)
from pytest_tokperf.results import GenerationRequest
from pytest_tokperf.settings import resolve
from pytest_tokperf.transport.answers import error_text
from pytest_tokperf.transport.credentials import ApiKey, Endpoint
from pytest_tokperf.transport.events import decode_event
from pytest_tokperf.transport.stream import StreamClient
from tests.transport.canned_http import Canned, chunked, head, plain
from tests.transport.test_engines_faults import bounded

TOTAL_S = 5.0
SECRET = "sk-tokperf-SECRET-4f1c9a"
PASSWORD = "hunter2/secret"


@pytest.fixture(params=["stdlib", "httpx"])
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def client(reader: str) -> httpx.Client:
    return make_client(TOTAL_S, httpx.HTTPTransport() if reader == "httpx" else None)


def props(url: str, reader: str) -> Any:
    """``GET /props`` as every adapter reads a JSON document."""
    with client(reader) as c:
        return bounded(lambda: get_json(c, f"{url}/props", "server properties"), TOTAL_S)


def stream(url: str, reader: str, ndjson: bool = False) -> list[dict[str, Any]]:
    """The events of one streamed generation of 8 tokens."""
    with client(reader) as c:
        streams = StreamClient(c, stdlib=reader == "stdlib", engine="llama-server")
        request = GenerationRequest(4, 8, timeout_s=TOTAL_S)
        return bounded(lambda: [e for _, e in streams.events(f"{url}/completion", {},
                                                              request, ndjson=ndjson)],
                       TOTAL_S)


def refusal(call: Any, *args: Any) -> str:
    with pytest.raises(EngineError) as caught:
        call(*args)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def bomb(decoded_bytes: int, encoding: str) -> bytes:
    """A JSON object of ``decoded_bytes`` spaces, compressed about a thousand to one."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    block = b" " * (1 << 20)
    parts = [co.compress(b'{"a": "')]
    parts += [co.compress(block) for _ in range(decoded_bytes >> 20)]
    return b"".join(parts) + co.compress(b'"}') + co.flush()


# -- 1. compressed answers: refused unread -------------------------------------------------


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_body_is_refused_unread_whatever_it_expands_to(
        reader: str, encoding: str) -> None:
    body = bomb(64 << 20, encoding)  # 64 KiB on the wire, 64 MiB decoded
    assert len(body) < 256 << 10
    with Canned(plain(body, ("Content-Encoding", encoding))) as server:
        tracemalloc.start()
        try:
            message = refusal(props, server.url, reader)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert f"content encoding {encoding!r}" in message and "/props" in message
    assert "Accept-Encoding: identity" in message
    assert peak < 16 << 20, f"{peak} bytes held for a {len(body)}-byte compressed body"


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip", "x-gzip"])
def test_every_content_encoding_but_identity_is_refused(reader: str, encoding: str) -> None:
    with Canned(plain(b"\x1f\x8b\x08\x00junk", ("Content-Encoding", encoding))) as server:
        message = refusal(props, server.url, reader)
    assert f"content encoding {encoding!r}" in message


def test_identity_is_read_and_identity_is_asked_for(reader: str) -> None:
    answer = plain(b'{"build_info": "b1"}', ("Content-Encoding", "identity"))
    with Canned(answer) as server:
        assert props(server.url, reader) == {"build_info": "b1"}
    assert "accept-encoding: identity" in server_request_heads(answer, reader).lower()


def server_request_heads(answer: bytes, reader: str) -> str:
    """The request head the client sends (the canned server keeps first lines only)."""
    seen: list[bytes] = []
    sock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            seen.append(data)
            conn.sendall(answer)

    import threading

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        props(f"http://127.0.0.1:{sock.getsockname()[1]}", reader)
    finally:
        if thread.is_alive() and not seen:  # wake accept() before its socket's number is
            socket.create_connection(sock.getsockname()[:2]).close()  # reused
        thread.join(5.0)
        sock.close()
    return seen[0].decode("latin-1")


@pytest.mark.parametrize("ndjson", [False, True])
def test_a_compressed_stream_is_refused_not_called_a_dead_engine(
        reader: str, ndjson: bool) -> None:
    events = b"".join(b'data: {"content": " a"}\n\n' for _ in range(8))
    kind = "application/x-ndjson" if ndjson else "text/event-stream"
    answer = head(200, ("Content-Type", kind), ("Content-Encoding", "gzip"),
                  ("Transfer-Encoding", "chunked")) + chunked(gzip.compress(events))
    with Canned(answer) as server:
        message = refusal(stream, server.url, reader, ndjson)
    assert "content encoding 'gzip'" in message and "/completion" in message
    assert "died" not in message and "lost the connection" not in message


def test_a_transfer_coding_other_than_chunked_is_refused() -> None:
    answer = head(200, ("Content-Type", "application/json"),
                  ("Transfer-Encoding", "gzip, chunked")) + chunked(gzip.compress(b"{}"))
    with Canned(answer) as server:
        message = refusal(props, server.url, "stdlib")
    assert "Transfer-Encoding 'gzip, chunked'" in message


# -- 2. JSON nested past any engine's answer --------------------------------------------------


def test_two_megabytes_of_brackets_in_props_are_refused_in_words(reader: str) -> None:
    with Canned(plain(b"[" * (2 << 20))) as server:
        message = refusal(props, server.url, reader)
    assert "nested more than 64 levels deep" in message or "not JSON" in message
    with Canned(plain(b"[" * 500 + b"]" * 500)) as server:
        message = refusal(props, server.url, reader)
    assert "nested more than 64 levels deep" in message


def test_every_json_read_of_engine_data_refuses_deep_nesting(reader: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    with Canned(plain(deep)) as server, client(reader) as c:
        response = c.get(f"{server.url}/slots")
        with pytest.raises(ValueError, match="nested more than 64"):
            response.json()
    assert error_text(deep.decode()).startswith("'[[[")
    for payload in (deep, b'{"a": ' * 500 + b"1" + b"}" * 500):
        with pytest.raises(EngineProtocolError, match="nested more than 64 levels deep"):
            decode_event(payload, "http://e/completion", False)


def test_a_deep_stream_event_is_refused_in_words(reader: str) -> None:
    answer = head(200, ("Content-Type", "text/event-stream"),
                  ("Transfer-Encoding", "chunked")) + chunked(
        b'data: {"content": " a"}\n\n', b"data: " + b"[" * (2 << 20) + b"\n\n")
    with Canned(answer) as server:
        message = refusal(stream, server.url, reader)
    assert "a stream event" in message and "/completion" in message
    assert "nested more than 64" in message or "not JSON" in message


# -- 3. what the answer is, said plainly ----------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_says_where_to_and_hides_its_query(reader: str, status: int) -> None:
    to = f"https://sso.example/login?next=/props&token={SECRET}"
    answer = head(status, ("Location", to), ("Content-Length", "0"), reason="Found")
    with Canned(answer) as server:
        message = refusal(props, server.url, reader)
        streamed = refusal(stream, server.url, reader)
    for text in (message, streamed):
        assert f"answered HTTP {status}, a redirect to 'https://sso.example/login?" in text
        assert "follows no redirects" in text and SECRET not in text
    assert "not JSON" not in message


@pytest.mark.parametrize("length", ["-1", "+5", "5, 6", "0x10", "1\xb2"])
def test_an_invalid_content_length_is_named(length: str) -> None:
    answer = head(200, ("Content-Type", "application/json"), ("Content-Length", length))
    with Canned(answer + b"{}") as server:
        message = refusal(props, server.url, "stdlib")
        streamed = refusal(stream, server.url, "stdlib")
    assert "not a valid length" in message and "not JSON" not in message
    assert "not a valid length" in streamed


def test_a_tls_port_asked_over_http_says_use_https() -> None:
    with Canned(b"\x15\x03\x03\x00\x02\x02\x46") as server:
        message = refusal(props, server.url, "stdlib")
    assert "use https://" in message


def test_an_engine_error_with_line_breaks_is_quoted_on_one_line() -> None:
    body = '{"error": {"message": "Traceback:\\n  File x\\n    boom\\r\\n"}}'
    assert "\n" not in error_text(body) and "boom" in error_text(body)
    assert error_text('{"detail": "' + "x" * 5000 + '"}').count("x") <= 500


def test_a_header_outside_ascii_is_read() -> None:
    answer = head(200, ("Content-Type", "application/json"), ("Server", "caf\xe9"),
                  ("Content-Length", "2")) + b"{}"
    with Canned(answer) as server:
        assert props(server.url, "stdlib") == {}


# -- a dead proxy in front of a live engine -------------------------------------------------


@pytest.fixture
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    proxy = f"http://proxyuser:{PASSWORD.replace('/', '%2F')}@127.0.0.1:{port}"
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "NO_PROXY",
                 "ALL_PROXY", "HTTPS_PROXY", "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    yield f"http://127.0.0.1:{port}"


def test_a_dead_proxy_is_named_not_called_a_loading_engine(dead_proxy: str) -> None:
    from pytest_tokperf.engines.llama_server.adapter import LlamaServer

    with Canned(plain(b'{"status": "ok"}')) as server:
        engine = LlamaServer(server.url, timeout_s=TOTAL_S)
        try:
            with pytest.raises(EngineUnavailable) as caught:
                bounded(engine.ready, TOTAL_S)
        finally:
            engine.close()
        message = str(caught.value)
        streamed = refusal(stream, server.url, "stdlib")
    for text in (message, streamed):
        assert f"the proxy {dead_proxy!r} from the environment cannot be reached" in text
        assert "NO_PROXY=127.0.0.1" in text and "loading" not in text
        assert "hunter2" not in text and "proxyuser" not in text


@pytest.mark.parametrize(("proxy", "fragment"), [
    ("socks5://127.0.0.1:1080", "is not an http(s) URL"),
    ("http://[::1", "is not a valid URL (Invalid IPv6 URL)"),
    ("http://proxy:99999", "Port out of range"),
    (f"http://me:{PASSWORD}@proxy:3128", "is not a valid URL (its user name or password"),
])
def test_a_proxy_variable_that_is_no_proxy_url_is_named(
        monkeypatch: pytest.MonkeyPatch, proxy: str, fragment: str) -> None:
    for name in ("http_proxy", "no_proxy", "NO_PROXY", "ALL_PROXY", "all_proxy",
                 "REQUEST_METHOD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    with Canned(plain(b"{}")) as server:
        message = refusal(props, server.url, "stdlib")
    assert "from the environment" in message and fragment in message
    assert "NO_PROXY=127.0.0.1" in message and "hunter2" not in message


# -- 4. secrets and URLs a user types --------------------------------------------------------


def settings(tmp_path: Path, env: dict[str, str] | None = None, **cli: str) -> Any:
    return resolve(lambda name: cli.get(name), lambda key: None, env or {}, tmp_path)


@pytest.mark.parametrize("key", [f"{SECRET}\u201d", f"{SECRET[:8]}\u00a0{SECRET[8:]}", f"{SECRET[:8]} {SECRET[8:]}",
                                 f"{SECRET}\u200b", f"{SECRET}\x00"])
def test_an_api_key_outside_printable_ascii_is_one_line_naming_the_variable(
        tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, {"PYTEST_TOKPERF_API_KEY": key}, url="http://127.0.0.1:8080")
    message = str(caught.value)
    assert "$PYTEST_TOKPERF_API_KEY" in message and "\n" not in message
    assert SECRET not in message and SECRET[:8] not in message and SECRET[8:] not in message


def test_an_ascii_api_key_is_sent(tmp_path: Path) -> None:
    key = settings(tmp_path, {"PYTEST_TOKPERF_API_KEY": SECRET}).api_key
    assert isinstance(key, ApiKey) and Endpoint.of("http://h:1", key).headers == (
        ("Authorization", f"Bearer {SECRET}"),)


@pytest.mark.parametrize(("url", "fragment"), [
    ("http://127.0.0.1:８０８０", "write 'http://127.0.0.1:8080'"),
    ("http://１２７.０.０.１:8080", "write 'http://127.0.0.1:8080'"),
    ("http://bücher.example:8080", "as IDNA: 'xn--bcher-kva.example'"),
    ("http://例え.jp:8080", "as IDNA: 'xn--r8jz45g.jp'"),
    ("http://127.0.0.1:8080/v1/mödels", "percent-encode it"),
    ("http://127.0.0.1:65536", "Port out of range"),
    ("http://127.0.0.1 :8080", "contains ' '"),
    ("http://127.0.0.1:8080/" + "x" * 70000, "URL too long"),
])
def test_a_url_neither_client_can_use_is_refused_at_configure_time(
        tmp_path: Path, url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, url=url)
    message = str(caught.value)
    assert fragment in message and "--tokperf-url" in message and "\n" not in message
    with pytest.raises(ConfigError, match="engine URL"):
        Endpoint.of(url)


@pytest.mark.parametrize("url", [
    f"http://me:{PASSWORD}@127.0.0.1:8080",  # '/' in the password ends the host part
    f"http://me:{PASSWORD.replace('/', '#')}@127.0.0.1:8080",
    f"http://me:{PASSWORD.replace('/', '?')}@127.0.0.1:99999",
    f"http://me:{PASSWORD}\u00e9@127.0.0.1:８０",
])
def test_a_password_never_shows_in_a_url_refusal(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, url=url)
    message = str(caught.value)
    assert "hunter2" not in message and "secret" not in message, message
    assert "127.0.0.1" in message


@pytest.mark.parametrize("url", [f"http://me:{PASSWORD.replace('/', '%2F')}@127.0.0.1:8080",
                                 "http://user:p\u00e4ss@127.0.0.1:8080",
                                 "http://127.0.0.1:8080/v1?key=s\u00e9cret",
                                 "http://[::1]:8080", "http://localhost:8080/"])
def test_an_odd_but_usable_url_is_kept(tmp_path: Path, url: str) -> None:
    assert settings(tmp_path, url=url).url == url.rstrip("/")
    Endpoint.of(url)
