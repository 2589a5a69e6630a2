"""The machine window's level on this host, learned from the pairs the watch measured twice.

A flag is confirmed in another window (after other work or a gap), and the two windows'
estimates of the same pair differ by their errors and by the level a window carries, W:
``(d1 - d2)^2 - se1^2 - se2^2`` has mean ``2 W^2``. From ``MIN_RECORDS`` such pairs on,
this host's own W (at least ``FLOOR``) replaces the default (``stats.metric.WINDOW_SD``)
in every later verdict that pools windows. The pairs are lines of a JSONL file beside the
watch's DB (``<db>.windows.jsonl``), each with its host.
"""

from __future__ import annotations

import json
import math
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from pytest_tokperf.jsontext import jsonl_objects
from pytest_tokperf.stats.metric import WINDOW_SD
from pytest_tokperf.stats.shifts import Shift

MIN_RECORDS = 5
"""Pairs measured in two windows before the host's own level is used."""
FLOOR = 0.005
"""The least window level a host is allowed, however well its windows agreed."""


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


@dataclass(slots=True)
class HostWindows:
    """This host's pairs measured in two windows, and the window level they give."""

    path: Path
    host: str = field(default_factory=socket.gethostname)

    def records(self) -> list[dict[str, float]]:
        """This host's pairs: ``first``/``second`` log shifts and their SEs."""
        try:
            rows = jsonl_objects(self.path) if self.path.is_file() else []
        except (OSError, ValueError):
            return []
        keys = ("first", "first_se", "second", "second_se")
        return [{k: float(r[k]) for k in keys} for r in rows
                if r.get("host") == self.host and all(isinstance(r.get(k), (int, float))
                                                      for k in keys)]

    def add(self, pair: str, first: Shift, second: Shift) -> None:
        """Keep one pair measured in two windows (skipped where an estimate is unknown)."""
        if not _finite(first.log_shift, first.std_error, second.log_shift, second.std_error):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = {"host": self.host, "pair": pair, "at": round(time.time()),
                "first": first.log_shift, "first_se": first.std_error,
                "second": second.log_shift, "second_se": second.std_error}
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    def level(self) -> tuple[float, str]:
        """The window level to allow (log SD) and how it was found, in words."""
        rows = self.records()
        if len(rows) < MIN_RECORDS:
            return WINDOW_SD, (f"the default {WINDOW_SD:.1%} ({len(rows)} of {MIN_RECORDS} "
                               f"pairs measured in two windows on this host so far)")
        excess = [(r["first"] - r["second"]) ** 2 - r["first_se"] ** 2 - r["second_se"] ** 2
                  for r in rows]
        own = math.sqrt(max(0.0, sum(excess) / len(excess) / 2))
        return max(FLOOR, own), (f"this host's {max(FLOOR, own):.1%}, from {len(rows)} pairs "
                                 f"measured in two windows")
