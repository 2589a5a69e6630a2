"""Strict JSON for everything a user parses: non-finite floats become null.

``json.dumps`` writes ``NaN`` and ``Infinity``, which strict parsers (browsers, jq, Go,
Rust) refuse; every ``--json`` output, report and export goes through ``dumps``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
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


MAX_DEPTH = 64
"""The deepest nesting any JSON the tool reads may have: engines, model folders and import
files nest a handful of levels; 64 leaves room and keeps every walk far from the stack."""


class JSONTooDeep(ValueError):
    """JSON nested deeper than ``MAX_DEPTH``: refused before anything walks it."""


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` with a depth limit: a ``ValueError`` (``JSONTooDeep``), never a
    ``RecursionError``, for text nested deeper than ``max_depth``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONTooDeep(f"JSON nested more than {max_depth} levels deep") from None
    if depth(value, limit=max_depth) > max_depth:
        raise JSONTooDeep(f"JSON nested more than {max_depth} levels deep")
    return value


def depth(value: Any, *, limit: int = MAX_DEPTH) -> int:
    """How deep ``value`` nests (a scalar is 0), walked without recursion with one iterator
    per open level (memory grows with the depth, not the item count); stops counting once
    past ``limit``."""
    deepest = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        item = next(stack[-1], _DONE)
        if item is _DONE:
            stack.pop()
            continue
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        stack.append(iter(children))
        deepest = max(deepest, len(stack) - 1)
        if deepest > limit:
            return deepest
    return deepest


_DONE = object()


def jsonl_objects(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines journal, oldest first: nothing for a missing file,
    and a line cut short by a kill (or not an object) is passed over."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        try:
            value = loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found
