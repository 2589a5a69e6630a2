"""Reading files a stranger supplies, and naming files after identifiers a stranger chose.

Every file the tool reads on a user's or an engine's word (model folders, import files,
server logs) goes through ``read_regular`` or ``tail_text``: a FIFO, a device or a socket
is refused without blocking, and a file larger than the cap is refused by its size before a
byte is read (a sparse giant costs nothing). Every identifier that becomes part of a path
(run ids, series, database names, test ids) goes through ``safe_name``, and a path built
from one is checked with ``inside``. Imports nothing of ours; callers wrap ``FileRefused``
in their own error with the fix.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

MAX_TEXT_BYTES = 64 << 20
"""The default cap of a text file read whole (a config, an import file): 64 MiB."""

TAIL_BYTES = 64 << 10
"""How much of a log's end ``tail_text`` reads: enough for its last lines, never the log."""


class FileRefused(ValueError):
    """A path that is not a regular file, or one larger than the cap; the message says which."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _open_regular(path: Path) -> tuple[int, int]:
    """An open descriptor of ``path`` and its size; refuses anything but a regular file
    without blocking (O_NONBLOCK: opening a FIFO with no writer would wait forever)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(f"{str(path)!r} is {_kind(info.st_mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return fd, info.st_size
    except BaseException:
        os.close(fd)
        raise


def regular_size(path: Path | str) -> int:
    """The size of ``path`` if it is a regular file; ``FileRefused`` otherwise (``OSError``
    for a missing or unreadable one, as ``open`` gives)."""
    fd, size = _open_regular(Path(path))
    os.close(fd)
    return size


def read_regular(path: Path | str, *, cap: int = MAX_TEXT_BYTES) -> bytes:
    """The whole of a regular file no larger than ``cap`` bytes."""
    path = Path(path)
    fd, size = _open_regular(path)
    with os.fdopen(fd, "rb") as handle:
        if size > cap:
            raise FileRefused(f"{str(path)!r} holds {size} bytes, more than the "
                              f"{cap} ({cap / (1 << 20):g} MiB) this file may have")
        data = handle.read(min(size, cap) + 1)
    if len(data) > cap:  # grew while read
        raise FileRefused(f"{str(path)!r} holds more than {cap} bytes")
    return data


def tail_text(path: Path | str, lines: int = 20, *, max_bytes: int = TAIL_BYTES) -> str:
    """The last ``lines`` lines of a log, read from its end: at most ``max_bytes`` bytes
    whatever the log's size. Empty when the file is missing or not a regular file."""
    try:
        fd, size = _open_regular(Path(path))
    except (OSError, FileRefused):
        return ""
    with os.fdopen(fd, "rb") as handle:
        start = max(0, size - max_bytes)
        handle.seek(start)
        data = handle.read(max_bytes)
    text = data.decode("utf-8", "replace")
    if start > 0:  # the first line is cut: drop it
        text = text.split("\n", 1)[1] if "\n" in text else text
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 80


def safe_name(identifier: str, *, fallback: str = "unnamed") -> str:
    """A file-name component for ``identifier``: only letters, digits, ``.``, ``_`` and
    ``-``; never empty, never ``.``/``..`` or hidden, never longer than ``MAX_NAME``. A name
    that had to change carries a short hash of the original, so two identifiers that differ
    only in what was replaced do not share a file."""
    text = str(identifier)
    cleaned = _UNSAFE.sub("_", text).strip("._") or fallback
    if cleaned == text and len(cleaned) <= MAX_NAME:
        return cleaned
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{cleaned[:MAX_NAME - 11]}-{digest}"


def inside(folder: Path | str, path: Path | str) -> bool:
    """Whether ``path``, resolved (links followed), lies in ``folder``."""
    root = Path(folder).resolve()
    target = Path(path).resolve()
    return target == root or root in target.parents
