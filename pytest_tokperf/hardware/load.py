"""The machine's own state during a measurement (other processes' CPU, run queue, steal),
a watch that stops a measurement reading busy, and a wait for a quiet window. Linux only,
from /proc; elsewhere ``MachineLoad.unknown``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from pytest_tokperf.errors import MeasuredBusy, RequestStopped
from pytest_tokperf.results import BUSY_NOTE, BenchResult, MachineLoad

POLL_S = 0.1
"""Seconds between run-queue samples while a repetition runs."""

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """One read of ``/proc/stat``: the all-CPU jiffies, the CPU count, procs_running."""

    busy: int
    """user + nice + system + irq + softirq (guest time is inside user and nice)."""
    idle: int
    """idle + iowait."""
    steal: int
    cpus: int
    procs_running: int | None


def parse_proc_stat(text: str) -> CpuTimes:
    """``/proc/stat`` text to its all-CPU times; ValueError when it has no ``cpu`` line."""
    total: list[int] | None = None
    cpus = 0
    running = None
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            total = [int(v) for v in parts[1:]] + [0] * 8
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            cpus += 1
        elif parts[0] == "procs_running" and len(parts) > 1:
            running = int(parts[1])
    if total is None:
        raise ValueError("no 'cpu' line in /proc/stat")
    user, nice, system, idle, iowait, irq, softirq, steal = total[:8]
    return CpuTimes(busy=user + nice + system + irq + softirq, idle=idle + iowait,
                    steal=steal, cpus=cpus or 1, procs_running=running)


def parse_loadavg(text: str) -> tuple[float, int]:
    """``/proc/loadavg`` (``0.50 0.70 1.09 3/412 2701``) to (1-minute load, running)."""
    parts = text.split()
    return float(parts[0]), int(parts[3].split("/")[0])


def parse_pid_stat(text: str) -> tuple[str, int]:
    """``/proc/<pid>/stat`` to (state, utime + stime in ticks)."""
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[11]) + int(rest[12])


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, ValueError):
        return None


_T = TypeVar("_T")


def _parsed(path: Path, parse: Callable[[str], _T]) -> _T | None:
    """``parse`` of the file's text; None when it is gone, unreadable or not understood."""
    text = _read(path)
    try:
        return parse(text) if text else None
    except (ValueError, IndexError):
        return None


def _ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100


@dataclass(frozen=True, slots=True)
class _Snapshot:
    at_s: float
    cpu: CpuTimes
    engine_ticks: int | None
    own_s: float


class LoadSampler:
    """Reads the machine between ``start`` and ``stop`` (``engine_pids`` may be empty)."""

    def __init__(self, engine_pids: Sequence[int] = (), *, proc: Path = PROC,
                 poll_s: float | None = POLL_S,
                 own_cpu_s: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine_pids = tuple(engine_pids)
        self.proc = proc
        self.poll_s = poll_s
        self._own_cpu_s = own_cpu_s
        self._clock = clock
        self._start: _Snapshot | None = None
        self._queue: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._problem = ""
        self.cost_s = 0.0
        """CPU seconds the run-queue poll took (its own thread's time)."""

    def _snapshot(self) -> _Snapshot | None:
        text = _read(self.proc / "stat")
        if text is None:
            self._problem = f"no {self.proc / 'stat'} on this platform"
            return None
        try:
            cpu = parse_proc_stat(text)
        except ValueError as exc:
            self._problem = f"{self.proc / 'stat'} not understood ({exc})"
            return None
        ticks: int | None = None
        if self.engine_pids:
            ticks = sum(stat[1] for pid in self.engine_pids
                        if (stat := _parsed(self.proc / str(pid) / "stat", parse_pid_stat)))
        return _Snapshot(self._clock(), cpu, ticks, self._own_cpu_s())

    def _running_threads(self, pid: int | str) -> int:
        try:
            tasks = list((self.proc / str(pid) / "task").iterdir())
        except OSError:
            return 0
        return sum(1 for task in tasks
                   if (stat := _parsed(task / "stat", parse_pid_stat)) and stat[0] == "R")

    def _sample_queue(self) -> None:
        loadavg = _parsed(self.proc / "loadavg", parse_loadavg)
        if loadavg is not None:
            mine = self._running_threads("self") + sum(
                self._running_threads(pid) for pid in self.engine_pids)
            self._queue.append(max(0, loadavg[1] - mine))

    def _poll(self) -> None:
        started = time.thread_time()
        assert self.poll_s is not None
        while not self._stop.wait(self.poll_s):
            self._sample_queue()
        self.cost_s += time.thread_time() - started

    def start(self) -> LoadSampler:
        self._queue = []
        self._start = self._snapshot()
        if self._start is None:
            return self
        self._sample_queue()
        if self.poll_s is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._poll, name="tokperf-load",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> MachineLoad:
        """The reading since ``start`` (``MachineLoad.unknown`` without /proc)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self.reading()

    def reading(self) -> MachineLoad:
        """The reading from ``start`` to now; the sampler goes on."""
        begin = self._start
        if begin is None:
            return MachineLoad.unknown(self._problem or "the sampler was not started")
        self._sample_queue()
        end = self._snapshot()
        if end is None:
            return MachineLoad.unknown(self._problem)
        wall = max(end.at_s - begin.at_s, 1e-9)
        hz = _ticks_per_s()
        busy = end.cpu.busy - begin.cpu.busy
        steal = end.cpu.steal - begin.cpu.steal
        total = busy + steal + end.cpu.idle - begin.cpu.idle
        engine = None
        if end.engine_ticks is not None and begin.engine_ticks is not None:
            engine = max(0, end.engine_ticks - begin.engine_ticks) / hz / wall
        loadavg = _parsed(self.proc / "loadavg", parse_loadavg)
        load_1m = loadavg[0] if loadavg else None
        queue = self._queue
        return MachineLoad(
            wall_s=wall, cpus=end.cpu.cpus, busy_cpus=busy / hz / wall,
            engine_cpus=engine, own_cpus=max(0.0, end.own_s - begin.own_s) / wall,
            steal=steal / total if total > 0 else 0.0,
            run_queue=sum(queue) / len(queue) if queue else None,
            run_queue_max=max(queue) if queue else None, load_1m=load_1m,
            samples=len(queue),
            detail="" if self.engine_pids else "engine process unknown: machine-wide only",
        )


def listening_inodes(text: str, port: int) -> set[str]:
    """Socket inodes listening on ``port`` in ``/proc/net/tcp`` (or tcp6) text."""
    found = set()
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 9 and parts[3] == "0A" and parts[1].rsplit(":", 1)[-1] == f"{port:04X}":
            found.add(parts[9])
    return found


def listening_pids(port: int, proc: Path = PROC) -> tuple[int, ...]:
    """The processes listening on TCP ``port`` here; empty when not found or readable."""
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        text = _read(proc / "net" / name)
        if text:
            inodes |= listening_inodes(text, port)
    if not inodes:
        return ()
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:  # closed since the listing (the listing's own, for one)
                continue
            if link in wanted:
                pids.append(int(entry.name))
                break
    return tuple(sorted(pids))


def machine_load_now(seconds: float = 1.0, engine_pids: Sequence[int] = ()) -> MachineLoad:
    """The machine over the next ``seconds``."""
    sampler = LoadSampler(engine_pids, poll_s=POLL_S if seconds >= 3 * POLL_S else None)
    sampler.start()
    time.sleep(seconds)
    return sampler.stop()


def engine_idle(load: MachineLoad) -> MachineLoad:
    """``load`` read while the engine is idle or not running: what is busy besides tokperf
    is the neighbours', so an engine share the sampler could not tell (no PID) is 0."""
    if load.busy_cpus is None or load.engine_cpus is not None:
        return load
    return replace(load, engine_cpus=0.0)


class BusyWatch:
    """The machine from the start of a measurement on: ``after_s`` in (warm-up included)
    and every ``every_s`` after, ``stopping`` reads it since the start; the first busy
    reading (``MachineLoad.loaded``) is kept in ``busy`` and stops the measurement."""

    def __init__(self, engine_pids: Sequence[int] = (), *, after_s: float = 60.0,
                 every_s: float = 5.0, sampler: LoadSampler | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._sampler = (sampler or LoadSampler(engine_pids, poll_s=None)).start()
        self._clock, self._every_s = clock, every_s
        self._due_s = clock() + after_s
        self.busy: MachineLoad | None = None

    def stopping(self) -> bool:
        """Whether to stop measuring; a clock read until a reading is due (cheap per token)."""
        if self.busy is None and self._clock() >= self._due_s:
            self._due_s = self._clock() + self._every_s
            load = self._sampler.reading()
            self.busy = load if load.loaded else None
        return self.busy is not None

    def stopped(self, exc: Exception, partial: BenchResult | None) -> MeasuredBusy | None:
        """A measurement that ``exc`` ended: stopped busy, its repetitions so far
        (``partial``) kept; None when it failed otherwise."""
        load = self.busy
        if load is None or not isinstance(exc, RequestStopped):
            return None
        said = (f"{BUSY_NOTE} {load.describe('since the measurement began')}: measuring "
                f"stopped after {load.wall_s:.0f} s, neither a pass nor a fail (--tokperf-busy "
                "judge measures on)")
        return MeasuredBusy(said, partial and replace(partial, notes=(*partial.notes, said)))


QUIET_WINDOW_S = 2.0
"""How long the machine must stay quiet to count as a quiet window."""


def wait_for_quiet(budget_s: float, engine_pids: Sequence[int] = (), *,
                   window_s: float = QUIET_WINDOW_S,
                   sample: Callable[[float, Sequence[int]], MachineLoad] | None = None
                   ) -> float | None:
    """Seconds waited until a ``window_s`` window in which the neighbours took no notable
    share of the machine (``MachineLoad.loaded`` false), or None when none came within
    ``budget_s``. A machine whose load cannot be read counts as quiet (nothing to wait on).
    The engine is idle while this waits, or not running at all (``engine_idle``)."""
    read = sample or machine_load_now
    start = time.monotonic()
    while True:
        load = engine_idle(read(window_s, tuple(engine_pids)))
        if not load.known or not load.loaded:
            return time.monotonic() - start
        if time.monotonic() - start + window_s > budget_s:
            return None

