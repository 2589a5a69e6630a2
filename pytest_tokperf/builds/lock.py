"""One build at a time per build folder: a lock file that says whose build holds it.

The owner (pid, release, start, host) is written into the lock, so a second build of the
same release says what it waits for; builds of other releases have locks of their own,
and compile one at a time through one fixed path (``building_at``) that ccache's objects
are shared under. Locks and links live in the cache: a lock is never opened through a
link, a link is replaced and never deleted through.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from pytest_tokperf.builds.progress import Meter, duration
from pytest_tokperf.errors import InstallError
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


def _open_lock(path: Path) -> IO[str]:
    """``path`` for reading and writing, made if absent; a link or anything but a plain
    file of one name is refused: the owner's line would be written into its target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if path.is_symlink():
            raise InstallError(f"the build lock {str(path)!r} is a link (to "
                               f"{os.readlink(path)!r}); a lock is never opened through one: "
                               f"remove the link and run again") from exc
        raise InstallError(f"cannot open the build lock {str(path)!r}: {exc.strerror}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise InstallError(f"the build lock {str(path)!r} is not a plain file of its own "
                           f"(a hard link or a special file): remove it and run again")
    return os.fdopen(fd, "r+", encoding="utf-8")  # "w" would wipe the owner's line


@contextmanager
def build_lock(path: Path, release: str, progress: Progress, poll_s: float = 1.0,
               why: str = "") -> Iterator[None]:
    """Hold ``path`` for one build, owner written in it; another build waits, saying whose
    build it waits for (again whenever that changes) and ``why``."""
    with _open_lock(path) as lock:
        if not _try_lock(lock):
            said: object = ()
            with Meter(progress, f"{release}: waiting for another build") as meter:
                while not _try_lock(lock):
                    owner = lock_owner(path)
                    if owner != said:
                        said = owner
                        progress(f"waiting for {owner.describe()} ({path}{why})" if owner
                                 else f"waiting for {path} (another build is running{why})")
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
        with _open_lock(work.with_suffix(".lock")) as lock:
            if _try_lock(lock):
                clean(work)
                lock.truncate(0)  # its owner is gone


def clean(path: Path) -> None:
    """Remove ``path``: a link itself (never what it points to), else the folder or file."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def building_at(here: Path, work: Path, owner: str, progress: Progress) -> Iterator[None]:
    """Link the fixed path ``here`` to ``work`` for one build, under the lock
    ``.building.lock`` beside it: builds through ``here`` compile one at a time at the
    same absolute paths, so ccache (based at ``here``) serves each the others' objects."""
    with build_lock(here.with_name(".building.lock"), owner, progress,
                    why=f"; builds take turns at {here} so that ccache's objects serve all"):
        relink(here, work)
        yield


def relink(link: Path, target: Path) -> None:
    """Point ``link`` at the folder ``target``, replacing what was there."""
    clean(link)
    link.symlink_to(target.absolute(), target_is_directory=True)
