"""A server on 127.0.0.1 that answers every request with the same bytes, then hangs up.

``Canned(answer)`` reads a request (its head and any ``Content-Length`` body), sends
``answer`` as it is, however wrong (a bad head, a lying length, gzip, a redirect), and
closes the connection; ``answer`` may instead be a function of the request's first line.
``head(...)`` writes a status line and headers; ``chunked(...)`` a chunked body.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Self

from tests.support.fake_http import accept_until


def head(status: int = 200, *fields: tuple[str, str], reason: str = "OK") -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in fields),
             "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def plain(body: bytes, *fields: tuple[str, str], status: int = 200) -> bytes:
    """A whole answer with a true Content-Length (JSON unless ``fields`` say otherwise)."""
    names = {k.lower() for k, _ in fields}
    extra = [] if "content-type" in names else [("Content-Type", "application/json")]
    return head(status, *extra, *fields, ("Content-Length", str(len(body)))) + body


def chunked(*pieces: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces if p) + b"0\r\n\r\n"


class Canned:
    """One canned answer for every connection, each served in its own thread."""

    def __init__(self, answer: bytes | Callable[[str], bytes]) -> None:
        self.answer = answer
        self.lines: list[str] = []
        """The first line of every request the server read."""
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._closing = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> Self:
        self._acceptor = threading.Thread(target=accept_until,
                                          args=(self._sock, self._closing, self._serve),
                                          daemon=True)
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self._acceptor.join(5.0)  # it closes the socket (accept_until)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10.0)
                line = self._read_request(conn)
                if line is None:
                    return
                self.lines.append(line)
                answer = self.answer(line) if callable(self.answer) else self.answer
                conn.sendall(answer)
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(2.0)
                while conn.recv(65536):  # let the client read it all, then close
                    pass
            except OSError:
                pass

    @staticmethod
    def _read_request(conn: socket.socket) -> str | None:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return None
            data += more
        top, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for field in top.split(b"\r\n")[1:]:
            name, _, value = field.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip() or 0)
        while len(rest) < length:
            more = conn.recv(65536)
            if not more:
                break
            rest += more
        return top.split(b"\r\n", 1)[0].decode("latin-1")
