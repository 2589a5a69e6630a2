"""A measured memory READ-bandwidth probe in numpy: what decode actually streams, the best
of several passes over a buffer set up once (``ReadProbe``).
"""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tokperf.errors import ConfigError, TokperfError
from pytest_tokperf.hardware.commands import read_text
from pytest_tokperf.results import Bandwidth

MIB = 2**20
DEFAULT_MIN_BYTES = 512 * MIB
DEFAULT_MAX_BYTES = 2048 * MIB
DEFAULT_DURATION_S = 0.25
"""A probe's time budget around a measurement (``benchmarks/perf/bench_cost.py``)."""
DEFAULT_PASSES = 5


class ProbeTimeout(TokperfError):
    """The probe buffer's set-up passed its budget (``ReadProbe.prepare``)."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Every pass of one probe run; ``bandwidth`` is the best of them."""

    bandwidth: Bandwidth
    passes_bytes_per_s: tuple[float, ...]
    threads: int
    buffer_bytes: int
    sweeps_per_pass: int
    elapsed_s: float
    """Seconds spent reading (the buffer's set-up excluded)."""
    setup_s: float = 0.0
    """Seconds the buffer's allocation and first touch took, once per ``ReadProbe``."""

    @property
    def spread(self) -> float:
        """(best - worst) / best over the passes: 0.15 means a 15% swing."""
        return 1 - min(self.passes_bytes_per_s) / max(self.passes_bytes_per_s)


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """Total L3 over all cache instances (each instance counted once), from sysfs."""
    seen: dict[str, int] = {}
    for index in root.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "level").read_text().strip() != "3":
                continue
            size = (index / "size").read_text().strip().upper()
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1024, "M": MIB, "G": 2**30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            seen[shared] = int(digits) * scale
    return sum(seen.values()) or None


def default_buffer_bytes() -> int:
    """512 MiB or 8x the LLC; at most 2 GiB and a quarter of available memory."""
    llc = last_level_cache_bytes() or 0
    size = min(max(DEFAULT_MIN_BYTES, 8 * llc), DEFAULT_MAX_BYTES)
    available = re.search(r"^MemAvailable:\s*(\d+)", read_text("/proc/meminfo") or "", re.M)
    if available is not None:
        size = max(min(size, int(available.group(1)) * 1024 // 4), 64 * MIB)
    return size


class ReadProbe:
    """One probe buffer and worker pool, set up once and reused; ``close`` frees it."""

    def __init__(self, size_bytes: int | None = None, threads: int | None = None) -> None:
        self.size_bytes = default_buffer_bytes() if size_bytes is None else int(size_bytes)
        self.threads = available_cpus() if threads is None else int(threads)
        if self.size_bytes < MIB:
            raise ConfigError(f"probe buffer size {size_bytes!r} bytes is below 1 MiB; use "
                              f">= 512 MiB")
        if self.threads < 1:
            raise ConfigError(f"probe threads {threads!r} must be >= 1")
        self.setup_s = 0.0
        """Seconds ``prepare`` took (allocation and first touch), outside any probe."""
        self._slices: list[Any] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def prepare(self, budget_s: float | None = None) -> float:
        """Set up buffer and workers once; the seconds (``ProbeTimeout`` past
        ``budget_s``)."""
        if self._slices is None:
            import numpy as np

            started = time.perf_counter()
            count = self.size_bytes // 8 // self.threads * self.threads
            # distinct values: no zero page or KSM merge serves them from cache
            buffer = np.empty(count, dtype=np.float64)
            piece = 64 * MIB // 8
            for first in range(0, count, piece):
                last = min(first + piece, count)
                buffer[first:last] = np.arange(first, last, dtype=np.float64)
                spent = time.perf_counter() - started
                if budget_s is not None and spent > budget_s and last < count:
                    del buffer
                    raise ProbeTimeout(
                        f"the probe buffer's set-up passed its {budget_s:.1f} s budget after "
                        f"{last * 8 / MIB:.0f} of {count * 8 / MIB:.0f} MiB ({spent:.1f} s)")
            self._slices = list(np.split(buffer, self.threads))
            self._pool = ThreadPoolExecutor(max_workers=self.threads,
                                            thread_name_prefix="tokperf-probe")
            self.setup_s = time.perf_counter() - started
        return self.setup_s

    @property
    def buffer_bytes(self) -> int:
        return self.size_bytes // 8 // self.threads * self.threads * 8

    def _pass(self, sweeps: int) -> float:
        """Bytes per second of ``sweeps`` reads of the whole buffer, all workers at once."""
        import numpy as np

        assert self._slices is not None and self._pool is not None  # prepare() ran
        gate = threading.Barrier(self.threads)

        def read(part: Any) -> tuple[float, float]:
            gate.wait()
            begin = time.perf_counter()
            for _ in range(sweeps):
                np.add.reduce(part)
            return begin, time.perf_counter()

        spans = list(self._pool.map(read, self._slices))
        wall = max(end for _, end in spans) - min(begin for begin, _ in spans)
        return self.buffer_bytes * sweeps / max(wall, 1e-9)

    def measure(self, duration_s: float = DEFAULT_DURATION_S,
                passes: int = DEFAULT_PASSES, setup_budget_s: float | None = None) -> ProbeResult:
        """Best of up to ``passes`` passes within about ``duration_s`` (set-up excluded)."""
        if passes < 1:
            raise ConfigError(f"probe passes {passes!r} must be >= 1")
        if not duration_s > 0:
            raise ConfigError(f"probe duration {duration_s!r} s must be positive")
        self.prepare(setup_budget_s)
        started = time.perf_counter()
        deadline = started + duration_s
        # the first pass (one sweep) sizes the others; the buffer is resident, so it counts
        results = [self._pass(1)]
        per_sweep_s = self.buffer_bytes / results[0]
        budget = max(deadline - time.perf_counter(), per_sweep_s)
        sweeps = max(1, int(budget / max(passes - 1, 1) / per_sweep_s))
        while len(results) < passes:
            if time.perf_counter() + self.buffer_bytes * sweeps / max(results) > deadline:
                break
            results.append(self._pass(sweeps))
        detail = (f"read probe: best of {len(results)} passes, {self.threads} threads, "
                  f"{self.buffer_bytes / MIB:.0f} MiB")
        return ProbeResult(
            bandwidth=Bandwidth(max(results), "measured", detail),
            passes_bytes_per_s=tuple(results),
            threads=self.threads,
            buffer_bytes=self.buffer_bytes,
            sweeps_per_pass=sweeps,
            elapsed_s=time.perf_counter() - started,
            setup_s=self.setup_s,
        )

    def close(self) -> None:
        """Stop the workers and free the buffer (a later ``measure`` sets up again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._pool = None
        self._slices = None

    def __enter__(self) -> ReadProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe_read_bandwidth(
    size_bytes: int | None = None,
    threads: int | None = None,
    passes: int = 7,
    duration_s: float = 2.0,
) -> ProbeResult:
    """Measure sustained read bandwidth once (best pass, set-up not counted)."""
    with ReadProbe(size_bytes, threads) as probe:
        return probe.measure(duration_s, passes)
