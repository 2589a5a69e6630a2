"""``tokperf compare-builds`` on the same-run A/B: both builds up at once, ABBA pairs.

Each session is one pytest run with build B as the candidate and build A as the control
(``--tokperf-server-bin B --tokperf-ab-engine A --tokperf-ab-json FILE``). Sessions are
the server starts of ``stats.paired``: several are pooled, each allowed a level of its
own (``start_sd``, or their own spread where larger); with one, the pairs are the unit.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_tokperf.builds.identity import build_changes
from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.specs import Build
from pytest_tokperf.errors import ConfigError, EngineError
from pytest_tokperf.results import Progress
from pytest_tokperf.safe_files import safe_name, tail_text
from pytest_tokperf.stats.metric import (
    DECODE,
    DEFAULT_ALPHA,
    PREFILL,
    START_SD,
    TTFT,
    WINDOW_SD,
    Metric,
)
from pytest_tokperf.stats.paired import (
    PAIRED_MIN_EFFECT,
    Pairs,
    judge_ab,
    judge_windows,
)
from pytest_tokperf.stats.verdict import Comparison
from pytest_tokperf.versions.session_progress import (
    SessionMeter,
    ab_budget_of,
    run_watched,
)
from pytest_tokperf.versions.sessions import BuildRunner

_METRICS = {m.name: m for m in (DECODE, PREFILL, TTFT)}
START_CAP = 10_000
"""Server starts one session may hold: a pair's start across sessions is ``session *
START_CAP + start``."""


@dataclass(frozen=True, slots=True)
class PairedBuildComparison:
    """One test's metric on two builds, judged from its pairs."""

    test_id: str
    workload: str
    metric: str
    median_a: float
    median_b: float
    pairs: int
    starts: int
    """Server starts a side the pairs came from, over every session."""
    comparison: Comparison
    busy: str = ""
    """The machine of the sessions measured busy ("" when none was): such a verdict is a
    reading, not a gate's (``compare-builds --busy``)."""


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """Everything ``compare_builds_paired`` found, with what changed between the builds."""

    a: Build
    b: Build
    changed: str
    results: tuple[PairedBuildComparison, ...]
    documents: tuple[Path, ...]
    wall_s: float
    busy_first: tuple[Path, ...] = ()
    """Sessions measured busy and replaced by one measured after a quiet window."""


QuietWait = Callable[[float], "float | None"]
"""Seconds waited for a quiet window within a budget, None when none came."""


def document_busy(document: Path) -> str:
    """The machine of an A/B document's tests measured busy ("" when none was)."""
    doc = json.loads(document.read_text(encoding="utf-8"))
    return next((str(ab.get("load") or "busy") for ab in doc.get("ab", []) if ab.get("busy")), "")


def again_if_busy(measure: Callable[[], Path], what: str, busy_wait: float,
                  progress: Progress, wait_quiet: QuietWait | None = None
                  ) -> tuple[Path, Path | None]:
    """Measure; a session measured busy waits up to ``busy_wait`` s for a quiet window
    (``hardware.load.wait_for_quiet``) and is measured once more. Returns the document
    that stands and the busy one it replaced (None when it was not replaced)."""
    document = measure()
    busy = document_busy(document) if busy_wait > 0 else ""
    if not busy:
        return document, None
    from pytest_tokperf.hardware.load import wait_for_quiet

    progress(f"{what} measured busy ({busy}): waiting up to {busy_wait:g} s for a quiet "
             f"window to measure it again (--busy-wait)")
    with Meter(progress, "waiting for a quiet window", expected_s=busy_wait, bounded=True):
        waited = (wait_quiet or wait_for_quiet)(busy_wait)
    if waited is None:
        progress(f"no quiet window within {busy_wait:g} s: {what} stands as measured busy")
        return document, None
    progress(f"quiet after {waited:.0f} s: measuring {what} again")
    return measure(), document


def run_paired_session(runner: BuildRunner, a: Build, b: Build, number: int) -> Path:
    """One pytest session, B as candidate and A as control; the path of its A/B JSON."""
    runner.log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = safe_name(f"{a.label}-vs-{b.label}")
    document = runner.log_dir / f"ab-{name}-{stamp}-{number}.json"
    if document.exists():  # measured again within the same second: keep the first
        document = document.with_name(f"{document.stem}-again.json")
    log = document.with_suffix(".log")
    command = [*runner.command(b), f"--tokperf-ab-engine={a.binary}",
               f"--tokperf-ab-json={document}"]
    runner.progress(f"A/B session {number}: {a.label} (control) and {b.label} (candidate) ...")
    started = time.monotonic()
    code = run_watched(command, log, runner.session_env(), SessionMeter(
        runner.progress, f"A/B {a.label} -> {b.label}:", log,
        budget_s=ab_budget_of(runner.pytest_args, runner.session_env())))
    tail = [tail_text(log, 1).strip(" =\n")]
    if code not in (0, 1) or not document.is_file():
        raise EngineError(f"the A/B session on {a.label} and {b.label} (exit {code}) "
                          f"wrote no A/B results: {tail[0]}; full output: {log}")
    runner.progress(f"A/B session {number} done in {time.monotonic() - started:.0f} s ({tail[0]})")
    return document


def judge_documents(documents: Sequence[dict[str, Any]], metrics: Sequence[str], *,
                    min_effect: float = PAIRED_MIN_EFFECT, alpha: float = DEFAULT_ALPHA,
                    start_sd: float = START_SD, windows: Sequence[int] | None = None,
                    window_sd: float = WINDOW_SD) -> list[PairedBuildComparison]:
    """Pool each test's pairs over the documents' server starts (each session's starts;
    their level counted once, ``stats.paired``) and judge them as the session itself
    does: one family per test, every metric its A/B measured (``judge_ab``), so the table
    and the session's own line give the same verdict; ``metrics`` picks the rows shown. A
    test whose only session could stop on its own figures is judged anytime-valid.
    ``windows``, the machine window of each document: documents of several windows are
    judged a window at a time and pooled, each allowed ``window_sd`` (``judge_windows``)."""
    unknown = [m for m in metrics if m not in _METRICS]
    if unknown or not metrics:
        raise ConfigError(f"metric {unknown or list(metrics)!r}: choose from {', '.join(_METRICS)}")
    where = list(windows) if windows is not None else [0] * len(documents)
    if len(where) != len(documents):
        raise ConfigError(f"{len(where)} window labels for {len(documents)} A/B documents")
    Lists = tuple[list[float], list[float], list[int]]
    pooled: dict[tuple[str, str], dict[int, dict[str, Lists]]] = {}
    planned: dict[tuple[str, str], int] = {}
    busy: dict[tuple[str, str], list[str]] = {}
    for session, (doc, window) in enumerate(zip(documents, where, strict=True)):
        for ab in doc.get("ab", []):
            # what was asked, not how many pairs a session measured before it stopped
            # (adaptive, or by its time budget): those sessions are one workload
            shape = {k: v for k, v in ab["workload"].items() if k != "repetitions"}
            key = (str(ab["test_id"]), json.dumps(shape, sort_keys=True))
            planned[key] = max(planned.get(key, 0), int(ab.get("sequential") or 0))
            if ab.get("busy"):
                busy.setdefault(key, []).append(f"session {session + 1}: {ab.get('load') or 'busy'}")
            names = list(ab["metrics"])
            for row in ab["rounds"]:
                for name in names:
                    i = names.index(name)
                    x, y = row["control"][i], row["candidate"][i]
                    if name not in _METRICS or x is None or y is None:
                        continue
                    b, c, blocks = pooled.setdefault(key, {}).setdefault(window, {}).setdefault(
                        name, ([], [], []))
                    b.append(float(x))
                    c.append(float(y))
                    blocks.append(session * START_CAP + int(row.get("start", 0)))
    if not pooled:
        raise ConfigError("no test made a same-run A/B: does the selection call tok_bench?")
    out = []
    for (test_id, workload), by_window in sorted(pooled.items()):
        parts = [{name: Pairs.of(Metric(name, _METRICS[name].higher_is_better, min_effect),
                                 b, c, blocks) for name, (b, c, blocks) in lists.items()}
                 for _, lists in sorted(by_window.items())]
        if len(parts) > 1:
            verdicts = judge_windows(parts, window_sd=window_sd, alpha=alpha)
        else:
            verdicts = judge_ab(parts[0], alpha=alpha, start_sd=start_sd,
                                sequential=planned[(test_id, workload)] if len(documents) == 1
                                else 0)
        for name in metrics:
            if name not in verdicts:
                continue
            b = [x for lists in by_window.values() for x in lists.get(name, ([], [], []))[0]]
            c = [x for lists in by_window.values() for x in lists.get(name, ([], [], []))[1]]
            n = sum(p[name].n for p in parts if name in p)
            starts = sum(p[name].starts for p in parts if name in p)
            out.append(PairedBuildComparison(test_id, _workload_text(workload), name,
                                             statistics.median(b), statistics.median(c),
                                             n, starts, verdicts[name],
                                             "; ".join(busy.get((test_id, workload), []))))
    return out


def _workload_text(workload: str) -> str:
    w = json.loads(workload)
    return f"prompt {w['prompt_tokens']}, gen {w['generate_tokens']}"


def compare_builds_paired(runner: BuildRunner, a: Build, b: Build, sessions: int = 1, *,
                          min_effect: float | None = None, start_sd: float = START_SD,
                          busy_wait: float = 0.0, wait_quiet: QuietWait | None = None
                          ) -> PairedComparison:
    """``sessions`` A/B sessions of the selection (both servers restarted for each), then
    every test's metrics judged from the pooled pairs. A session measured busy is measured
    again after a quiet window within ``busy_wait`` s (``again_if_busy``; 0: never)."""
    if sessions < 1:
        raise ConfigError(f"--rounds {sessions!r}: give at least 1 A/B session")
    started = time.monotonic()
    kept: list[Path] = []
    replaced: list[Path] = []
    with (Meter(runner.progress, "compare-builds:", float(sessions), unit="A/B sessions",
                line_every=1.0) if sessions > 1 else nullcontext()) as meter:
        for n in range(sessions):
            path, busy = again_if_busy(lambda: run_paired_session(runner, a, b, n + 1),
                                       f"A/B session {n + 1}", busy_wait, runner.progress,
                                       wait_quiet)
            kept.append(path)
            replaced += [busy] if busy is not None else []
            if meter is not None:
                meter.update(n + 1.0)
    paths = tuple(kept)
    documents = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    results = judge_documents(documents, runner.metrics,
                              min_effect=PAIRED_MIN_EFFECT if min_effect is None else min_effect,
                              start_sd=start_sd)
    return PairedComparison(a, b, build_changes(a.binary, b.binary), tuple(results), paths,
                            time.monotonic() - started, tuple(replaced))
