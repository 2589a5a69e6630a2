"""``tokperf bench``: llama-bench's job over HTTP, without pytest.

Every combination of the comma-separated workload lists (``-p 64,512 -d 0,4096``) is
measured on one engine with its ceiling, through the same ``BenchRun`` the plugin holds;
each result is stored as it finishes, and the summary (or JSON) printed at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tokperf.cli.common import DB_HELP, JSON
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.errors import ConfigError, TokperfError
from pytest_tokperf.storage.location import TOKPERF_DIR, project_root

if TYPE_CHECKING:
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.settings import Settings

TEST_ID = "tokperf bench"
"""The test id of every result: the workload parameters tell the series apart."""

_LISTS = (("prompt", "prompt tokens", "64"), ("generate", "generated tokens", "128"),
          ("depth", "KV depth before the prompt", "0"), ("concurrency", "concurrent streams", "1"),
          ("warm", "cached prefix tokens primed before each request (0 = cold)", "0"))


def add_parser(verbs: Any) -> None:
    p = verbs.add_parser(
        "bench", parents=[JSON], help="measure workloads on an engine without pytest (like llama-bench)",
        description="Measure every combination of the comma-separated lists on one engine "
        "(started llama-server by default, or --url), with the decode ceiling; results go to "
        "the results DB as they finish. Exit 1 when a workload fails or misses --min-efficiency.")
    short = {"prompt": "-p", "generate": "-n", "depth": "-d", "concurrency": "-c"}
    for name, what, default in _LISTS:
        flags = [short[name], f"--{name}"] if name in short else [f"--{name}"]
        p.add_argument(*flags, default=default, metavar="N[,N...]",
                       help=f"{what} (default {default})")
    p.add_argument("--chat", action="store_true",
                   help="through the engine's chat endpoint and the model's template "
                   "(thinking tokens counted apart)")
    p.add_argument("--draft", metavar="PATH|self|small",
                   help="also run a speculative A/B per prompt/generate/depth with this draft")
    p.add_argument("-r", "--repetitions", default=None, metavar="N|MIN-MAX",
                   help="measured repetitions per workload: N exactly, as llama-bench's -r, or "
                   "MIN-MAX: adaptive, until the decode interval is within --target-interval "
                   "(default 3-10)")
    p.add_argument("--target-interval", metavar="F",
                   help="adaptive: stop once the 95%% interval of the mean decode is within "
                   "+/- this fraction (default 0.02)")
    p.add_argument("--columns", metavar="N", help="width of the summary table (default 120)")
    p.add_argument("--warmup", default="1", metavar="N",
                   help="discarded warm-up runs per workload (default 1)")
    p.add_argument("--engine", default="llama-server", help="engine to measure")
    p.add_argument("--url", help="attach to an engine running at URL instead of starting one")
    p.add_argument("--speculative-url", metavar="URL",
                   help="with --url and --draft: a second running server that drafts")
    p.add_argument("-m", "--model", default="main",
                   help="GGUF for a started server, or 'main' / 'test' (generated)")
    p.add_argument("-t", "--threads", metavar="N", help="engine threads (default: all cores)")
    p.add_argument("--server-bin", metavar="PATH", help="llama-server binary to run")
    p.add_argument("--bandwidth", metavar="BW", help="bandwidth for the ceiling, e.g. 1008GB/s")
    p.add_argument("--device", metavar="DEVICE", help="where the engine runs, for the ceiling: "
                   "cpu, cuda:N, metal, rocm:N, vulkan:N (default: what the engine reports)")
    p.add_argument("--min-efficiency", metavar="F", help="fail decode below this fraction of the ceiling")
    p.add_argument("--db", metavar="PATH", help=f"{DB_HELP}; 'off' writes nothing")
    p.set_defaults(func=bench)


def _numbers(text: str, flag: str, minimum: int) -> list[int]:
    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise ConfigError(f"--{flag} {text!r}: {part.strip()!r} is not a whole number >= "
                              f"{minimum}; pass a comma-separated list such as --{flag} 64,512")
        values.append(value)
    return values


def bench_settings(args: argparse.Namespace) -> Settings:
    """The plugin's settings from ``tokperf bench``'s arguments: the same resolution
    (CLI, then PYTEST_TOKPERF_* environment, then defaults), so repetitions are adaptive
    unless ``-r`` fixes them, as with ``pytest --tokperf-engine``."""
    from pytest_tokperf import settings as settings_mod

    lists = _lists(args)
    needed = max(d + p + n for d in lists["depth"] for p in lists["prompt"] for n in lists["generate"])
    cli = {"engine": args.engine, "url": args.url, "model": args.model, "threads": args.threads,
           "server_bin": args.server_bin, "bandwidth": args.bandwidth, "db": args.db,
           "device": args.device,
           "min_efficiency": args.min_efficiency, "draft_model": args.draft,
           "speculative_url": args.speculative_url,
           "repetitions": args.repetitions, "warmup": args.warmup,
           "target_interval": args.target_interval, "columns": args.columns,
           "parallel": str(max(lists["concurrency"])), "ctx_size": str(max(4096, needed + 64))}
    return settings_mod.resolve(cli=cli.get, ini=lambda _: None, env=os.environ,
                                rootdir=Path.cwd(), flags=_FLAGS,
                                warn=lambda message: print(f"tokperf: {message}", file=sys.stderr))


_FLAGS = {"engine": "--engine", "url": "--url", "model": "--model", "threads": "--threads",
          "server_bin": "--server-bin", "bandwidth": "--bandwidth", "db": "--db",
          "device": "--device", "min_efficiency": "--min-efficiency", "draft_model": "--draft",
          "speculative_url": "--speculative-url", "repetitions": "--repetitions",
          "warmup": "--warmup", "target_interval": "--target-interval", "columns": "--columns"}
"""The settings ``tokperf bench`` takes as its own options, by the names errors give."""


def _lists(args: argparse.Namespace) -> dict[str, list[int]]:
    return {name: _numbers(getattr(args, name), name, 0 if name in ("depth", "warm") else
                           2 if name == "generate" else 1) for name, _, _ in _LISTS}


def bench(args: argparse.Namespace) -> int:
    from pytest_tokperf.bench.run import BenchRun

    lists = _lists(args)
    settings = bench_settings(args)

    def progress(message: str) -> None:
        if not args.json:
            print(f"# {message}", file=sys.stderr, flush=True)

    run = BenchRun.open(settings, log_dir=project_root(Path.cwd()) / TOKPERF_DIR / "logs",
                        progress=progress)
    tok_bench = run.tok_bench(TEST_ID, progress=progress)
    failures: list[str] = []
    try:
        for p, n, d, c, w in itertools.product(*lists.values()):
            label = f"prompt {p}, gen {n}, depth {d}, x{c}, warm {w}"
            progress(f"measuring {label}")
            try:
                tok_bench(prompt_tokens=p, generate_tokens=n, depth_tokens=d, concurrency=c,
                          cached_prefix_tokens=w, chat=args.chat)
            except AssertionError as exc:  # the efficiency floor: recorded, keep going
                failures.append(f"{label}: {exc}")
        if args.draft:
            for p, n, d in itertools.product(lists["prompt"], lists["generate"], lists["depth"]):
                try:
                    tok_bench.speculative(args.draft, p, n, depth_tokens=d)
                except AssertionError as exc:
                    failures.append(f"speculative prompt {p}, gen {n}, depth {d}: {exc}")
    except (TokperfError, KeyboardInterrupt) as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
    finally:
        try:
            run.finish()
            _print(args, run, failures)
        finally:
            lost = run.close()
            if lost:
                print(lost, file=sys.stderr)
                failures.append(lost)
    return 1 if failures else 0


def _print(args: argparse.Namespace, run: BenchRun, failures: list[str]) -> None:
    from pytest_tokperf.bench.gate import describe
    from pytest_tokperf.report.table import session_rows, summary_table

    rows = session_rows(run.recorded, run.findings)
    location = run.recorder.location
    if args.json:
        from pytest_tokperf.report.report_data import figures_from_result
        from pytest_tokperf.report.formats import result_json

        results = [{**result_json(figures_from_result(
            row.test_id, row.result, ceiling=row.ceiling, verdict=row.verdict,
            hardware=run.ceilings.hardware)), "notes": list(row.result.notes)} for row in rows]
        print(dumps({"results": results, "failures": failures,
                     "gate": [describe(f) for f in run.findings],
                     "gate_summary": run.gate_summary,
                     "db": str(location) if location else None}))
        return
    for line in summary_table(rows, columns=run.settings.columns, option="--columns 250"):
        print(line)
    gated = [f for f in run.findings if f.comparison.n_baseline > 0]
    if gated:
        print(f"gate against {run.settings.baseline.label}: {run.gate_summary}")
    for finding in gated:
        print(f"  {describe(finding)}")
    print(f"results: {len(rows)} stored in {location}" if location
          else "results: not stored (--db off)")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
