"""The smallest HTTP/1.1 client that can read a token stream fast and with bounded cost:
every blocking step is bounded by the caller's ``wait_s(now)``."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import SplitResult, quote, unquote, urlsplit

import httpx

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.transport.credentials import host_port, redact_url, url_problem

CONNECT_TIMEOUT_S = 10.0
MAX_HEAD_BYTES = 64 << 10
MAX_SIZE_LINE = 4096
READ_BYTES = 256 << 10
USER_AGENT = "pytest-tokperf"

WaitS = Callable[[float], float]
"""``wait_s(now)``: how long the next blocking step may take; raises past a limit."""


class MalformedResponse(ValueError):
    """The bytes are not an HTTP/1.x response (or not a well-formed one)."""


class ProxyError(ConnectionError):
    """The environment's proxy could not be reached or refused the tunnel."""


def default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def refused_hint(url: str) -> str:
    parts = urlsplit(url)
    return (f"nothing listens on {parts.hostname}:{parts.port or default_port(parts.scheme)}; "
            f"start the engine there, or fix --tokperf-url")


def proxy_for(url: str) -> str | None:
    """The environment's proxy for ``url``, as httpx takes it; None for direct."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


_CONTEXTS: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def tls_context() -> ssl.SSLContext:
    """httpx's default client context, made once per ``SSL_CERT_FILE``/``SSL_CERT_DIR``."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _CONTEXTS.get(key)
    if context is None:
        context = _CONTEXTS[key] = httpx.create_ssl_context()
    return context


class RawResponse:
    """A response whose head is read; ``read`` hands on body data as it arrives."""

    __slots__ = ("status", "headers", "_sock", "_buf", "_mode", "_left", "_pending", "_ended")

    def __init__(self, sock: socket.socket, status: int, headers: dict[str, str],
                 leftover: bytes) -> None:
        self.status = status
        self.headers = headers
        self._sock = sock
        self._buf = leftover
        self._pending = b""
        self._ended = False
        self._left = -1
        """Chunked: data bytes left in this chunk; -1 a size line is next, -2 its CRLF."""
        coding = headers.get("transfer-encoding", "").strip().lower()
        if coding == "chunked":
            self._mode = "chunked"
        elif coding:
            raise MalformedResponse(
                f"Transfer-Encoding {coding[:40]!r}: this client reads chunked or plain "
                f"bodies only (a transfer coding such as gzip is refused unread)")
        elif "content-length" in headers:
            self._mode = "length"
            length = headers["content-length"].strip()
            if not (length.isascii() and length.isdigit()):
                raise MalformedResponse(
                    f"Content-Length {headers['content-length'][:40]!r} is not a valid length "
                    f"(one whole number of bytes)")
            self._left = int(length)
            self._ended = self._left == 0
        else:
            self._mode = "close"

    def read(self, timeout_s: float) -> bytes | None:
        """The next body bytes (possibly empty), or None once the body has ended."""
        if self._ended:
            return None
        if self._buf:
            raw, self._buf = self._buf, b""
        else:
            self._sock.settimeout(timeout_s)
            raw = self._sock.recv(READ_BYTES)
            if not raw:
                if self._mode == "close":
                    self._ended = True
                    return None
                raise ConnectionResetError(
                    "the server closed the connection in the middle of the response body")
        if self._mode == "chunked":
            return self._dechunk(raw)
        if self._mode == "length":
            raw = raw[:self._left]
            self._left -= len(raw)
            self._ended = self._left <= 0
        return raw

    def _dechunk(self, raw: bytes) -> bytes:
        if self._pending:
            raw, self._pending = self._pending + raw, b""
        out: list[bytes] = []
        pos, n, left = 0, len(raw), self._left
        while pos < n:
            if left > 0:
                end = pos + left
                if end > n:
                    out.append(raw[pos:])
                    left -= n - pos
                    break
                out.append(raw[pos:end])
                pos, left = end, -2
            elif left == -2:
                if n - pos < 2:
                    self._pending = raw[pos:]
                    break
                if raw[pos:pos + 2] != b"\r\n":
                    raise MalformedResponse("a chunk does not end with CRLF")
                pos, left = pos + 2, -1
            else:
                nl = raw.find(b"\n", pos)
                if nl < 0:
                    if n - pos > MAX_SIZE_LINE:
                        raise MalformedResponse("a chunk-size line longer than 4 KiB")
                    self._pending = raw[pos:]
                    break
                line = raw[pos:nl].split(b";", 1)[0]
                try:
                    size = int(line, 16)
                except ValueError as exc:
                    raise MalformedResponse(f"chunk size {line[:40]!r} is not hexadecimal") \
                        from exc
                if size < 0:
                    raise MalformedResponse(f"chunk size {line[:40]!r} is negative")
                pos = nl + 1
                if size == 0:
                    self._ended = True
                    break
                left = size
        self._left = left
        return out[0] if len(out) == 1 else b"".join(out)

    def blocks(self, wait_s: WaitS) -> Iterator[bytes]:
        """The rest of the body, block by block, each read within ``wait_s``."""
        while (block := self.read(wait_s(time.perf_counter()))) is not None:
            yield block

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def capped_text(blocks: Iterable[bytes], cap: int) -> str:
    """The first ``cap`` bytes of ``blocks`` as text (to quote an error answer)."""
    parts: list[bytes] = []
    size = 0
    for block in blocks:
        parts.append(block)
        size += len(block)
        if size >= cap:
            break
    return b"".join(parts)[:cap].decode("utf-8", errors="replace")


def open_raw(url: str, body: bytes, headers: tuple[tuple[str, str], ...], wait_s: WaitS,
             method: str = "POST", proxies: bool = True) -> RawResponse:
    """Send ``body`` as JSON to ``url`` and read the answer's status line and headers."""
    parts, host, port = _where(url)
    target = _ascii_target((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    authority = host_port(host, parts.port or None)
    proxy = proxy_for(url) if proxies else None
    extra: list[str] = []
    if proxy is not None and parts.scheme == "http":
        target = f"http://{authority}{target}"
        extra += _proxy_auth(proxy)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}", f"User-Agent: {USER_AGENT}",
             "Accept: text/event-stream, application/x-ndjson, application/json",
             "Accept-Encoding: identity", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close", *extra]
    lines += [f"{name}: {value}" for name, value in headers]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    sock = _connect(parts.scheme, host, port, proxy, wait_s)
    try:
        sock.settimeout(wait_s(time.perf_counter()))
        sock.sendall(request)
        status, fields, buf = _read_head(sock, wait_s)
        return RawResponse(sock, status, fields, buf)
    except BaseException:
        sock.close()
        raise


def _where(url: str) -> tuple[SplitResult, str, int]:
    """``url`` split, its host in ASCII (IDNA) and its port; ``ConfigError`` says why not
    (a port out of range, a host IDNA refuses)."""
    try:
        parts = urlsplit(url)
        port = parts.port or default_port(parts.scheme)
        host = parts.hostname or ""
        if not host.isascii():
            host = host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        why = url_problem(url) or "is not a URL to connect to"
    else:
        if host:
            return parts, host, port
        why = "names no host"
    raise ConfigError(f"cannot request {redact_url(url)!r} {why}; give an http(s) URL such as "
                      f"http://127.0.0.1:8080") from None


def _ascii_target(target: str) -> str:
    """The request target as the request line carries it: ASCII, percent-encoded."""
    if target.isascii() and target.isprintable() and " " not in target:
        return target
    return quote(target, safe="/?&=%:@!$'()*+,;~-._[]")


def _connect(scheme: str, host: str, port: int, proxy: str | None,
             wait_s: WaitS) -> socket.socket:
    """A connection ready for the request: direct, or through the proxy; TLS for https."""
    if proxy is None:
        sock = _tcp(host, port, wait_s)
        return _tls(sock, host, wait_s) if scheme == "https" else sock
    shown = repr(redact_url(proxy if "://" in proxy else f"http://{proxy}"))
    problem = url_problem(proxy)
    if problem is not None:
        raise ProxyError(f"the proxy {shown} from the environment {problem}; tokperf tunnels "
                         f"through http:// or https:// proxies only: fix HTTP_PROXY/HTTPS_PROXY "
                         f"or set NO_PROXY={host} (or unset the proxy variable) to connect "
                         f"directly")
    pparts = urlsplit(proxy)
    phost = pparts.hostname or ""
    try:
        sock = _tcp(phost, pparts.port or default_port(pparts.scheme), wait_s)
    except (ConnectionRefusedError, socket.gaierror, UnicodeError, TimeoutError) as exc:
        why = "no connection within the time left" if isinstance(exc, TimeoutError) else exc
        raise ProxyError(f"the proxy {shown} from the environment cannot be reached ({why}); "
                         f"start it, fix HTTP_PROXY/HTTPS_PROXY, or set NO_PROXY={host}") \
            from exc
    try:
        if pparts.scheme == "https":
            sock = _tls(sock, phost, wait_s)
        if scheme != "https":
            return sock
        tunnel = host_port(host, port or None)
        lines = [f"CONNECT {tunnel} HTTP/1.1", f"Host: {tunnel}", f"User-Agent: {USER_AGENT}",
                 *_proxy_auth(proxy)]
        sock.settimeout(wait_s(time.perf_counter()))
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        status, _, _ = _read_head(sock, wait_s, tunnel=True)
        if not 200 <= status < 300:
            raise ProxyError(f"the proxy {shown} from the environment answered CONNECT "
                             f"{tunnel} with HTTP {status}"
                             + ("; give it credentials (http://user:password@proxy)"
                                if status == 407 else f"; set NO_PROXY={host} to connect "
                                f"directly"))
        return _tls(sock, host, wait_s)
    except BaseException:
        sock.close()
        raise


def _tcp(host: str, port: int, wait_s: WaitS) -> socket.socket:
    sock = socket.create_connection(
        (host, port), timeout=min(CONNECT_TIMEOUT_S, wait_s(time.perf_counter())))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _tls(sock: socket.socket, host: str, wait_s: WaitS) -> socket.socket:
    """``sock`` wrapped in TLS for ``host``, the handshake within ``wait_s``."""
    secure: ssl.SSLSocket | None = None
    try:
        secure = tls_context().wrap_socket(sock, server_hostname=host,
                                           do_handshake_on_connect=False)
        secure.settimeout(wait_s(time.perf_counter()))
        secure.do_handshake()
    except BaseException:
        (secure or sock).close()
        raise
    return secure


def _proxy_auth(proxy: str) -> list[str]:
    try:
        parts = urlsplit(proxy)
    except ValueError:  # _connect refuses it, in words
        return []
    if parts.username is None:
        return []
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return [f"Proxy-Authorization: Basic {base64.b64encode(pair).decode()}"]


def _read_head(sock: socket.socket, wait_s: WaitS,
               tunnel: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and any body bytes with them (1xx skipped)."""
    buf = b""
    while True:
        if buf[:1] in (b"\x15", b"\x16") and buf[1:2] == b"\x03":
            raise MalformedResponse("the answer is a TLS record: this port speaks https, so "
                                    "use https:// in the URL")
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            status, fields = _parse_head(buf[:end])
            buf = buf[end + 4:]
            if 100 <= status < 200:
                continue
            return status, fields, buf
        if len(buf) > MAX_HEAD_BYTES:
            raise MalformedResponse("a status line and headers longer than 64 KiB")
        sock.settimeout(wait_s(time.perf_counter()))
        more = sock.recv(READ_BYTES)
        if not more:
            if tunnel:
                raise ProxyError("the proxy closed the connection without answering CONNECT")
            raise ConnectionResetError("the server closed the connection without answering")
        buf += more


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise MalformedResponse(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise MalformedResponse(f"a header line without ':': {line[:80]!r}")
        key = name.strip().lower()
        fields[key] = f"{fields[key]}, {value.strip()}" if key in fields else value.strip()
    return int(code), fields
