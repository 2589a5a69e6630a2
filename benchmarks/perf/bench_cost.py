"""What the tool itself costs, side by side in one run (issue 17).

    .venv/bin/python benchmarks/perf/bench_cost.py [--only probe,client,overhead,adaptive,main]
                                              [--main-runs 1] [--rounds 5]

Sections, each printed as it finishes:

1. **probe**: the read probe at several budgets against a long reference probe, on one
   buffer set up once (its set-up time printed apart), interleaved round by round:
   per budget the wall time, and the short probe's figure over the reference's of the
   same round (median and spread); the old probe (a fresh buffer, 2 s) beside it.
2. **client**: ``benchmarks/perf/bench_client.py``'s table (our streaming path against bare
   loops over the same bytes, 128 and 2048 tokens, 1 and 16 streams, fake server CPU).
3. **overhead**: the plugin's own time per ``tok_bench`` call (call time minus time inside
   ``generate``) against an in-process engine that answers at once, 5 repetitions:
   results DB off, on (empty), on with 25 earlier runs of the series (the gate judges
   them), and the same with the CPU read probes a CPU engine gets.
4. **adaptive**: on the default model ('main', llama-server, all cores), time and
   repetitions to a +/-2% decode interval (the default) against a fixed 5, interleaved;
   then runs of 10 repetitions replayed through both rules (where the adaptive rule
   would have stopped, and the interval the first 5 give): the same data, so the host's
   drift between calls does not decide the comparison.
5. **main**: the main job (``pytest benchmarks --tokperf-engine llama-server``) run with
   this file as a plugin (``-p bench_cost``) that clocks every ``generate`` and probe:
   the share of wall time spent generating, and each row's efficiency.

No figure here is asserted; on a shared 2-core VM read medians and ratios, not single
values.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLOCK_ENV = "TOKPERF_COST_CLOCK"
"""Where the plugin half of this file writes what it clocked (a JSON file)."""


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# -- 1. the probe -----------------------------------------------------------------------


def probe_section(rounds: int, budgets: tuple[float, ...], reference_s: float) -> None:
    from pytest_tokperf.hardware.probe import ReadProbe, probe_read_bandwidth

    print(f"\n== 1. read probe: budgets vs a {reference_s:.0f} s reference, {rounds} "
          f"interleaved rounds ==", flush=True)
    old_walls, old_figures = [], []
    walls: dict[float, list[float]] = {b: [] for b in budgets}
    ratios: dict[float, list[float]] = {b: [] for b in budgets}
    references = []
    with ReadProbe() as probe:
        setup = probe.prepare()
        print(f"one buffer of {probe.buffer_bytes / 2**20:.0f} MiB, {probe.threads} threads: "
              f"set up once in {setup:.2f} s (outside every probe)")
        rng = random.Random(17)
        for _ in range(rounds):
            reference = probe.measure(reference_s, passes=15).bandwidth.bytes_per_s
            references.append(reference)
            order = list(budgets)
            rng.shuffle(order)
            for budget in order:
                start = time.perf_counter()
                figure = probe.measure(budget).bandwidth.bytes_per_s
                walls[budget].append(time.perf_counter() - start)
                ratios[budget].append(figure / reference)
            start = time.perf_counter()
            old = probe_read_bandwidth(duration_s=2.0)  # what every probe was before
            old_walls.append(time.perf_counter() - start)
            old_figures.append(old.bandwidth.bytes_per_s / reference)
    print(f"reference figures: {', '.join(f'{r / 1e9:.1f}' for r in references)} GB/s")
    print(f"{'probe':<28}{'wall s':>8}{'vs reference (median)':>24}{'spread (min..max)':>22}")
    for budget in budgets:
        r = ratios[budget]
        print(f"{f'{budget:.2f} s budget, one buffer':<28}{_median(walls[budget]):>8.2f}"
              f"{_median(r):>24.1%}{f'{min(r):.0%}..{max(r):.0%}':>22}")
    print(f"{'old: fresh buffer, 2 s':<28}{_median(old_walls):>8.2f}"
          f"{_median(old_figures):>24.1%}"
          f"{f'{min(old_figures):.0%}..{max(old_figures):.0%}':>22}")
    print("vs reference: the probe's best pass over the reference probe's best of the same "
          "round (the host drifts between them, so 100% is not the only right answer)")


# -- 2. the client ----------------------------------------------------------------------


def client_section(rounds: int) -> None:
    import bench_client

    print("\n== 2. client capacity vs bare loops (benchmarks/perf/bench_client.py) ==", flush=True)
    server = subprocess.Popen([sys.executable, bench_client.__file__, "--serve"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        bench_client.report(url, server.pid, argparse.Namespace(
            tokens="128,2048", streams="1,16", rounds=rounds))
    finally:
        server.kill()
        server.wait()


# -- 3. the plugin's own cost per call --------------------------------------------------


class InstantEngine:
    """Answers every request at once with a recorded 128-token generation."""

    name = "instant"

    def __init__(self, base_url: str, model_path: Path) -> None:
        from pytest_tokperf.results import EngineInfo

        self.base_url = base_url
        self.model_path = model_path
        self.generate_s = 0.0
        self._info = EngineInfo(name="instant", version="b1", build="b1", base_url=base_url,
                                backend="cpu", model_path=str(model_path), threads=2)

    def ready(self) -> bool:
        return True

    def info(self) -> Any:
        return self._info

    def generate(self, request: Any) -> Any:
        from pytest_tokperf.results import EngineTimings, Generation

        start = time.perf_counter()
        n = request.generate_tokens
        rate = 30.0 * random.gauss(1.0, 0.005)
        times = tuple(0.3 + i / rate for i in range(n))
        generation = Generation(
            request=request, sent_s=0.0, chunk_times_s=times, chunk_tokens=(1,) * n,
            generated_tokens=n, prompt_tokens=request.prompt_tokens, text=" word" * n,
            stop_reason="limit",
            engine=EngineTimings(prompt_tokens=request.prompt_tokens, cached_prompt_tokens=0,
                                 prefill_s=0.29, generated_tokens=n, decode_s=(n - 1) / rate))
        self.generate_s += time.perf_counter() - start
        return generation

    def close(self) -> None:
        pass


def _overhead_run(db: Path | None, model: Path, probes: bool,
                  engines: list[InstantEngine]) -> Any:
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.engines.registry import EngineRegistry
    from pytest_tokperf.settings import resolve

    cli = {"engine": "instant", "url": "http://127.0.0.1:9", "model": str(model),
           "db": str(db) if db else "off", "repetitions": "5",
           "threads": "2", **({} if probes else {"bandwidth": "50GB/s"})}
    settings = resolve(cli=cli.get, ini=lambda _: None,
                       env={"PYTEST_TOKPERF_BANDWIDTH_FILE": "off"}, rootdir=Path.cwd(),
                       engine_names=None)
    registry = EngineRegistry()

    def make(config: Any) -> Any:
        engine = InstantEngine(config.base_url, model)
        engines.append(engine)
        return engine

    registry.register("instant", make)
    return BenchRun.open(settings, log_dir=Path(tempfile.mkdtemp()), registry=registry)


def overhead_section(calls: int) -> None:
    from pytest_tokperf.model.writer import TEST_MODEL, cached_model

    print(f"\n== 3. plugin overhead per tok_bench call (64/128, 1 warm-up + 5 repetitions, "
          f"an engine that answers at once; median of {calls} calls) ==", flush=True)
    model = cached_model(TEST_MODEL)
    folder = Path(tempfile.mkdtemp(prefix="tokperf-cost-"))
    history_db = folder / "history.db"
    for i in range(25):  # 25 earlier runs of the same series
        engines: list[InstantEngine] = []
        run = _overhead_run(history_db, model, False, engines)
        try:
            run.tok_bench("benchmarks/test_cost.py::test_decode")(64, 128)
        finally:
            run.close()
    scenarios = (("DB off", None, False), ("DB on, empty", folder / "empty.db", False),
                 ("DB on, 25 runs of history", history_db, False),
                 ("DB on, 25 runs, CPU probes", history_db, True))
    print(f"{'scenario':<30}{'overhead ms/call':>18}{'of which: gate+store ms':>26}")
    for label, db, probes in scenarios:
        engines = []
        run = _overhead_run(db, model, probes, engines)
        try:
            bench = run.tok_bench("benchmarks/test_cost.py::test_decode")
            bench(64, 128)  # first call: engine, GGUF parse, probe buffer (once per session)
            costs, records = [], []
            record = run.record

            def timed_record(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return record(*args, **kwargs)
                finally:
                    records.append(time.perf_counter() - start)

            run.record = timed_record  # type: ignore[method-assign]
            for _ in range(calls):
                engine = engines[-1]
                before = engine.generate_s
                start = time.perf_counter()
                bench(64, 128)
                costs.append(time.perf_counter() - start - (engine.generate_s - before))
        finally:
            run.close()
        print(f"{label:<30}{_median(costs) * 1e3:>18.1f}{_median(records) * 1e3:>26.1f}",
              flush=True)
    print("overhead: a tok_bench call's wall time minus the time inside generate (building "
          "requests, samples, the summary, the ceiling, storing, the gate, probes)")


# -- 4. adaptive repetitions vs a fixed 5 -----------------------------------------------


def adaptive_section(rounds: int, model: str) -> None:
    from pytest_tokperf.bench.measure import decode_interval
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.results import judged_decode_values
    from pytest_tokperf.settings import resolve

    print(f"\n== 4. time to a +/-2% decode interval vs fixed 5 repetitions ('{model}' model, "
          f"llama-server, 64/128; {rounds} interleaved rounds) ==", flush=True)
    cli = {"engine": "llama-server", "model": model, "db": "off", "bandwidth": "50GB/s"}
    settings = resolve(cli=cli.get, ini=lambda _: None, env=os.environ, rootdir=Path.cwd())
    run = BenchRun.open(settings, log_dir=Path(tempfile.mkdtemp()))
    rows: dict[str, list[tuple[float, int, float, float]]] = {"adaptive": [], "fixed 5": []}
    try:
        bench = run.tok_bench("benchmarks/perf/bench_cost.py::adaptive")
        bench(64, 16, repetitions=1, warmup=0)  # start the server outside the clock
        for index in range(rounds):
            order = ("adaptive", "fixed 5") if index % 2 == 0 else ("fixed 5", "adaptive")
            for policy in order:
                start = time.perf_counter()
                outcome = bench(64, 128, repetitions=None if policy == "adaptive" else 5)
                wall = time.perf_counter() - start
                rows[policy].append((wall, len(outcome.result.samples),
                                     outcome.decode_interval or float("nan"),
                                     outcome.decode_cv or float("nan")))
                print(f"  round {index + 1} {policy:<9} {wall:6.1f} s, "
                      f"{len(outcome.result.samples):2d} reps, +/-{rows[policy][-1][2]:.1%}, "
                      f"CV {rows[policy][-1][3]:.1%}", flush=True)
        replays = []
        for index in range(rounds):  # the same repetitions, judged by both rules
            outcome = bench(64, 128, repetitions=10)
            values = judged_decode_values(outcome.result.samples)
            stop = next((n for n in range(3, len(values) + 1)
                         if (decode_interval(values[:n]) or 1.0) <= 0.02), len(values))
            replays.append((stop, decode_interval(values[:stop]) or float("nan"),
                            decode_interval(values[:5]) or float("nan"),
                            statistics.stdev(values[:5]) / statistics.fmean(values[:5])))
            print(f"  replay {index + 1}: 10 repetitions, the first 5 at CV {replays[-1][3]:.1%}: "
                  f"the adaptive "
                  f"rule stops at {stop} (+/-{replays[-1][1]:.1%}); the first 5 give "
                  f"+/-{replays[-1][2]:.1%}", flush=True)
    finally:
        run.close()
    quiet = [r for r in replays if r[3] <= 0.02]
    print(f"replayed on the same repetitions: the adaptive rule stopped at "
          f"{', '.join(str(r[0]) for r in replays)} repetitions; on the quiet ones (first 5 at "
          f"CV <= 2%: "
          f"{len(quiet)} of {len(replays)}) at a median {_median([float(r[0]) for r in quiet]):.0f} "
          f"against fixed 5, for +/-{_median([r[1] for r in quiet]):.1%} vs "
          f"+/-{_median([r[2] for r in quiet]):.1%}")
    print(f"{'policy':<10}{'wall s':>8}{'reps':>6}{'interval':>10}{'CV':>8}"
          f"{'reached +/-2%':>15}")
    for policy, got in rows.items():
        reached = sum(1 for r in got if r[2] <= 0.02)
        print(f"{policy:<10}{_median([r[0] for r in got]):>8.1f}"
              f"{_median([float(r[1]) for r in got]):>6.0f}"
              f"{_median([r[2] for r in got]):>10.1%}{_median([r[3] for r in got]):>8.1%}"
              f"{f'{reached} of {len(got)}':>15}")
    print("interval: 95% interval of the mean judged (engine) decode, relative; reps: measured "
          "repetitions after 1 warm-up")


# -- 5. the main job's share of time spent generating ------------------------------------


def main_section(runs: int, extra: list[str]) -> None:
    print(f"\n== 5. the main job: share of wall time spent generating ({runs} run(s)) ==",
          flush=True)
    print(f"{'run':<5}{'wall s':>8}{'generate s':>12}{'share':>8}{'probe s':>9}{'share':>8}"
          f"{'rows':>6}{'max eff':>9}{'unstable':>10}")
    for index in range(runs):
        out = Path(tempfile.mkdtemp(prefix="tokperf-cost-")) / "clock.json"
        env = {**os.environ, CLOCK_ENV: str(out),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE),
                                                          os.environ.get("PYTHONPATH")]))}
        command = [sys.executable, "-m", "pytest", "benchmarks", "--tokperf-engine",
                   "llama-server", "-p", "bench_cost", "-q", *extra]
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if not out.is_file():
            print(proc.stdout[-3000:], proc.stderr[-3000:])
            raise SystemExit(f"the main job wrote no clock (exit {proc.returncode})")
        clock = json.loads(out.read_text())
        effs = [e for e in clock["efficiencies"] if e is not None]
        print(f"{index + 1:<5}{wall:>8.1f}{clock['generate_s']:>12.1f}"
              f"{clock['generate_s'] / wall:>8.1%}{clock['probe_s']:>9.1f}"
              f"{clock['probe_s'] / wall:>8.1%}{len(clock['efficiencies']):>6}"
              f"{max(effs, default=float('nan')):>9.0%}{clock['verdicts'].count('unstable'):>10}"
              f"  (exit {proc.returncode})", flush=True)
        for line in clock["rows"]:
            print(f"      {line}")
    print("wall: the whole pytest process (start-up, collection, server start, reports); "
          "generate: time inside every generate call (warm-ups, primes, both servers of the "
          "speculative A/B); probe: the read probes around measurements")


# -- the plugin half: `-p bench_cost` clocks a pytest session ---------------------------

_CLOCK: dict[str, float] = {"generate_s": 0.0, "probe_s": 0.0}


def _clocked(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            _CLOCK[name] += time.perf_counter() - start

    return wrapper


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(CLOCK_ENV):
        return
    from pytest_tokperf.bench.ceilings import CeilingSource
    from pytest_tokperf.engines.llama_server.adapter import LlamaServer

    LlamaServer.generate = _clocked(LlamaServer.generate, "generate_s")  # type: ignore[method-assign]
    CeilingSource.probe = _clocked(CeilingSource.probe, "probe_s")  # type: ignore[method-assign]


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(CLOCK_ENV)
    if not path:
        return
    from pytest_tokperf.plugin import STATE

    state = config.stash.get(STATE, None)
    recorded = state.recorded if state is not None else []
    rows = [f"{r.test_id.split('::')[-1]:<42} n={len(r.result.samples):<2} "
            f"eff={'-' if r.efficiency is None else f'{r.efficiency:.0%}':<5} {r.verdict}"
            for r in recorded]
    Path(path).write_text(json.dumps({
        **_CLOCK, "efficiencies": [r.efficiency for r in recorded],
        "verdicts": [r.verdict for r in recorded], "rows": rows}))


# -- the command --------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="probe,client,overhead,adaptive,main")
    parser.add_argument("--rounds", type=int, default=5, help="probe and client rounds")
    parser.add_argument("--budgets", default="0.1,0.25,0.5,1.0")
    parser.add_argument("--reference", type=float, default=4.0, help="reference probe, s")
    parser.add_argument("--calls", type=int, default=15, help="tok_bench calls per scenario")
    parser.add_argument("--adaptive-rounds", type=int, default=3)
    parser.add_argument("--model", default="main", help="model of the adaptive section")
    parser.add_argument("--main-runs", type=int, default=1)
    parser.add_argument("--main-arg", action="append", default=[],
                        help="extra argument for the main job (repeatable)")
    args = parser.parse_args()
    sections = set(args.only.split(","))
    sys.path.insert(0, str(HERE))
    print(f"bench_cost: {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    if "probe" in sections:
        probe_section(args.rounds, tuple(float(b) for b in args.budgets.split(",")),
                      args.reference)
    if "client" in sections:
        client_section(args.rounds)
    if "overhead" in sections:
        overhead_section(args.calls)
    if "adaptive" in sections:
        adaptive_section(args.adaptive_rounds, args.model)
    if "main" in sections:
        main_section(args.main_runs, args.main_arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
