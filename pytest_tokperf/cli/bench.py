"""``tokperf bench``: llama-bench's job over HTTP, without pytest.

The parser, and a handler that hands the options to ``bench.grid`` (the grid and tests),
``bench.grid_run`` (one llama-server per configuration, each result stored as it
finishes) and ``report.llama_bench`` (the summary, tokperf's JSON or llama-bench's forms).
Errors name the bench's own options (``--url``, ``-r``), as typed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tokperf.bench.grid import GRID, KV_TYPES, LISTS, GridOptions
from pytest_tokperf.busy import BUSY_HELP, BUSY_OUTCOMES
from pytest_tokperf.cli.common import DB_HELP, JSON
from pytest_tokperf.errors import ConfigError, EngineUnavailable, TokperfError

if TYPE_CHECKING:
    from pytest_tokperf.bench.grid import BenchPlan
    from pytest_tokperf.bench.grid_run import Outcome
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.settings import Settings

FORMS = ("md", "csv", "json", "jsonl", "sql")
_LIST_HELP = {"prompt": "prompt-only (pp) tests of N tokens; 0: none",
              "generate": "generation-only (tg) tests of N tokens; 0: none",
              "depth": "KV depth (tokens of context) before every test; a pp/pg figure counts "
                       "its prefill too unless --warm primes it",
              "concurrency": "concurrent streams",
              "warm": "cached prefix tokens primed before each pp/pg request (0 = cold)"}
_GRID_HELP = {
    "threads": ("--threads", "N[,N...]", "engine threads (default: all cores)"),
    "gpu_layers": ("--n-gpu-layers", "N[,N...]",
                   "layers on the GPU (-1: all) (default: llama-server's)"),
    "flash_attn": ("--flash-attn", "on|off|auto[,...]",
                   "flash attention; 1/0/-1 as llama-bench (default: llama-server's, auto)"),
    "type_k": ("--cache-type-k", "TYPE[,TYPE...]",
               f"K cache type: {', '.join(KV_TYPES)} (default f16)"),
    "type_v": ("--cache-type-v", "TYPE[,TYPE...]", "V cache type (default f16)"),
    "batch": ("--batch-size", "N[,N...]", "logical batch size (default 2048)"),
    "ubatch": ("--ubatch-size", "N[,N...]", "physical batch size (default 512)")}
_FLAGS = {"engine": "--engine", "url": "--url", "model": "-m", "threads": "-t",
          "server_bin": "--server-bin", "bandwidth": "--bandwidth", "db": "--db",
          "device": "--device", "min_efficiency": "--min-efficiency", "draft_model": "--draft",
          "speculative_url": "--speculative-url", "repetitions": "-r",
          "warmup": "--warmup", "target_interval": "--target-interval", "columns": "--columns",
          "busy": "--busy", "busy_wait": "--busy-wait", "max_cv": "--max-cv"}
"""The settings ``tokperf bench`` takes as its own options, by the names errors give
(the spelling typed, when it was typed)."""
_DEST = {"draft_model": "draft"}
"""Settings whose option has another ``args`` name."""


class _Spelled(argparse.Action):
    """Keeps the value and how the option was typed (``-r`` or ``--repetitions``), so an
    error names it as given; with ``append``, every use adds to a list (llama-bench
    takes a list option several times)."""

    def __init__(self, *args: Any, append: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.append = append

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)
        namespace.spelled = {**getattr(namespace, "spelled", {}), self.dest: option_string}


class _Listed(_Spelled):
    """A ``_Spelled`` list option: every use adds to the list."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, append=True, **kwargs)


def grid_options(args: argparse.Namespace) -> GridOptions:
    """The grid's options as typed (``bench.grid.plan`` reads them)."""
    names = [*LISTS, *GRID, "pg", "model"]
    return GridOptions({name: getattr(args, name) or () for name in names}, chat=args.chat,
                       engine=args.engine, url=args.url, spelled=args.spelled)


def bench_settings(args: argparse.Namespace, chosen: BenchPlan) -> list[Settings]:
    """Each server configuration's settings (``bench.grid.point_settings``)."""
    from pytest_tokperf.bench.grid import point_settings

    given = {name: getattr(args, _DEST.get(name, name)) for name in _FLAGS}
    flags = {name: args.spelled.get(_DEST.get(name, name)) or flag
             for name, flag in _FLAGS.items()}
    return [point_settings(given, flags, point, chosen) for point in chosen.points]


_PLUGIN_FLAG = re.compile(r"--tokperf-([a-z][a-z-]*[a-z])")


def own_flags(text: str, args: argparse.Namespace) -> str:
    """``text`` with the plugin's option names that ``tokperf bench`` has its own option
    for (``--tokperf-url``) written as bench's (``--url``)."""
    def mapped(found: re.Match[str]) -> str:
        name = found[1].replace("-", "_")
        if name not in _FLAGS:
            return found[0]
        return str(args.spelled.get(_DEST.get(name, name)) or _FLAGS[name])

    return _PLUGIN_FLAG.sub(mapped, text)


def bench(args: argparse.Namespace) -> int:
    try:
        return _bench(args)
    except TokperfError as exc:  # main prints it; named as bench's options
        exc.args = (own_flags(str(exc), args),)
        raise


def _bench(args: argparse.Namespace) -> int:
    from pytest_tokperf.bench.grid import plan
    from pytest_tokperf.bench.grid_run import Outcome, check_models, measure
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.storage.location import TOKPERF_DIR, project_root

    if args.json and args.output:
        raise ConfigError(f"--json and {args.spelled.get('output') or '-o'} {args.output} both "
                          f"choose the output; give one")
    chosen = plan(grid_options(args))
    settings = bench_settings(args, chosen)
    check_models(chosen, attached=args.url is not None)

    def progress(message: str) -> None:
        if not args.json:
            print(f"# {message}", file=sys.stderr, flush=True)

    run = BenchRun.open(settings[0], log_dir=project_root(Path.cwd()) / TOKPERF_DIR / "logs",
                        progress=progress)
    outcome = Outcome([], [], [])
    try:
        measure(run, chosen, settings, outcome, draft=args.draft, progress=progress,
                named=lambda text: own_flags(text, args))
    finally:
        _finish(args, run, chosen, outcome)
    if outcome.interrupted:
        return 130
    if outcome.broken and not outcome.rows:
        raise EngineUnavailable("; ".join(dict.fromkeys(outcome.broken)))
    return 2 if outcome.broken else 1 if outcome.failures else 0


def _finish(args: argparse.Namespace, run: BenchRun, chosen: BenchPlan, outcome: Outcome
            ) -> None:
    """The gate's verdicts, the output, the engines stopped; a result the DB did not take
    is named (and fails the bench)."""
    try:
        run.finish()
        if outcome.rows or not outcome.broken:
            _print(args, run, chosen, outcome)
    finally:
        lost = run.close()
        if lost:
            print(lost, file=sys.stderr)
            outcome.failures.append(lost)


def _print(args: argparse.Namespace, run: BenchRun, chosen: BenchPlan, outcome: Outcome
           ) -> None:
    from pytest_tokperf.report.llama_bench import bench_aside, bench_json, render
    from pytest_tokperf.report.table import session_rows, summary_table

    failed = [*outcome.broken, *outcome.failures]
    if args.json:
        print(bench_json(run, outcome.rows, failed))
        return
    if args.output:
        lines = render(args.output, outcome.rows, chosen.asked)
    else:
        lines = summary_table(session_rows(run.recorded, run.findings),
                              columns=run.settings.columns, option="--columns 250")
    print("\n".join(lines))
    aside = sys.stderr if args.output else sys.stdout  # stdout holds only the chosen form
    print("\n".join(bench_aside(run, "--db off")), file=aside)
    for failure in failed:
        print(f"FAILED {failure}", file=sys.stderr)


def add_bench(verbs: Any) -> None:
    p = verbs.add_parser(
        "bench", parents=[JSON], help="measure workloads on an engine without pytest (like "
        "llama-bench)",
        description="Run llama-bench's tests over HTTP: prompt-only (-p), generation-only (-n) "
        "and prompt-then-generation (-pg PP,TG) tests at each depth (-d), on every "
        "combination of the server options (-m, -t, -ngl, -fa, -ctk, -ctv, -b, -ub), "
        "each with the decode ceiling. Lists are comma-separated or ranges (first-last, "
        "first-last+step, first-last*mult), or the option given again. llama-server is "
        "started once per server configuration (or attached with --url); results go to the "
        "results DB as they finish. Exit 1 when a test fails or misses --min-efficiency, 2 "
        "when an engine cannot be started or reached.")
    _workload_options(p)
    _engine_options(p)
    p.set_defaults(func=bench, spelled={})


def _workload_options(p: argparse.ArgumentParser) -> None:
    for name, (short, default, _) in LISTS.items():
        flags = [short, f"--{name}"] if short != f"--{name}" else [short]
        p.add_argument(*flags, dest=name, action=_Listed, metavar="N[,N...]",
                       help=f"{_LIST_HELP[name]} (default {default})")
    p.add_argument("-pg", dest="pg", action=_Listed, metavar="PP,TG",
                   help="a test of PP prompt tokens, then TG generated; its t/s counts both "
                   "(llama-bench's pp512+tg128); repeat for more pairs")
    p.add_argument("--chat", action="store_true",
                   help="through the engine's chat endpoint and the model's template "
                   "(thinking tokens counted apart)")
    p.add_argument("--draft", metavar="PATH|self|small",
                   help="also run a speculative A/B per generating test with this draft")
    p.add_argument("-r", "--repetitions", action=_Spelled, default=None, metavar="N|MIN-MAX",
                   help="measured repetitions per test: N exactly, as llama-bench's -r, or "
                   "MIN-MAX: adaptive, until the decode interval is within --target-interval "
                   "(default 3-10; a pp test, with no decode to judge, runs MIN)")
    p.add_argument("--target-interval", action=_Spelled, metavar="F",
                   help="adaptive: stop once the 95%% interval of the mean decode is within "
                   "+/- this fraction (default 0.02)")
    p.add_argument("--max-cv", action=_Spelled, metavar="F",
                   help="a tg or pg test whose decode varies more than this (coefficient of "
                   "variation over its repetitions) is 'unstable', never 'pass' (default 0.05)")
    p.add_argument("--warmup", action=_Spelled, default="1", metavar="N",
                   help="discarded warm-up runs per test (default 1)")
    p.add_argument("--no-warmup", dest="warmup", action="store_const", const="0",
                   help="no warm-up runs (--warmup 0)")
    p.add_argument("-o", "--output", choices=FORMS, metavar="md|csv|json|jsonl|sql",
                   help="print llama-bench's form instead of the summary: md (a GitHub "
                   "table), csv, json, jsonl, sql (llama-bench's CREATE TABLE llama_bench "
                   "and INSERTs, tokperf's fields in tokperf_bench beside it: for sqlite3 "
                   "and compare-llama-bench.py); the fields llama-bench of the measured "
                   "release writes, then tokperf's (ceiling, efficiency, busy/unstable)")
    p.add_argument("--columns", action=_Spelled, metavar="N",
                   help="width of the summary table (default: the terminal's; 120 where "
                   "the output is not a terminal)")


def _engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", action=_Spelled, default="llama-server", help="engine to measure")
    p.add_argument("--url", action=_Spelled,
                   help="attach to an engine running at URL instead of starting one")
    p.add_argument("--speculative-url", action=_Spelled, metavar="URL",
                   help="with --url and --draft: a second running server that drafts")
    p.add_argument("-m", "--model", action=_Listed, metavar="MODEL[,MODEL...]",
                   help="GGUF for a started server, or 'main' / 'test' (generated); "
                   "several: one server each (default main)")
    for name, (short, _) in GRID.items():
        long, metavar, what = _GRID_HELP[name]
        p.add_argument(short, long, dest=name, action=_Listed, metavar=metavar, help=what)
    p.add_argument("--server-bin", action=_Spelled, metavar="PATH",
                   help="llama-server binary to run")
    p.add_argument("--bandwidth", action=_Spelled, metavar="BW",
                   help="bandwidth for the ceiling, e.g. 1008GB/s")
    p.add_argument("--device", action=_Spelled, metavar="DEVICE",
                   help="where the engine runs, for the ceiling: "
                   "cpu, cuda:N, metal, rocm:N, vulkan:N (default: what the engine reports)")
    p.add_argument("--min-efficiency", action=_Spelled, metavar="F",
                   help="fail decode below this fraction of the ceiling (tg and pg tests)")
    p.add_argument("--db", action=_Spelled, metavar="PATH", help=f"{DB_HELP}; 'off' writes nothing")
    p.add_argument("--busy", action=_Spelled, choices=BUSY_OUTCOMES, help=BUSY_HELP)
    p.add_argument("--busy-wait", action=_Spelled, metavar="S",
                   help="a test measured busy waits up to S seconds for a quiet window and "
                   "is measured once more (default 30; 0: never)")
