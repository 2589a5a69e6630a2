"""One build at a time per build folder: a lock file that says whose build holds it.

The owner (pid, release, start, host) is written into the lock, so a second build of the
same release says what it waits for; builds of other releases have locks of their own.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from pytest_tokperf.builds.progress import Meter, duration
from pytest_tokperf.results import Progress


@dataclass(frozen=True, slots=True)
class LockOwner:
    """Who holds a build's lock: written into the lock file, read by whoever waits."""

    pid: int
    release: str
    started: float
    """Wall-clock time (``time.time()``): the waiter may be another process."""
    host: str = ""

    def describe(self, now: float | None = None) -> str:
        """``build of b11434 by pid 1234, started 3 min ago``."""
        ago = max((time.time() if now is None else now) - self.started, 0.0)
        host = f" on {self.host}" if self.host and self.host != socket.gethostname() else ""
        return f"build of {self.release} by pid {self.pid}{host}, started {duration(ago)} ago"


def lock_owner(path: Path) -> LockOwner | None:
    """The owner written into a build lock, or None (free, or written by an older tokperf)."""
    try:
        return LockOwner(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def build_lock(path: Path, release: str, progress: Progress, poll_s: float = 1.0) -> Iterator[None]:
    """Hold ``path`` for one build, owner written in it; a second build of the same folder
    waits, saying whose build it waits for (again whenever that changes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as lock:  # "w" would wipe the owner's line
        if not _try_lock(lock):
            said: object = ()
            with Meter(progress, f"waiting for the other {release} build") as meter:
                while not _try_lock(lock):
                    owner = lock_owner(path)
                    if owner != said:
                        said = owner
                        progress(f"waiting for {owner.describe()} ({path})" if owner else
                                 f"waiting for {path} (another build is running)")
                    meter.update(0)
                    time.sleep(poll_s)
        owner = LockOwner(os.getpid(), release, time.time(), socket.gethostname())
        lock.seek(0)
        lock.truncate()
        lock.write(json.dumps(asdict(owner)))
        lock.flush()
        try:
            yield
        finally:
            lock.seek(0)
            lock.truncate()


def lock_for(target: Path) -> Path:
    """The lock of the build that makes ``target``: ``.<name>.lock`` beside it."""
    return target.with_name(f".{target.name}.lock")


def work_for(target: Path) -> Path:
    """The build's own work folder, ``.<name>.work``: one per release and flags."""
    return target.with_name(f".{target.name}.work")


def sweep_stale_work(root: Path, keep: Path) -> None:
    """Remove the work folders of builds that were killed (their lock is free), the
    shared ``.work`` of older versions included; a folder whose build still runs stays."""
    for work in [*root.glob(".*.work"), root / ".work"]:
        if work == keep or not work.is_dir():
            continue
        with open(work.with_suffix(".lock"), "a+", encoding="utf-8") as lock:
            if _try_lock(lock):
                shutil.rmtree(work, ignore_errors=True)
                lock.truncate(0)  # its owner is gone
