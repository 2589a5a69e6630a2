"""``tokperf bench``: llama-bench's job over HTTP, without pytest.

llama-bench's tests (``-p`` prompt only, ``-n`` generation only, ``-pg PP,TG`` both, at
each ``-d`` depth) on every server configuration of its grid (``-m``, ``-t``, ``-ngl``,
``-fa``, ``-ctk``/``-ctv``, ``-b``/``-ub``; ``cli.bench_grid``), each with its ceiling,
through the same ``BenchRun`` the plugin holds: one llama-server per configuration,
restarted only where its arguments change (``cli.bench_loop``). Each result is stored as
it finishes; the summary, tokperf's JSON or llama-bench's forms (``-o``,
``cli.bench_output``) print at the end. Errors name the bench's own options (``--url``,
``-r``), as typed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tokperf.cli.bench_grid import (
    FLASH_ATTN,
    KV_TYPES,
    PP_GENERATE_TOKENS,
    BenchPlan,
    ServerPoint,
    bench_tests,
    parse_numbers,
    parse_pairs,
    parse_words,
    server_points,
)
from pytest_tokperf.cli.bench_loop import Outcome, measure
from pytest_tokperf.cli.bench_output import FORMS, render
from pytest_tokperf.cli.common import DB_HELP, JSON
from pytest_tokperf.errors import ConfigError, EngineUnavailable, TokperfError
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.settings import BUILTIN_MODELS
from pytest_tokperf.storage.location import TOKPERF_DIR, project_root

if TYPE_CHECKING:
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.settings import Settings

_LISTS = (("prompt", "-p", "prompt-only (pp) tests of N tokens; 0: none", "64", 0),
          ("generate", "-n", "generation-only (tg) tests of N tokens; 0: none", "128", 0),
          ("depth", "-d", "KV depth (tokens of context) before every test; a pp/pg figure "
           "counts its prefill too unless --warm primes it", "0", 0),
          ("concurrency", "-c", "concurrent streams", "1", 1),
          ("warm", None, "cached prefix tokens primed before each pp/pg request (0 = cold)",
           "0", 0))
_GRID = (("threads", "-t", "--threads", "N[,N...]", "engine threads (default: all cores)"),
         ("gpu_layers", "-ngl", "--n-gpu-layers", "N[,N...]",
          "layers on the GPU (-1: all) (default: llama-server's)"),
         ("flash_attn", "-fa", "--flash-attn", "on|off|auto[,...]",
          "flash attention; 1/0/-1 as llama-bench (default: llama-server's, auto)"),
         ("type_k", "-ctk", "--cache-type-k", "TYPE[,TYPE...]",
          f"K cache type: {', '.join(KV_TYPES)} (default f16)"),
         ("type_v", "-ctv", "--cache-type-v", "TYPE[,TYPE...]", "V cache type (default f16)"),
         ("batch", "-b", "--batch-size", "N[,N...]", "logical batch size (default 2048)"),
         ("ubatch", "-ub", "--ubatch-size", "N[,N...]", "physical batch size (default 512)"))
_SERVER_ONLY = ("gpu_layers", "flash_attn", "type_k", "type_v", "batch", "ubatch")
"""Grid options that are llama-server arguments: a started llama-server only."""
_FLAGS = {"engine": "--engine", "url": "--url", "model": "-m", "threads": "-t",
          "server_bin": "--server-bin", "bandwidth": "--bandwidth", "db": "--db",
          "device": "--device", "min_efficiency": "--min-efficiency", "draft_model": "--draft",
          "speculative_url": "--speculative-url", "repetitions": "-r",
          "warmup": "--warmup", "target_interval": "--target-interval", "columns": "--columns"}
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


def _listed(*args: Any, **kwargs: Any) -> Any:
    return _Spelled(*args, append=True, **kwargs)


def add_parser(verbs: Any) -> None:
    p = verbs.add_parser(
        "bench", parents=[JSON], help="measure workloads on an engine without pytest (like llama-bench)",
        description="Run llama-bench's tests over HTTP: prompt-only (-p), generation-only (-n) "
        "and prompt-then-generation (-pg PP,TG) tests at each depth (-d), on every "
        "combination of the server options (-m, -t, -ngl, -fa, -ctk, -ctv, -b, -ub), "
        "each with the decode ceiling. Lists are comma-separated or ranges (first-last, "
        "first-last+step, first-last*mult), or the option given again. llama-server is "
        "started once per server configuration (or attached with --url); results go to the "
        "results DB as they finish. Exit 1 when a test fails or misses --min-efficiency, 2 "
        "when an engine cannot be started or reached.")
    for name, short, what, default, _ in _LISTS:
        flags = [short, f"--{name}"] if short else [f"--{name}"]
        p.add_argument(*flags, action=_listed, metavar="N[,N...]",
                       help=f"{what} (default {default})")
    p.add_argument("-pg", dest="pg", action=_listed, metavar="PP,TG",
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
    p.add_argument("--warmup", action=_Spelled, default="1", metavar="N",
                   help="discarded warm-up runs per test (default 1)")
    p.add_argument("--no-warmup", dest="warmup", action="store_const", const="0",
                   help="no warm-up runs (--warmup 0)")
    p.add_argument("-o", "--output", choices=FORMS, metavar="md|csv|json|jsonl|sql",
                   help="print llama-bench's form instead of the summary: md (a GitHub "
                   "table), csv, json, jsonl, sql (CREATE TABLE llama_bench + INSERTs, for "
                   "sqlite3 and compare-llama-bench.py); llama-bench's fields, then "
                   "tokperf's (ceiling, efficiency, ttft)")
    p.add_argument("--columns", action=_Spelled, metavar="N",
                   help="width of the summary table (default 120)")
    p.add_argument("--engine", action=_Spelled, default="llama-server", help="engine to measure")
    p.add_argument("--url", action=_Spelled,
                   help="attach to an engine running at URL instead of starting one")
    p.add_argument("--speculative-url", action=_Spelled, metavar="URL",
                   help="with --url and --draft: a second running server that drafts")
    p.add_argument("-m", "--model", action=_listed, metavar="MODEL[,MODEL...]",
                   help="GGUF for a started server, or 'main' / 'test' (generated); "
                   "several: one server each (default main)")
    for dest, short, long, metavar, what in _GRID:
        p.add_argument(short, long, dest=dest, action=_listed, metavar=metavar, help=what)
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
    p.set_defaults(func=bench, spelled={})


def _flag(args: argparse.Namespace, dest: str, default: str) -> str:
    return str(args.spelled.get(dest) or default)


def plan(args: argparse.Namespace) -> BenchPlan:
    """The grid and the tests from the options, every list checked (no engine needed)."""
    lists = {name: parse_numbers(getattr(args, name) or [default], _flag(args, name, short or
                                 f"--{name}"), minimum)
             for name, short, _, default, minimum in _LISTS}
    if any(0 < n < PP_GENERATE_TOKENS for n in lists["generate"]):
        raise ConfigError(f"{_flag(args, 'generate', '-n')} {','.join(args.generate)!r}: a "
                          f"generation test needs at least {PP_GENERATE_TOKENS} tokens "
                          f"(decode is timed between tokens); 0 asks for none")
    pairs = parse_pairs(args.pg or [])
    tests = bench_tests(lists["prompt"], lists["generate"], pairs, lists["depth"],
                        lists["concurrency"], lists["warm"], args.chat)
    if not tests:
        raise ConfigError("nothing to measure: -p and -n are 0 and no -pg is given; give a "
                          "prompt (-p 512), a generation (-n 128) or a pair (-pg 512,128)")
    for test in tests:
        if test.warm and test.warm >= test.n_depth + test.prompt_tokens:
            raise ConfigError(f"--warm {test.warm} is not below {test.name}'s depth + prompt "
                              f"({test.n_depth + test.prompt_tokens}): a warm test needs new "
                              f"tokens after the cached prefix; lower --warm or raise -p/-d")
    grid: dict[str, list[Any]] = {}
    for dest, short, _, _, _ in _GRID:
        flag, given = _flag(args, dest, short), getattr(args, dest)
        if not given:
            grid[dest] = [None]
        elif dest == "flash_attn":
            grid[dest] = [FLASH_ATTN[w] for w in parse_words(given, flag, tuple(FLASH_ATTN),
                                                               "on, off, auto (1, 0, -1)")]
        elif dest in ("type_k", "type_v"):
            grid[dest] = parse_words(given, flag, KV_TYPES)
        else:
            grid[dest] = parse_numbers(given, flag, -1 if dest == "gpu_layers" else 1)
    models = [m.strip() for text in (args.model or ["main"]) for m in text.split(",")
              if m.strip()] or ["main"]
    points = server_points(models, **grid)
    asked = frozenset({"threads": "n_threads", "gpu_layers": "n_gpu_layers",
                       "flash_attn": "flash_attn", "type_k": "type_k", "type_v": "type_v",
                       "batch": "n_batch", "ubatch": "n_ubatch"}[d]
                      for d, _, _, _, _ in _GRID if getattr(args, d))
    asked |= {"concurrency"} if args.concurrency else frozenset()
    asked |= {"cached_prefix_tokens"} if args.warm else frozenset()
    _check_attached(args, points)
    return BenchPlan(tuple(points), tuple(tests), asked)


def _check_attached(args: argparse.Namespace, points: list[ServerPoint]) -> None:
    """An attached engine's configuration is its own; a grid needs a started llama-server."""
    server_args = [f"{_flag(args, d, s)} {','.join(getattr(args, d))}"
                   for d, s, _, _, _ in _GRID if d in _SERVER_ONLY and getattr(args, d)]
    if args.engine != "llama-server" and server_args:
        raise ConfigError(f"{' '.join(server_args)}: llama-server's arguments, and --engine "
                          f"is {args.engine!r}; drop them")
    grid = [*server_args]
    if len({p.threads for p in points}) > 1:
        grid.append(f"{_flag(args, 'threads', '-t')} {','.join(args.threads)}")
    if len({p.model for p in points}) > 1:
        grid.append(f"{_flag(args, 'model', '-m')} {','.join(args.model)}")
    if args.url and grid:
        raise ConfigError(f"{' '.join(grid)}: {_flag(args, 'url', '--url')} attaches to a "
                          f"running engine, whose configuration tokperf cannot change; drop "
                          f"--url to let tokperf start llama-server for each configuration")


def bench_settings(args: argparse.Namespace, point: ServerPoint | None = None,
                   bench_plan: BenchPlan | None = None) -> Settings:
    """The plugin's settings for one server configuration (default: the grid's first)
    from ``tokperf bench``'s arguments: the same resolution (CLI, then PYTEST_TOKPERF_*
    environment, then defaults), so repetitions are adaptive unless ``-r`` fixes them,
    as with ``pytest --tokperf-engine``."""
    from pytest_tokperf import settings as settings_mod

    chosen = bench_plan or plan(args)
    point = point or chosen.points[0]
    cli = {name: getattr(args, _DEST.get(name, name)) for name in _FLAGS}
    cli.update(model=point.model, threads=None if point.threads is None else str(point.threads),
               parallel=str(max(t.concurrency for t in chosen.tests)),
               ctx_size=str(chosen.context_tokens))
    flags = {name: args.spelled.get(_DEST.get(name, name)) or flag
             for name, flag in _FLAGS.items()}
    return settings_mod.resolve(cli=cli.get, ini=lambda _: None, env=os.environ,
                                rootdir=Path.cwd(), server_args=point.server_args(),
                                flags=flags,
                                warn=lambda message: print(f"tokperf: {message}", file=sys.stderr))


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
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.bench.session import check_model_file

    if args.json and args.output:
        raise ConfigError(f"--json and {_flag(args, 'output', '-o')} {args.output} both choose "
                          f"the output; give one")
    chosen = plan(args)
    settings = [bench_settings(args, point, chosen) for point in chosen.points]
    for model in dict.fromkeys(p.model for p in chosen.points):
        if model not in BUILTIN_MODELS and args.url is None:
            check_model_file(Path(model).expanduser(), source=f"--tokperf-model {model!r}")

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
        try:
            run.finish()
            if outcome.rows or not outcome.broken:
                _print(args, run, chosen, outcome)
        finally:
            lost = run.close()
            if lost:
                print(lost, file=sys.stderr)
                outcome.failures.append(lost)
    if outcome.interrupted:
        return 130
    if outcome.broken and not outcome.rows:
        raise _broken_error(outcome.broken)
    return 2 if outcome.broken else 1 if outcome.failures else 0


def _broken_error(broken: list[str]) -> TokperfError:
    return EngineUnavailable("; ".join(dict.fromkeys(broken)))


def _print(args: argparse.Namespace, run: BenchRun, chosen: BenchPlan, outcome: Outcome
           ) -> None:
    from pytest_tokperf.bench.gate import describe
    from pytest_tokperf.report.table import session_rows, summary_table

    location = run.recorder.location
    failed = [*outcome.broken, *outcome.failures]
    if args.json:
        from pytest_tokperf.report.formats import result_json
        from pytest_tokperf.report.report_data import figures_from_result

        results = []
        for row in outcome.rows:
            r = row.recorded
            fig = figures_from_result(r.test_id, r.result, ceiling=r.ceiling, verdict=r.verdict,
                                      series_key=row.series_key, model=row.model,
                                      hardware=run.ceilings.hardware, run_id=row.run_id,
                                      created_at=row.created_at)
            results.append({**result_json(fig), "test": row.test.name,
                            "result_id": r.result_id, "notes": list(r.result.notes)})
        print(dumps({"results": results, "failures": failed,
                     "gate": [describe(f) for f in run.findings],
                     "gate_summary": run.gate_summary,
                     "db": str(location) if location else None}))
        return
    aside = sys.stderr if args.output else sys.stdout  # stdout holds only the chosen form
    if args.output:
        for line in render(args.output, outcome.rows, chosen.asked):
            print(line)
    else:
        rows = session_rows(run.recorded, run.findings)
        for line in summary_table(rows, columns=run.settings.columns, option="--columns 250"):
            print(line)
    gated = [f for f in run.findings if f.comparison.n_baseline > 0]
    if gated:
        print(f"gate against {run.settings.baseline.label}: {run.gate_summary}", file=aside)
    for finding in gated:
        print(f"  {describe(finding)}", file=aside)
    print(f"results: {len(run.recorded)} stored in {location}" if location
          else "results: not stored (--db off)", file=aside)
    for failure in failed:
        print(f"FAILED {failure}", file=sys.stderr)
