"""Secrets that reach an engine and never anything else: API keys, URL credentials.

``redact_url`` is what every place that shows or stores a URL calls: userinfo
(``user:password@``) is dropped and every query value is replaced by ``***``, so
``http://me:pw@host:8080/v1?key=abc`` reads ``http://host:8080/v1?key=***``.

An API key is read from an environment variable (``PYTEST_TOKPERF_API_KEY`` unless
``--tokperf-api-key-env`` names another one), never from the command line or an ini
file, where shell history, ``ps`` and committed config would keep it. It is held in an
``ApiKey`` whose ``repr`` and ``str`` are masked, so a dataclass, a traceback with
locals or a log line shows ``ApiKey(from $NAME)`` and not the key. It is sent as
``Authorization: Bearer KEY``, which llama-server (``--api-key``), vLLM, LM Studio,
SGLang and OpenAI-compatible proxies all check.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

DEFAULT_API_KEY_ENV = "PYTEST_TOKPERF_API_KEY"
"""Where the API key is read from unless ``--tokperf-api-key-env`` names another variable."""

MASK = "***"


class ApiKey:
    """A bearer token with a masked ``repr``; ``reveal()`` is for the request header only.

    Deliberately not a dataclass: ``dataclasses.asdict`` of a settings object holding
    one must not turn it back into a plain string.
    """

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
    """``url`` without userinfo and with every query value masked; safe to show or store.

    Anything that does not parse as a URL is returned with a ``user:password@`` part
    removed all the same, so a malformed value cannot carry a secret through.
    """
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
    """A base URL split into what is shown and what is only sent.

    ``base_url`` has no userinfo, no query and no trailing slash: it is what adapters
    join paths to and what messages and ``EngineInfo`` carry. ``headers`` (an
    ``Authorization``) and ``params`` (the query, added to every request) are sent and
    never shown; ``secrets`` lists every value an error message must not repeat.
    """

    base_url: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    params: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, url: str, api_key: ApiKey | None = None) -> Endpoint:
        """Split ``url``; the API key, when given, is the ``Authorization`` that is sent
        (URL userinfo then only counts as a secret), else userinfo becomes Basic auth."""
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
