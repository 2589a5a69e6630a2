"""Kill a started server's process group when the process that started it dies, even by
SIGKILL (the parent-death signal reaches only the direct child, not a wrapper's children).

Run by ``launch.process`` as ``python -I -S watchdog.py PARENT_PID PGID``; standard library
only. It exits by itself once the group is gone.
"""

from __future__ import annotations

import os
import select
import signal
import sys

POLL_S = 1.0
"""How often it checks that the group still exists (and, without a pidfd, the parent)."""


def group_alive(pgid: int) -> bool:
    """Whether group ``pgid`` still has a process this user may signal."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def parent_died(parent: int, pidfd: int | None) -> bool:
    """Wait up to ``POLL_S``; whether ``parent`` has died (this process was reparented)."""
    if pidfd is not None:
        readable, _, _ = select.select([pidfd], [], [], POLL_S)
        return bool(readable) or os.getppid() != parent
    select.select([], [], [], POLL_S)
    return os.getppid() != parent


def watch(parent: int, pgid: int) -> None:
    try:
        pidfd: int | None = os.pidfd_open(parent)  # Linux 5.3+: woken the moment it exits
    except (AttributeError, OSError):
        pidfd = None
    while group_alive(pgid):
        if os.getppid() != parent or parent_died(parent, pidfd):
            # SIGKILL, as the parent-death signal: a server whose client vanished
            # mid-request can hang in its SIGTERM handler
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]))
