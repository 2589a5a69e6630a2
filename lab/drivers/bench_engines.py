"""One model shape on three engines: llama-server (GGUF F16), mlx_lm and vLLM, side by side.

    .venv/bin/python lab/drivers/bench_engines.py [--engines llama-server,mlx,vllm]
        [--preset engines|test] [--prompt 16] [--generate 128] [--reps 5] [--threads 1]

Writes the same random-weight shape as a GGUF (llama-server) and as a Hugging Face folder
(mlx_lm, vLLM), starts each engine on 127.0.0.1 in turn (never two at once: on a small
machine two engines decoding together slow each other many times over), measures the same
workload through the same code the plugin runs, and prints per engine: the client's decode,
the engine's own decode (llama-server ``timings``, mlx_lm's per-token DEBUG log, vLLM's
``/metrics`` inter-token histogram), TTFT, bytes per token at the served dtype, the
ceiling (read bandwidth probed on this host around each measurement) and the efficiency.
Engines that are not installed (`.ci/install-engines`, `tokperf install-engine
llama-server`) are listed as skipped.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from pytest_tokperf.bench.ceilings import CeilingSource
from pytest_tokperf.bench.measure import MeasureOptions, run_workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.engines.speed_settings import placement_of
from pytest_tokperf.errors import TokperfError
from pytest_tokperf.model.hf_writer import cached_hf_model
from pytest_tokperf.model.spec import ENGINES_MODEL, TEST_MODEL
from pytest_tokperf.model.writer import cached_model
from pytest_tokperf.results import BenchResult, Ceiling, Workload
from pytest_tokperf.settings import resolve

CLOCKS = {"llama-server": "timings", "mlx": "DEBUG log", "vllm": "/metrics ITL"}


def _measure(engine: str, model: Path, workload: Workload, threads: str, source: CeilingSource,
             log_dir: Path) -> tuple[BenchResult, Ceiling | None, float]:
    cli = {"engine": engine, "model": str(model), "threads": threads, "db": "off",
           "startup_timeout": "900", "request_timeout": "600"}
    settings = resolve(cli=cli.get, ini=lambda _: None, env={}, rootdir=Path.cwd())
    session = EngineSession(settings, log_dir=log_dir,
                            progress=lambda m: print(f"# {engine}: {m}", file=sys.stderr))
    started = time.monotonic()
    try:
        handle = session.engine()
        start_s = time.monotonic() - started
        source.probe()
        result = run_workload(handle, workload, MeasureOptions(salt_base=int(time.time())))
        ceiling = source.ceiling_for(result, session.model_path)
    finally:
        session.close()
    return result, ceiling, start_s


def _fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engines", default="llama-server,mlx,vllm")
    parser.add_argument("--preset", choices=["engines", "test"], default="engines")
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", default="1",
                        help="llama-server threads (1 leaves the client a core)")
    args = parser.parse_args()
    spec = ENGINES_MODEL if args.preset == "engines" else TEST_MODEL
    spec = replace(spec, tensor_type="F16")
    gguf, folder = cached_model(spec), cached_hf_model(spec)
    workload = Workload(args.prompt, args.generate, repetitions=args.reps, warmup=1)
    source = CeilingSource()
    log_dir = Path("/tmp/tokperf-bench-engines")
    rows: list[str] = []
    head = (f"{'engine':<13} {'version':<9} {'device':<6} {'start s':>7} {'TTFT ms':>8} "
            f"{'decode':>7} {'own':>7} {'clock':<12} {'MB/token':>8} {'ceiling':>8} "
            f"{'eff':>6}  prompt tokens (asked {args.prompt})")
    for engine in args.engines.split(","):
        model = gguf if engine == "llama-server" else folder
        try:
            result, ceiling, start_s = _measure(engine, model, workload, args.threads,
                                                   source, log_dir)
        except TokperfError as exc:
            rows.append(f"{engine:<13} skipped: {str(exc)[:160]}")
            continue
        device = placement_of(result.engine).device
        engine_decode = result.engine_decode_tokens_per_s
        fp = ceiling.footprint if ceiling else None
        prompts = sorted({s.prompt_tokens for s in result.samples})
        rows.append(
            f"{engine:<13} {result.engine.version or '?':<9} "
            f"{device.label if device else '?':<6} {start_s:>7.1f} "
            f"{result.ttft_s.median * 1e3:>8.1f} "
            f"{_fmt(result.decode_tokens_per_s.median if result.decode_tokens_per_s else None, '7.1f')} "
            f"{_fmt(engine_decode.median if engine_decode else None, '7.1f')} "
            f"{CLOCKS.get(engine, '-'):<12} "
            f"{_fmt(fp.total_bytes / 1e6 if fp else None, '8.2f')} "
            f"{_fmt(ceiling.decode_tokens_per_s if ceiling else None, '8.0f')} "
            f"{_fmt(decode_efficiency(result, ceiling), '6.1%')}  {prompts}"
            + (f" [{'; '.join(n[:70] for n in result.notes)}]" if result.notes else ""))
    print(f"model: {spec.slug} ({spec.n_layer} layers x {spec.n_embd} wide, vocab "
          f"{spec.n_vocab}); {args.prompt} prompt + {args.generate} generated tokens, "
          f"{args.reps} repetitions; decode in tok/s (median), eff = judged decode / ceiling")
    reached = source.reached_bandwidth()
    if reached is not None:
        print(f"bandwidth: {reached.bytes_per_s / 1e9:.1f} GB/s ({reached.detail})")
    print(head)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
