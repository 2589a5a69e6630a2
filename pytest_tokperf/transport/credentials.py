"""Secrets that reach an engine and never anything else: API keys, URL credentials.

Keys come from an environment variable only and are sent as a Bearer header.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

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
        return _USERINFO.sub(r"\1", url)
    if not parts.scheme or hostname is None:
        return _USERINFO.sub(r"\1", url)
    netloc = f"[{hostname}]" if ":" in hostname else hostname
    if port is not None:
        netloc += f":{port}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(f"{quote(k, safe='')}={MASK}" for k, _ in pairs) if pairs else MASK
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


_USERINFO = re.compile(r"(^|//)[^/@\s]*@")


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
        auth."""
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
        hostname = parts.hostname or ""
        netloc = f"[{hostname}]" if ":" in hostname else hostname
        if parts.port is not None:
            netloc += f":{parts.port}"
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
