"""Short helper runs of an engine binary (``--help``, ``--version``, ``--list-devices``).

Bounded in time, output and processes; a binary that times out is not asked again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

MAX_OUTPUT_BYTES = 1 << 20
"""The most a helper's output is kept (a help text is tens of KiB)."""

SILENT_AFTER_S = 5.0
"""A binary silent for this long is not asked again (shorter timeouts prove nothing)."""

_silent: set[str] = set()
"""Binaries that did not answer a helper run of ``SILENT_AFTER_S`` or more (this process)."""


@dataclass(frozen=True, slots=True)
class HelperOutput:
    returncode: int
    text: str
    """stdout (and stderr, unless dropped), decoded (invalid UTF-8 replaced)."""


def kill_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Signal every process of group ``pgid``; a group already gone is not an error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_helper(argv: Sequence[str], timeout_s: float, *,
               stderr: bool = True) -> HelperOutput | None:
    """Run ``argv`` for at most ``timeout_s``; None when it failed to start or finish."""
    binary = str(argv[0])
    if timeout_s <= 0 or binary in _silent:
        return None
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    chunks: list[bytes] = []
    assert proc.stdout is not None
    stdout = proc.stdout
    fd = stdout.fileno()

    def drain() -> None:
        size = 0
        for block in iter(lambda: os.read(fd, 1 << 16), b""):
            if size < MAX_OUTPUT_BYTES:
                chunks.append(block[:MAX_OUTPUT_BYTES - size])
            size += len(block)

    reader = threading.Thread(target=drain, daemon=True, name="tokperf-helper-output")
    reader.start()
    end = time.monotonic() + timeout_s
    try:
        code: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        code = None
        if timeout_s >= SILENT_AFTER_S:
            _silent.add(binary)
    kill_group(proc.pid)  # stragglers: a wrapper's children, or the whole group at timeout
    if code is None:
        proc.wait()
    reader.join(max(end - time.monotonic(), 0.0) + 1.0)
    if not reader.is_alive():  # else a process outside the group holds the pipe: leave it
        stdout.close()
    if code is None:
        return None
    return HelperOutput(code, b"".join(chunks).decode("utf-8", errors="replace"))
