"""What an engine said, in words: error bodies in every shape, JSON or a clear refusal."""

from __future__ import annotations

import json
import re
from typing import Any

from pytest_tokperf.errors import EngineProtocolError


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
        data = json.loads(body)
    except ValueError:
        return repr(body[:200])
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            if data.get(key):
                return str(data[key])
    return repr(body[:200])


def decode_json(payload: str | bytes, what: str, url: str) -> Any:
    """Parse one JSON payload or say plainly which engine sent what."""
    try:
        return json.loads(payload)
    except ValueError as exc:
        text = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload
        raise EngineProtocolError(
            f"{url} sent {what} that is not JSON: {text[:200]!r}. Is this URL really the "
            f"engine you named? Check --tokperf-url and --tokperf-engine."
        ) from exc


def auth_hint(status: int) -> str:
    if status in (401, 403):
        return ("; the server wants an API key: put it in $PYTEST_TOKPERF_API_KEY (or name "
                "the variable that holds it with ini tokperf_api_key_env or PYTEST_TOKPERF_API_KEY_ENV)")
    return ""
