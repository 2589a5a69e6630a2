"""An environment's identity: the canonical JSON and hash that deduplicate
``environments`` rows, below both ``rows`` and the migrations (``schema``)."""

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
"""Columns ``environment_row`` fills that belong to one result (the moment's bandwidth
probe, the engine's port): stored on the ``results`` row and left out of ``env_hash``."""


def environment_hash(row: Row) -> str:
    """sha256 of every column of an environment's row but ``id``, ``env_hash`` and
    ``PER_RESULT_COLUMNS``: the same for a row built and the row read back."""
    skip = ("id", "env_hash", *PER_RESULT_COLUMNS)
    content = {k: canonical(v) for k, v in row.items() if k not in skip}
    return hashlib.sha256(dumps(content).encode()).hexdigest()
