"""Where the build verbs' progress goes: live lines on a terminal, plain lines elsewhere.

On a terminal every running ``Meter`` (``builds.progress``) is a line with a bar, its
elapsed time and the time left, redrawn every second, messages printed above; the line
fits the terminal's width (``live_lines``). ``rich`` draws them where it is installed
(loaded only then, live only while a meter runs), else a few ANSI codes. Anywhere else (a
pipe, a CI log) each message and each step of a meter is one plain line.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import threading
from collections.abc import Iterator, Sequence
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
    """``[########------------]``; blank for a meter with neither a count nor an expected time."""
    fraction = meter.fraction()
    if fraction is None:
        return " " * (width + 2)
    filled = round(width * fraction)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


Form = tuple[int, Literal["long", "short", "left"], int]
_WHOLE = 10**6
_FORMS: tuple[Form, ...] = (
    (BAR_WIDTH, "long", _WHOLE), (BAR_WIDTH, "short", _WHOLE), (BAR_WIDTH, "short", 12),
    (BAR_WIDTH // 2, "short", 8), (BAR_WIDTH // 2, "left", 8), (BAR_WIDTH // 2, "left", 0),
    (0, "left", 0))
"""Each narrower than the last: bar width, times, the least of a label kept (``_WHOLE``:
all of it; 0: none)."""


def _cut(label: str, room: int) -> str:
    """``label`` in ``room`` characters, whole words dropped from its start (its end
    names the step: ``…b11434: build``)."""
    if len(label) <= room:
        return label
    words = label.split(" ")
    while words and (len(" ".join(words)) + 1 > room or not any(c.isalnum() for c in words[0])):
        words.pop(0)  # a word that is only an arrow leads nowhere
    return "…" + " ".join(words) if words else "…" + label[len(label) - room + 1:]


def _line(meter: Meter, width: int, form: Form) -> str | None:
    """The meter's line in this form, or None where it does not fit ``width``."""
    bar_width, times, least = form
    drawn = f"{bar(meter, bar_width)} " if bar_width else ""
    count = meter.count_text()
    told = ", ".join(meter.times(times))
    if not least:
        text = drawn + (f"{count}, {told}" if count else told)
        return text if len(text) <= width else None
    label = meter.label if count else meter.label.rstrip(":")
    rest = (f" {count}" if count else "") + f", {told}"
    room = width - len(drawn) - len(rest)
    return f"{drawn}{_cut(label, room)}{rest}" if room >= min(least, len(label)) else None


def live_lines(meters: Sequence[Meter], width: int) -> list[str]:
    """Each meter's line in ``width`` columns, in the widest form all fit (their bars
    aligned): a narrower terminal gets the short times, the labels' ends and a shorter
    bar, then no labels and the time left alone; the count and time left stay."""
    for form in _FORMS:
        lines = [_line(meter, width, form) for meter in meters]
        if all(line is not None for line in lines):
            return [line for line in lines if line is not None]
    return [(_line(m, _WHOLE, _FORMS[-1]) or "")[:width] for m in meters]


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
        width = shutil.get_terminal_size((100, 24)).columns - 1  # the last column wraps
        for line in live_lines(self.meters, width):
            self.stream.write(line + "\n")
        self.drawn = len(self.meters)
        self.stream.flush()


class RichLive:
    """The same lines on ``rich``'s Progress: a task per meter, its line computed when
    drawn; live only while a meter runs (an empty one only erases its line)."""

    def __init__(self, stream: TextIO) -> None:
        # optional: not a dependency, so not known to the type checker where absent
        from rich.console import Console  # type: ignore[import-not-found, unused-ignore]
        from rich.progress import (  # type: ignore[import-not-found, unused-ignore]
            Progress,
            ProgressColumn,
        )
        from rich.text import Text  # type: ignore[import-not-found, unused-ignore]

        console = Console(file=stream, force_terminal=True)
        meters: list[Meter] = []

        class MeterColumn(ProgressColumn):  # type: ignore[misc, unused-ignore]
            def render(self, task: Any) -> Text:
                meter: Meter = task.fields["meter"]
                shown = list(meters) if meter in meters else [meter]
                line = live_lines(shown, console.width - 1)[shown.index(meter)]
                return Text(line, no_wrap=True, overflow="ellipsis")

        self.console, self.meters = console, meters
        self.progress = Progress(MeterColumn(), console=console, refresh_per_second=2,
                                 transient=True)
        self.tasks: dict[int, Any] = {}
        self.lock = threading.Lock()

    def __call__(self, line: str) -> None:
        self.console.print(f"{PREFIX}{line}", markup=False, highlight=False, soft_wrap=True)

    def show(self, meter: Meter) -> None:
        with self.lock:
            task = self.tasks.get(id(meter))
            if task is None:
                if not self.tasks:
                    self.progress.start()
                self.meters.append(meter)
                self.tasks[id(meter)] = self.progress.add_task("", meter=meter)
            else:
                self.progress.update(task)

    def drop(self, meter: Meter) -> None:
        with self.lock:
            task = self.tasks.pop(id(meter), None)
            if task is not None:
                self.meters.remove(meter)
                self.progress.remove_task(task)
                if not self.tasks:
                    self.progress.stop()

    def stop(self) -> None:
        with self.lock:
            self.tasks.clear()
            self.meters.clear()
            self.progress.stop()
