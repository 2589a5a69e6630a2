"""An environment's identity: the canonical JSON and hash that deduplicate
``environments`` rows, below both the row builders (``rows``) and the migrations
(``schema``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

Row = dict[str, Any]


def dumps(value: object) -> str:
    """Canonical JSON: sorted keys, no spaces (hashes and JSON columns)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def canonical(value: object) -> object:
    """The same number hashes the same whether it is fresh (``True``, ``1e12``) or read back."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


PER_RESULT_COLUMNS = ("engine_base_url", "measured_bandwidth_bytes_per_s",
                      "measured_bandwidth_source", "measured_bandwidth_detail")
"""Columns ``environment_row`` fills that belong to one result, not to the environment:
the moment's bandwidth probe and the engine's (often random) port. They are stored on the
``results`` row (schema v7) and left out of ``env_hash``, so one environment is one row."""


def environment_hash(row: Row) -> str:
    """sha256 of an environment's identity: every column of its row but ``id``,
    ``env_hash`` and the per-result ones (``PER_RESULT_COLUMNS``).

    Equal for a row built from value types and the same row read back from SQLite.
    """
    skip = ("id", "env_hash", *PER_RESULT_COLUMNS)
    content = {k: canonical(v) for k, v in row.items() if k not in skip}
    return hashlib.sha256(dumps(content).encode()).hexdigest()
