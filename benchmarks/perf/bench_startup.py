"""What installing pytest-tokperf costs a test suite that does not use it.

Times ``pytest --collect-only -q`` over a generated suite of plain tests (no tok_bench)
with the plugin loaded (it is installed, so pytest loads it) and with ``-p no:tokperf``,
interleaved run by run so drift hits both sides alike, and prints the medians and their
ratio. Target: within 5% (the plugin imports no scipy, numpy or sqlite-utils until a
run needs them).

    .venv/bin/python benchmarks/perf/bench_startup.py [--runs 21] [--files 30] [--tests 10]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_suite(root: Path, files: int, tests: int) -> None:
    for f in range(files):
        body = "\n\n".join(f"def test_{f}_{t}():\n    assert {t} + 1 > {t}" for t in range(tests))
        (root / f"test_plain_{f}.py").write_text(body + "\n")
    (root / "pytest.ini").write_text("[pytest]\n")


def collect_s(root: Path, extra: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                    "-p", "no:cacheprovider", *extra], cwd=root, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--tests", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_suite(root, args.files, args.tests)
        sides: dict[str, list[float]] = {"with tokperf": [], "-p no:tokperf": []}
        collect_s(root, [])  # warm the file cache and .pyc files
        for _ in range(args.runs):
            sides["with tokperf"].append(collect_s(root, []))
            sides["-p no:tokperf"].append(collect_s(root, ["-p", "no:tokperf"]))
    print(f"pytest --collect-only of {args.files * args.tests} plain tests, "
          f"{args.runs} interleaved runs each")
    for name, times in sides.items():
        print(f"  {name:14}  median {statistics.median(times) * 1e3:7.1f} ms   "
              f"min {min(times) * 1e3:7.1f} ms")
    ratio = statistics.median(sides["with tokperf"]) / statistics.median(sides["-p no:tokperf"])
    best = min(sides["with tokperf"]) / min(sides["-p no:tokperf"])
    print(f"  ratio with/without: {ratio:.3f} (medians), {best:.3f} (minima); target <= 1.05")


if __name__ == "__main__":
    main()
