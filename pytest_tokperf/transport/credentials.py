"""Secrets that reach an engine and never anything else: API keys (from an environment
variable only, sent as a Bearer header), URL credentials; and the one check that an engine
URL is one both clients can use."""

from __future__ import annotations

import base64
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from pytest_tokperf.errors import ConfigError

DEFAULT_API_KEY_ENV = "PYTEST_TOKPERF_API_KEY"
"""Where the API key is read from unless ``tokperf_api_key_env`` names another variable."""

MASK = "***"


class ApiKey:
    """A bearer token with a masked ``repr``; ``reveal()`` is for the request header only.
    Not a dataclass, so ``dataclasses.asdict`` cannot turn it back into a string."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str = "an API key") -> None:
        if not value or value != value.strip() or "\n" in value:
            raise ValueError(f"the API key from {source} is empty or has surrounding "
                             f"whitespace or a newline")
        odd = next((i for i, c in enumerate(value) if not "!" <= c <= "~"), None)
        if odd is not None:  # an HTTP header carries printable ASCII only
            raise ValueError(
                f"the API key from {source} has a character that is not printable ASCII "
                f"(character {odd + 1} of {len(value)}: a space, or a quote or dash a "
                f"document or chat turned typographic?); copy the key again from its source")
        self._value = value
        self.source = source
        """Where it came from, for messages (``$PYTEST_TOKPERF_API_KEY``)."""

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"ApiKey(from {self.source})"

    __str__ = __repr__

    def __copy__(self) -> ApiKey:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> ApiKey:
        return self

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("an ApiKey is not pickled: it would carry the key in clear")


def api_key_from_env(env: Mapping[str, str], name: str = DEFAULT_API_KEY_ENV) -> ApiKey | None:
    """The key in ``env[name]``, or None when the variable is unset or empty."""
    value = env.get(name, "").strip()
    return ApiKey(value, f"${name}") if value else None


def redact_url(url: str) -> str:
    """``url`` without userinfo and with every query value masked; safe to show or store,
    even when it does not parse as a URL."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        port = parts.port
    except ValueError:
        return _rough_redact(url)
    if not parts.scheme or hostname is None:
        return _rough_redact(url)
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{quote(k, safe='')}={MASK}" for k, _ in pairs) if pairs else MASK
    return urlunsplit((parts.scheme, host_port(hostname, port), parts.path, query, ""))


def host_port(host: str, port: int | None) -> str:
    """``host:port`` as a URL writes it: an IPv6 host in brackets, no port when None."""
    return (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")


_USERINFO = re.compile(r"//.*@", re.DOTALL)
"""Everything up to the last ``@``: a password may hold ``/``, ``?``, ``#`` or a tab."""
_QUERY_VALUE = re.compile(r"([?&][^=&#\s]*)=[^&#\s]*")


def _rough_redact(url: str) -> str:
    """``redact_url`` for text that does not parse as a URL: no userinfo, no query value."""
    bare = _USERINFO.sub("//", url) if "//" in url else re.sub(r"^.*@", "", url, flags=re.DOTALL)
    return _QUERY_VALUE.sub(rf"\1={MASK}", bare)


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot name an http(s) server, in words that follow the URL in a message
    (``'http://h:99999' is not a valid URL (...)``), never quoting its credentials; None
    when the stdlib reader and httpx can both use it."""
    bad = "".join(sorted({c for c in url if ord(c) < 33 or ord(c) == 127}))
    if bad:
        return f"contains {bad!r} (whitespace or a control character: a pasted line break?)"
    shown = redact_url(url)
    odd = "".join(dict.fromkeys(c for c in shown if not c.isascii()))
    if odd:
        return f"contains non-ASCII {odd[:8]!r} ({_in_ascii(url)})"
    try:
        parts = urlsplit(url)
        hostname, port = parts.hostname, parts.port
    except ValueError as exc:
        return f"is not a valid URL ({_reason(url, exc)})"
    if parts.scheme not in ("http", "https") or not hostname:
        return "is not an http(s) URL"
    if port == 0:
        return "has port 0, which no server listens on"
    import httpx  # late: the option check runs at pytest's start-up, which stays light

    bare = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    try:  # both readers, on the URL without its credentials ('http://[::1]@]' leaves ']')
        urlsplit(bare).port
        httpx.URL(bare)
    except (ValueError, httpx.InvalidURL) as exc:
        return f"is not a valid URL ({exc})"
    return None


def _in_ascii(url: str) -> str:
    """How to write ``url`` in ASCII: its compatibility form (full-width digits and
    look-alikes made plain), the host in IDNA, or percent-encoding."""
    plain = unicodedata.normalize("NFKC", url)
    if plain.isascii() and url_problem(plain) is None:
        return f"full-width digits or a look-alike letter? write {redact_url(plain)!r}"
    try:
        host = urlsplit(url).hostname or ""
        if not host.isascii():
            return f"write the host in ASCII, as IDNA: {host.encode('idna').decode('ascii')!r}"
    except (ValueError, UnicodeError):
        return "retype the host and port in ASCII"
    return "percent-encode it, or retype it in ASCII"


def _reason(url: str, exc: ValueError) -> str:
    """``urlsplit``'s complaint, unless it quotes a piece of the userinfo."""
    found = re.match(r"^[^:/?#]*://(\S*)@", url)
    quoted = re.findall(r"'([^']*)'", str(exc))
    forms = (found.group(1), repr(found.group(1))[1:-1]) if found else ()  # as quoted: escaped
    if any(text and text in form for text in quoted for form in forms):
        return ("its user name or password holds a '/', '?', '#' or '@' that ends the host "
                "part early: percent-encode those (%2F, %3F, %23, %40)")
    return str(exc)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A base URL split into what is shown (``base_url``) and what is only sent
    (``headers``, ``params``); ``secrets`` must never be repeated."""

    base_url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    params: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, url: str, api_key: ApiKey | None = None) -> Endpoint:
        """Split ``url``; an API key is the ``Authorization``, else userinfo is Basic
        auth. ``ConfigError`` for a URL neither client could use."""
        problem = url_problem(url.strip())
        if problem is not None:
            raise ConfigError(f"engine URL {redact_url(url.strip())!r} {problem}; use e.g. "
                              f"http://127.0.0.1:8080")
        parts = urlsplit(url.strip())
        secrets: list[str] = []
        headers: list[tuple[str, str]] = []
        if parts.username is not None or parts.password is not None:
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            secrets += [s for s in (password, user) if len(s) >= 3]
            if api_key is None:
                token = base64.b64encode(f"{user}:{password}".encode()).decode()
                headers.append(("Authorization", f"Basic {token}"))
                secrets.append(token)
        if api_key is not None:
            headers.append(("Authorization", f"Bearer {api_key.reveal()}"))
            secrets.append(api_key.reveal())
        params = tuple(parse_qsl(parts.query, keep_blank_values=True))
        secrets += [v for _, v in params if len(v) >= 3]
        netloc = host_port(parts.hostname or "", parts.port)
        base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        return cls(base, tuple(headers), params, tuple(sorted(set(secrets), key=len, reverse=True)))

    def query(self) -> str:
        """The query string to append to a request path ('' when there is none)."""
        return urlencode(self.params) if self.params else ""

    def scrub(self, text: str) -> str:
        """``text`` with every secret of this endpoint masked (an engine may echo one)."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text
