"""hardware.process_clock: an engine's own run and wait times, read from /proc schedstat."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_tokperf.hardware.process_clock import (
    ProcessClock,
    ThreadTimes,
    parse_schedstat,
    window,
    working,
)


def test_schedstat_text_is_run_and_wait_nanoseconds() -> None:
    assert parse_schedstat("432621566 995714771 127\n") == (432621566, 995714771)
    assert parse_schedstat("") is None
    assert parse_schedstat("x y z") is None


def test_the_window_averages_the_threads_that_worked() -> None:
    # thread 1 computed (0.8 s on a CPU, 0.2 s waiting), thread 2 slept (HTTP), thread 3
    # appeared during the window: only thread 1 is a working thread of that second
    first = ThreadTimes({1: (10**9, 0), 2: (5 * 10**6, 0)})
    last = ThreadTimes({1: (18 * 10**8, 2 * 10**8), 2: (5 * 10**6 + 10**5, 0), 3: (10**9, 0)})
    got = window(first, last, 1.0)
    assert got is not None
    assert got.threads == 1
    assert got.run_s == pytest.approx(0.8)
    assert got.wait_s == pytest.approx(0.2)
    assert got.wait_share == pytest.approx(0.2)


def test_no_working_thread_or_no_span_is_no_window() -> None:
    idle = ThreadTimes({1: (0, 0)})
    assert window(idle, idle, 1.0) is None
    assert window(idle, ThreadTimes({1: (10**9, 0)}), 0.0) is None


def test_a_wider_windows_threads_are_measured_where_they_barely_ran() -> None:
    # over the whole request thread 1 worked (0.3 s of 0.5 s); in the last 0.1 s it ran
    # 2 ms and waited 30 ms: under BUSY_SHARE of that window, so not a working thread of
    # it, unless the wider window names it
    sent = ThreadTimes({1: (0, 0), 2: (0, 0)})
    first = ThreadTimes({1: (298 * 10**6, 10**8), 2: (10**6, 0)})
    end = ThreadTimes({1: (300 * 10**6, 130 * 10**6), 2: (10**6, 0)})
    assert working(sent, end, 0.5) == frozenset({1})
    assert window(first, end, 0.1) is None
    got = window(first, end, 0.1, among=working(sent, end, 0.5))
    assert got is not None and got.threads == 1
    assert got.run_s == pytest.approx(0.002) and got.wait_s == pytest.approx(0.03)


def test_a_process_gone_or_no_proc_reads_none(tmp_path: Path) -> None:
    assert ProcessClock(2**22 + 12345).read() is None
    assert ProcessClock(os.getpid(), proc=tmp_path).read() is None


@pytest.mark.skipif(not Path("/proc/self/schedstat").exists()
                    or not hasattr(os, "sched_setaffinity"),
                    reason="needs Linux /proc/<pid>/task/*/schedstat and CPU affinity")
def test_a_neighbour_on_the_same_cpu_shows_as_wait() -> None:
    """A spinning child pinned to one CPU with two spinning neighbours pinned there too
    gets about a third of it: its clock says it waited for most of the window."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    spin = "import os, time\nos.sched_setaffinity(0, {%d})\nend = time.time() + 20\nwhile time.time() < end: pass\n" % cpu
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(3)]
    try:
        clock = ProcessClock(procs[0].pid)
        time.sleep(0.5)
        first, t0 = clock.read(), time.perf_counter()
        time.sleep(1.5)
        last, t1 = clock.read(), time.perf_counter()
        assert first is not None and last is not None
        got = window(first, last, t1 - t0)
        assert got is not None
        # alone it would run ~100%; sharing one CPU three ways it waits ~2/3 of the time
        assert got.wait_share > 0.3, got
        assert got.run_s + got.wait_s == pytest.approx(t1 - t0, rel=0.25)
    finally:
        for p in procs:
            p.kill()
            p.wait()
