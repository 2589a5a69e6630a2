"""How every ``tokperf`` verb prints: plain text lines, or JSON with ``--json``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pytest_tokperf.jsontext import dumps


def emit(args: argparse.Namespace, data: Any, text: str | Sequence[str]) -> None:
    """Print ``data`` as strict, indented JSON when ``--json`` was given, else the text lines."""
    if getattr(args, "json", False):
        print(dumps(data))
    else:
        print(text if isinstance(text, str) else "\n".join(text))


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns with a dashed rule under the header."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    return [fmt.format(*header).rstrip(), fmt.format(*("-" * w for w in widths)),
            *(fmt.format(*r).rstrip() for r in rows)]
