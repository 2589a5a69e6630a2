"""What an engine said, in words: error bodies in every shape, JSON or a clear refusal."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest_tokperf.jsontext as jsontext
from pytest_tokperf.errors import EngineProtocolError
from pytest_tokperf.transport.credentials import redact_url


class AnswerRefused(EngineProtocolError):
    """An answer tokperf does not read at all: a redirect, a compressed body, a malformed
    head. Raised by the transport itself, so no caller mistakes it for "not ready yet"."""


def looks_like_html(text: str) -> bool:
    head = text.lstrip()[:200].lower()
    return head.startswith("<!doctype html") or head.startswith("<html") or "<head" in head


def html_title(text: str) -> str | None:
    match = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    return match.group(1).strip()[:80] if match else None


def error_text(body: str) -> str:
    """The engine's own words from an error body, in any of the usual shapes."""
    if looks_like_html(body):
        title = html_title(body)
        return f"an HTML page{f' titled {title!r}' if title else ''}, not the engine's JSON"
    try:
        data = jsontext.loads(body)
    except ValueError:
        return repr(body[:200])
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return _line(str(error["message"]))
        if isinstance(error, str):
            return _line(error)
        for key in ("message", "detail"):
            if data.get(key):
                return _line(str(data[key]))
    return repr(body[:200])


def _line(text: str) -> str:
    """An engine's words on one line, at most 500 characters."""
    return text if len(text) <= 500 and text.isprintable() else repr(text[:500])[1:-1]


def decode_json(payload: str | bytes, what: str, url: str) -> Any:
    """Parse one JSON payload or say plainly which engine sent what."""
    try:
        return jsontext.loads(payload)
    except jsontext.JSONTooDeep as exc:
        raise EngineProtocolError(
            f"{url} sent {what} nested more than {jsontext.MAX_DEPTH} levels deep: refused "
            f"(no engine nests its answers so deep). Is this URL really the engine you "
            f"named? Check --tokperf-url and --tokperf-engine.") from exc
    except ValueError as exc:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        raise EngineProtocolError(
            f"{url} sent {what} that is not JSON: {text[:200]!r}. Is this URL really the "
            f"engine you named? Check --tokperf-url and --tokperf-engine."
        ) from exc


def check_head(url: str, status: int, headers: Mapping[str, str]) -> None:
    """Refuse, unread, a redirect (tokperf follows none) or a body in a content encoding
    (tokperf asks for ``identity``; a compressed body can expand past every byte cap)."""
    if 300 <= status < 400:
        location = (headers.get("location") or "").strip()
        to = f", a redirect to {redact_url(location)[:200]!r}" if location else \
            " (a redirect without a Location)"
        raise AnswerRefused(
            f"{url} answered HTTP {status}{to}; tokperf follows no redirects: give the URL "
            f"the engine itself answers on (--tokperf-url)")
    encoding = (headers.get("content-encoding") or "").strip().lower()
    if encoding not in ("", "identity"):
        raise AnswerRefused(
            f"{url} sent a body in content encoding {encoding[:40]!r} (HTTP {status}) though "
            f"tokperf asked for none (Accept-Encoding: identity): refused unread, as a "
            f"compressed body can expand far past every size cap; turn compression off for "
            f"this path on the engine or on the proxy in front of it")


def auth_hint(status: int) -> str:
    if status in (401, 403):
        return ("; the server wants an API key: put it in $PYTEST_TOKPERF_API_KEY (or name "
                "the variable that holds it with ini tokperf_api_key_env or PYTEST_TOKPERF_API_KEY_ENV)")
    return ""
