"""The other ways to an engine: https with a self-signed certificate, and an HTTP proxy.

- ``tls_files()``: a certificate for ``127.0.0.1`` and ``localhost`` and its key, made
  once per process by the ``openssl`` command (``needs_openssl`` skips without it);
- ``over_tls(fake)``: the fake answers https; while it runs, ``SSL_CERT_FILE`` names
  the certificate, so the client trusts it as it would a real engine's CA;
- ``FakeProxy(mode)``: a proxy on 127.0.0.1; while it runs, ``HTTP_PROXY`` and
  ``HTTPS_PROXY`` name it (``NO_PROXY`` unset). ``ok`` tunnels ``CONNECT`` and forwards
  absolute-form requests; ``trickle`` answers either one byte every 0.2 s, forever;
  ``deny`` answers 407 (proxy authentication required).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

from tests.support.fake_http import FakeServer, accept_until

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="the openssl command makes the test certificate")
_FILES: list[tuple[Path, Path]] = []
F = TypeVar("F", bound=FakeServer)


def tls_files() -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command makes the test certificate")
    if not _FILES:
        folder = Path(tempfile.mkdtemp(prefix="tokperf-tls-"))
        cert, key = folder / "cert.pem", folder / "key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1,DNS:localhost",
                        "-keyout", str(key), "-out", str(cert)],
                       check=True, capture_output=True, timeout=60)
        _FILES.append((cert, key))
    return _FILES[0]


class _Env:
    """Set environment variables for a with-block, then put them back."""

    def __init__(self, values: dict[str, str | None]) -> None:
        self.values = values
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for name, value in self.values.items():
            self.saved[name] = os.environ.get(name)
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def __exit__(self, *exc: object) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Tls:
    def __init__(self, fake: FakeServer) -> None:
        cert, key = tls_files()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        fake.tls = context
        self.fake = fake
        self.env = _Env({"SSL_CERT_FILE": str(cert), "SSL_CERT_DIR": None})

    @property
    def url(self) -> str:
        return self.fake.url

    def __enter__(self) -> Any:
        self.env.__enter__()
        self.fake.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.__exit__(*exc)
        self.env.__exit__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)


def over_tls(fake: FakeServer) -> Any:
    """``fake`` over https, its certificate trusted while the with-block runs."""
    return _Tls(fake)


_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY",
               "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


class FakeProxy:
    """An HTTP proxy in front of ``fake`` (entered with it); see the module docstring."""

    def __init__(self, fake: Any, mode: str = "ok") -> None:
        self.fake = fake
        self.mode = mode
        self.seen: list[str] = []
        """The first line of every request the proxy got."""
        self.closing = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        values: dict[str, str | None] = dict.fromkeys(_PROXY_VARS)
        values.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy)
        self.env = _Env(values)
        self.proxy_url = proxy

    @property
    def url(self) -> str:
        return str(self.fake.url)

    def __enter__(self) -> FakeProxy:
        self.fake.__enter__()
        self.env.__enter__()
        self._acceptor = threading.Thread(target=accept_until,
                                          args=(self._sock, self.closing, self._serve),
                                          daemon=True)
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        self._acceptor.join(5.0)  # it closes the socket (accept_until)
        self.env.__exit__()
        self.fake.__exit__(*exc)

    def _serve(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                more = client.recv(65536)
                if not more:
                    return
                head += more
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.seen.append(line)
            method, target = line.split(" ")[:2]
            if self.mode == "deny":
                client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                               b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                return
            if self.mode == "trickle":
                answer = b"HTTP/1.1 200 Connection established\r\nX-Pad: " + b"." * 4096
                for i in range(len(answer)):
                    if self.closing.wait(0.2):
                        return
                    try:
                        client.sendall(answer[i:i + 1])
                    except OSError:
                        return
                return
            address = self.fake.url.split("://", 1)[1]
            host, port = address.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                return
            with upstream:
                if method == "CONNECT":
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    parts = urlsplit(target)
                    origin = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                    head = head.replace(target.encode(), origin.encode(), 1)
                    upstream.sendall(head)
                self._pipe(client, upstream)

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        def copy(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        other = threading.Thread(target=copy, args=(b, a), daemon=True)
        other.start()
        copy(a, b)
        other.join(30)
