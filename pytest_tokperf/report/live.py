"""Where the build verbs' progress goes: live lines on a terminal, plain lines elsewhere.

On a terminal every running ``Meter`` (``builds.progress``) is a line with a bar, its
elapsed time and the time left, redrawn every second, messages printed above; ``rich``
draws them where it is installed (loaded only then), else a few ANSI codes. Anywhere else
(a pipe, a CI log) each message and each step of a meter is one plain line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TextIO

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.results import Progress

Mode = Literal["auto", "bar", "lines"]
PREFIX = "tokperf: "
BAR_WIDTH = 20


def live_wanted(mode: Mode, stream: TextIO) -> bool:
    """``bar``: always; ``lines``: never; ``auto``: on a terminal that draws (not TERM=dumb)."""
    if mode != "auto":
        return mode == "bar"
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


@contextmanager
def reporter(mode: Mode = "auto", stream: TextIO | None = None) -> Iterator[Progress]:
    """The progress callable for one verb; live lines are cleared when it ends."""
    out = sys.stderr if stream is None else stream
    if not live_wanted(mode, out):
        yield Lines(out)
        return
    live: RichLive | AnsiLive = (RichLive(out) if importlib.util.find_spec("rich") is not None
                                 else AnsiLive(out))
    try:
        yield live
    finally:
        live.stop()


class Lines:
    """One ``tokperf: ...`` line per message (meters print their steps as messages)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, line: str) -> None:
        print(f"{PREFIX}{line}", file=self.stream, flush=True)


def bar(meter: Meter, width: int = BAR_WIDTH) -> str:
    """``[########------------]``; blank for a meter that is only timed."""
    if not meter.total:
        return " " * (width + 2)
    filled = round(width * min(max(meter.done / meter.total, 0.0), 1.0))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class AnsiLive:
    """Meters drawn below the messages with ANSI cursor codes, redrawn every second."""

    def __init__(self, stream: TextIO, tick_s: float = 1.0) -> None:
        self.stream = stream
        self.meters: list[Meter] = []
        self.drawn = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self._tick, args=(tick_s,), daemon=True,
                                       name="tokperf-progress")
        self.ticker.start()

    def __call__(self, line: str) -> None:
        with self.lock:
            self._clear()
            self.stream.write(f"{PREFIX}{line}\n")
            self._draw()

    def show(self, meter: Meter) -> None:
        with self.lock:
            if meter not in self.meters:
                self.meters.append(meter)
            self._clear()
            self._draw()

    def drop(self, meter: Meter) -> None:
        with self.lock:
            if meter in self.meters:
                self.meters.remove(meter)
            self._clear()
            self._draw()

    def stop(self) -> None:
        self.stopped.set()
        self.ticker.join()
        with self.lock:
            self.meters.clear()
            self._clear()
            self.stream.flush()

    def _tick(self, tick_s: float) -> None:
        while not self.stopped.wait(tick_s):
            with self.lock:
                if self.meters:
                    self._clear()
                    self._draw()

    def _clear(self) -> None:
        if self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")  # up to the first line, erase below
            self.drawn = 0

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1
        for meter in self.meters:
            self.stream.write(f"{PREFIX}{bar(meter)} {meter.text()}"[:width] + "\n")
        self.drawn = len(self.meters)
        self.stream.flush()


class RichLive:
    """The same on ``rich``'s Progress: a task per meter, its text computed when drawn."""

    def __init__(self, stream: TextIO) -> None:
        # optional: not a dependency, so not known to the type checker where absent
        from rich.console import Console  # type: ignore[import-not-found, unused-ignore]
        from rich.progress import (  # type: ignore[import-not-found, unused-ignore]
            BarColumn,
            Progress,
            ProgressColumn,
        )
        from rich.text import Text  # type: ignore[import-not-found, unused-ignore]

        class MeterColumn(ProgressColumn):  # type: ignore[misc, unused-ignore]
            def render(self, task: Any) -> Text:
                meter: Meter = task.fields["meter"]
                return Text(meter.text())

        self.console = Console(file=stream, force_terminal=True)
        self.progress = Progress(BarColumn(bar_width=BAR_WIDTH), MeterColumn(),
                                 console=self.console, refresh_per_second=2, transient=True)
        self.tasks: dict[int, Any] = {}
        self.lock = threading.Lock()
        self.progress.start()

    def __call__(self, line: str) -> None:
        self.console.print(f"{PREFIX}{line}", markup=False, highlight=False, soft_wrap=True)

    def show(self, meter: Meter) -> None:
        with self.lock:
            task = self.tasks.get(id(meter))
            if task is None:
                self.tasks[id(meter)] = self.progress.add_task(
                    "", total=meter.total, completed=int(meter.done), meter=meter)
            else:
                self.progress.update(task, total=meter.total, completed=meter.done)

    def drop(self, meter: Meter) -> None:
        with self.lock:
            task = self.tasks.pop(id(meter), None)
            if task is not None:
                self.progress.remove_task(task)

    def stop(self) -> None:
        self.progress.stop()
