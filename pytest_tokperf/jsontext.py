"""Strict JSON for everything a user parses: non-finite floats become null.

``json.dumps`` writes ``NaN`` and ``Infinity``, which strict parsers (browsers, jq, Go,
Rust) refuse; every ``--json`` output, report and export goes through ``dumps``.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float, however deep, replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """Strict JSON text of ``value``; objects JSON has no type for are written as text."""
    return json.dumps(finite(value), indent=indent, sort_keys=sort_keys, allow_nan=False,
                      ensure_ascii=False, default=lambda o: finite(_plain(o)))


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return str(value)
