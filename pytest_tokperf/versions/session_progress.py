"""How far a child pytest session of compare-builds, bisect or watch is, read from its log.

pytest writes ``collected N items`` and then a letter per test as each ends (``.``, ``s``,
``F``; ``PASSED`` with ``-v``), flushed as it goes. Between them a test is taken to last
its A/B budget (a known length: ``--tokperf-ab-budget``) or the session's last time per
test, and, once tests have ended, their mean with that: the time left is the tests to go
times it, so it does not swing with one slow test.
"""

from __future__ import annotations

import math
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.results import Progress

_COLLECTED = re.compile(r"collected (\d+) items?")
_SELECTED = re.compile(r"/ (\d+) selected")
_LETTERS = re.compile(r"(?:\S+\.py )?([.sFExX]+)(?:\s+\[\s*\d+%\])?\s*")
_VERBOSE = re.compile(r"\S+::\S.* (?:PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")


def ab_budget_of(pytest_args: Sequence[str], env: Mapping[str, str]) -> float | None:
    """A test's A/B budget as its session reads it: ``--tokperf-ab-budget`` among the
    arguments, else PYTEST_TOKPERF_AB_BUDGET, else the default; None: no budget (an ini
    value is not read here: the pace of the tests that ended takes over)."""
    from pytest_tokperf.settings import AB_BUDGET_S

    value = env.get("PYTEST_TOKPERF_AB_BUDGET", str(AB_BUDGET_S))
    for i, arg in enumerate(pytest_args):
        if arg == "--tokperf-ab-budget" and i + 1 < len(pytest_args):
            value = pytest_args[i + 1]
        elif arg.startswith("--tokperf-ab-budget="):
            value = arg.split("=", 1)[1]
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _ended(line: str) -> int:
    """Tests a line of pytest's output says ended."""
    letters = _LETTERS.fullmatch(line)
    if letters:
        return len(letters.group(1))
    return 1 if _VERBOSE.match(line) else 0


@dataclass(slots=True, eq=False)
class SessionMeter:
    """A meter of one child session's tests, moved by ``poll`` from its ``log``."""

    progress: Progress
    label: str
    log: Path
    budget_s: float | None = None
    """A test's A/B budget (its known length)."""
    expected_s: float | None = None
    """The whole session, as the build's last one took."""
    clock: Callable[[], float] = time.monotonic
    tests: int | None = field(init=False, default=None)
    ends: list[float] = field(init=False, default_factory=list)
    started: float = field(init=False)
    meter: Meter = field(init=False)
    _read: int = field(init=False, default=0)
    _ended_lines: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.started = self.clock()
        self.meter = Meter(self.progress, self.label, unit="tests", line_every=1.0,
                           quiet_s=300.0, expected_s=self.expected_s, estimate=self.left_s,
                           clock=self.clock)

    def __enter__(self) -> SessionMeter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.meter.close()

    def per_test_s(self) -> float | None:
        """A test's expected seconds: the prior (budget, or the last session's share)
        pooled with the tests that ended, the prior counted as one of them."""
        spans = [b - a for a, b in zip([self.started, *self.ends], self.ends, strict=False)]
        prior = self.budget_s or (self.expected_s / self.tests
                                  if self.expected_s and self.tests else None)
        if prior is None:
            return sum(spans) / len(spans) if spans else None
        return (prior + sum(spans)) / (1 + len(spans))

    def left_s(self) -> float | None:
        """The tests to go times a test's seconds, the one running counted as done at most."""
        per = self.per_test_s()
        if self.tests is None or per is None:
            return None
        done = min(len(self.ends), self.tests)
        running = self.clock() - (self.ends[-1] if self.ends else self.started)
        return max(per * (self.tests - done) - min(running, per), 0.0)

    def poll(self) -> None:
        """Read what the log gained and move the meter (a test partly run counts its share)."""
        try:
            with open(self.log, "rb") as log:
                log.seek(self._read)
                data = log.read()
        except OSError:
            return
        done, cut = data.rsplit(b"\n", 1) if b"\n" in data else (b"", data)
        self._read += len(data) - len(cut)
        now = self.clock()
        for line in done.decode("utf-8", "replace").splitlines() if done else ():
            found = _COLLECTED.match(line)
            if found:
                chosen = _SELECTED.search(line)
                self.tests = int(chosen.group(1) if chosen else found.group(1))
            self._ended_lines += _ended(line)
        ended = self._ended_lines + _ended(cut.decode("utf-8", "replace"))
        self.ends += [now] * max(ended - len(self.ends), 0)
        per = self.per_test_s()
        running = now - (self.ends[-1] if self.ends else self.started)
        share = min(running / per, 0.99) if per and self.tests and ended < self.tests else 0.0
        self.meter.update(ended + share, total=None if self.tests is None else float(self.tests))


POLL_S = 1.0
"""How often a running session's log is read."""


def run_watched(command: Sequence[str], log: Path, env: Mapping[str, str],
                meter: SessionMeter) -> int:
    """Run a child session into ``log``, moving ``meter`` every ``POLL_S``; its exit code.
    Interrupted: the child (Ctrl-C reached it too) gets a moment to stop, then is killed,
    as ``subprocess.run`` does."""
    with open(log, "w", encoding="utf-8") as out, meter:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, env=dict(env))
        try:
            while True:
                try:
                    return proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    meter.poll()
        except BaseException:
            try:
                proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                pass
            proc.kill()
            proc.wait()
            raise
