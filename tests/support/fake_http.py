"""A tiny threaded HTTP/1.1 server on 127.0.0.1 for the engine fakes in ``fake_engines``.

Streams use chunked transfer encoding as the real servers (uvicorn, Go, llama.cpp) do;
plain answers carry a Content-Length so connections are kept alive. A fake routes
``GET /api/version`` to its method ``get_api_version(handler, body)``.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


def tokens_of(prompt: Any) -> list[str]:
    """The fakes' tokenizer: a BOS token, then one token per whitespace-separated word."""
    if isinstance(prompt, list):
        return ["<s>"] + [str(t) for t in prompt[1:]] if prompt and prompt[0] == 1 else [str(t) for t in prompt]
    return ["<s>", *str(prompt).split()]


def common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        # Real servers (uvicorn, Go net/http, llama.cpp) disable Nagle, so small stream
        # chunks leave at once instead of coalescing behind the client's delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode()

    def do_GET(self) -> None:
        self.server.fake.route(self, "GET", self.path, None)

    def do_POST(self) -> None:
        self.server.fake.route(self, "POST", self.path, self._body())

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status: int, payload: Any) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json")

    def send_text(self, status: int, text: str, content_type: str = "text/plain") -> None:
        self.send_bytes(status, text.encode(), content_type)

    def start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: str) -> None:
        raw = data.encode()
        self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.flush()

    def sse(self, payload: Any) -> None:
        self.chunk(f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n")

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()



def accept_until(sock: socket.socket, closing: threading.Event,
                 serve: Callable[[socket.socket], None]) -> None:
    """Serve each connection to ``sock`` in a thread of its own until ``closing`` is set,
    then close ``sock`` here: a socket closed under a thread blocked in accept() has its
    number reused by the next test's server, whose connections that thread would steal."""
    sock.settimeout(0.05)
    with sock:
        while not closing.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer

    def get_request(self) -> tuple[Any, Any]:
        """With ``fake.tls``, each connection speaks TLS (the handshake happens in the
        handler's thread, on its first read)."""
        sock, address = super().get_request()
        if self.fake.tls is not None:
            sock = self.fake.tls.wrap_socket(sock, server_side=True,
                                             do_handshake_on_connect=False)
        return sock, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (keep-alive closed, stream abandoned) is not news."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError, ssl.SSLError)):
            super().handle_error(request, client_address)


class FakeServer:
    """One engine on a free loopback port, in a thread; use as a context manager."""

    token_s = 0.003
    prefill_s_per_token = 0.00002
    tls: ssl.SSLContext | None = None
    """A server context: the fake answers https (``fake_routes.tls_server``)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.requests: list[tuple[str, str, Any]] = []
        self.prompts: list[list[str]] = []
        self._server: _Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls is not None else 'http'}://{host}:{port}"

    def __enter__(self) -> FakeServer:
        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.fake = self
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def route(self, h: Handler, method: str, path: str, body: Any) -> None:
        self.requests.append((method, path, body))
        handler = getattr(self, f"{method.lower()}_{path.split('?')[0].strip('/').replace('/', '_')}", None)
        if handler is None:
            h.send_text(404, "404 page not found")
        else:
            handler(h, body)

    def prefill(self, tokens: list[str]) -> float:
        start = time.perf_counter()
        time.sleep(0.002 + self.prefill_s_per_token * len(tokens))
        return time.perf_counter() - start

    def cached(self, tokens: list[str], block: int = 1) -> int:
        """Prefix-cache hit: the longest prefix shared with an earlier prompt."""
        best = max((common_prefix(tokens, p) for p in self.prompts), default=0)
        self.prompts.append(tokens)
        return min(best, len(tokens) - 1) // block * block

    def paced(self, n: int) -> Iterator[tuple[int, str]]:
        """Generated tokens ``(index, text)`` at ``token_s`` each (the first comes at once)."""
        for i in range(n):
            if i:
                time.sleep(self.token_s)
            yield i, " " + WORDS[i % len(WORDS)]


class FakeHtml(FakeServer):
    """A proxy or router login page where the engine should be."""

    def route(self, h: Handler, method: str, path: str, body: Any) -> None:
        h.send_text(200, "<!DOCTYPE html><html><head><title>Router Login</title></head>"
                         "<body>Please sign in</body></html>", "text/html; charset=utf-8")


def generated_count(max_tokens: int, eos_after: int | None, floor: int = 0) -> int:
    """How many tokens a capped engine returns when the model would stop after ``eos_after``."""
    if eos_after is None:
        return max_tokens
    return min(max_tokens, max(eos_after, floor))


def iso_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
