"""One pytest selection on several llama-server builds, interleaved, into one results DB.

``tokperf compare-builds --mode sessions`` and ``tokperf bisect`` run ordinary pytest
sessions (``--tokperf-server-bin BUILD --tokperf-db DB --tokperf-baseline off``), one
build per session, alternating (A B A B ...). A journal beside the DB
(``<db>.builds.jsonl``) records which binary (path and SHA-256) and selection each run
measured, so an interrupted comparison or bisect reuses what it has. Per test and metric
the repetitions are judged nested in their sessions (``stats.compare``).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.sdist import file_sha256
from pytest_tokperf.builds.specs import Build
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.errors import ConfigError, EngineError
from pytest_tokperf.jsontext import jsonl_objects
from pytest_tokperf.results import Progress
from pytest_tokperf.safe_files import safe_name, tail_text
from pytest_tokperf.stats.comparing import compare_many
from pytest_tokperf.stats.metric import DECODE, TTFT, Metric
from pytest_tokperf.stats.verdict import Comparison
from pytest_tokperf.storage.location import DbLocation, PgUrl, local_base
from pytest_tokperf.versions.session_progress import SessionMeter, run_watched

METRICS: dict[str, Metric] = {"decode": DECODE, "ttft": TTFT}
RESERVED = ("--tokperf-server-bin", "--tokperf-engine-version", "--tokperf-db", "--tokperf-url",
            "--tokperf-ab-engine", "--tokperf-ab-json")


@dataclass(frozen=True, slots=True)
class Target:
    """One figure of one test: its workload (the series without the engine's settings,
    ``rows.Series.workload_key``, so builds with other defaults still compare) and a metric."""

    series_key: str
    test_id: str
    metric: str

    @property
    def name(self) -> str:
        return f"{self.test_id} [{self.metric}]"


@dataclass(frozen=True, slots=True)
class Session:
    """One pytest session on one build (a line of the journal)."""

    build: str
    selection: str
    run_ids: tuple[str, ...]
    binary: str
    exit_code: int
    seconds: float
    finished_at: str
    binary_sha256: str = ""
    """The binary's content when measured ("" in journals written before it was kept:
    those lines match by label and path)."""
    busy: str = ""
    """The machine, where the session was measured with neighbours busy ("" when quiet)."""


Groups = dict[Target, list[list[float]]]
"""Per target, one list of samples per session."""


def ab_threads() -> int:
    """Engine threads a build session gets unless its selection says: one core left to the
    client and the system (llama.cpp's threads wait for each other, so one taken from
    them stalls every token: at 2 threads on 2 busy cores the A/B's pairs spread 70-140%,
    at 1 thread 10-16%, lab/2026-12-07-ab-starts.md)."""
    return max(1, (os.cpu_count() or 1) - 1)


def selection_key(pytest_args: Sequence[str], metrics: Sequence[str]) -> str:
    """Sessions are reused only for the same pytest arguments and metrics."""
    return hashlib.sha256(json.dumps([list(pytest_args), list(metrics)]).encode()).hexdigest()[:12]


class Journal:
    """``<db>.builds.jsonl``: which build and selection each stored run measured."""

    def __init__(self, db: DbLocation) -> None:
        base = local_base(db)
        self.path = base.with_name(base.name + ".builds.jsonl")
        self._digests: dict[tuple[str, int, int], str] = {}

    def digest(self, binary: Path) -> str:
        """SHA-256 of the binary, hashed once per path, size and mtime."""
        try:
            stat = binary.stat()
        except OSError as exc:
            raise ConfigError(f"llama-server binary {str(binary)!r} cannot be read: "
                              f"{exc.strerror}; build or install it again") from exc
        key = (str(binary), stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            self._digests[key] = file_sha256(binary)
        return self._digests[key]

    def sessions(self, build: Build, selection: str) -> list[Session]:
        """The journalled sessions of this binary (path and content) and selection."""
        found = []
        for data in jsonl_objects(self.path):  # a line cut short by an interruption: passed over
            try:
                session = Session(**{**data, "run_ids": tuple(data["run_ids"])})
            except (ValueError, TypeError, KeyError):
                continue
            if (session.binary, session.selection) != (str(build.binary), selection):
                continue
            if (session.binary_sha256 == self.digest(build.binary) if session.binary_sha256
                    else session.build == build.label):
                found.append(session)
        return found

    def add(self, session: Session) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(asdict(session)) + "\n")


def _run_values(db: DbLocation, run_ids: Sequence[str], metrics: Sequence[str]) -> dict[Target, list[float]]:
    """Each target's samples in these runs, with the regression gate's figures (engine
    decode where every repetition has it, else the client's; client TTFT)."""
    from pytest_tokperf.storage.history import (
        metric_values,  # the gate's rule, one owner
    )
    from pytest_tokperf.storage.rows import Series
    from pytest_tokperf.storage.store import ResultStore

    wanted = set(run_ids)
    out: dict[Target, list[float]] = {}
    with ResultStore.open(db) as store:
        workloads = {key: Series.from_text(text).workload_key for key, text in
                     store.tuples("SELECT series_key, series_text FROM series")}
        for latest in store.latest_per_series():
            for row in store.history(latest.series_key):
                if row.run_id not in wanted:
                    continue
                samples = store.samples(row.result_id)
                for name in metrics:
                    values = metric_values(samples, name)
                    if values:
                        target = Target(workloads[row.series_key], row.test_id, name)
                        out.setdefault(target, []).extend(values)
    return out


class BuildRunner:
    """Runs the selection as pytest sessions on builds, journalled, into ``db``."""

    def __init__(
        self, db: DbLocation, pytest_args: Sequence[str], *, progress: Progress = print,
        metrics: Sequence[str] = ("decode", "ttft"), python: str = sys.executable,
        log_dir: Path | None = None, env: Mapping[str, str] | None = None,
        busy: BusyPolicy = BusyPolicy(),
    ) -> None:
        for arg in pytest_args:
            if arg.split("=", 1)[0] in RESERVED:
                raise ConfigError(
                    f"{arg!r} in the pytest arguments: the build, the results DB and the "
                    f"engine are chosen per session here; drop it"
                )
        unknown = [m for m in metrics if m not in METRICS]
        if unknown or not metrics:
            raise ConfigError(f"metric {unknown or metrics!r}: choose from {', '.join(METRICS)}")
        self.db = db
        self.pytest_args = list(pytest_args)
        self.metrics = tuple(metrics)
        self.selection = selection_key(self.pytest_args, self.metrics)
        self.progress = progress
        self.python = python
        self.log_dir = log_dir or local_base(db).parent / "logs"
        self.env = dict(env or {})
        self.journal = Journal(db)
        self.busy = busy

    def sessions(self, build: Build) -> list[Session]:
        return self.journal.sessions(build, self.selection)

    def ensure(self, build: Build, count: int) -> list[Session]:
        """At least ``count`` sessions of ``build`` (reusing journalled ones)."""
        have = self.sessions(build)
        while len(have) < count:
            expected = statistics.fmean(s.seconds for s in have) if have else None
            have.append(self.run_session(build, len(have) + 1, expected_s=expected))
        return have

    def command(self, build: Build) -> list[str]:
        args = self.pytest_args
        engine = [] if any(a.startswith("--tokperf-engine") for a in args) else [
            "--tokperf-engine", "llama-server"]
        if not any(a.startswith("--tokperf-threads") for a in args):
            engine.append(f"--tokperf-threads={ab_threads()}")
        # a PostgreSQL URL goes in the environment (session_env), not the command line
        db = [] if isinstance(self.db, PgUrl) else [f"--tokperf-db={self.db}"]
        # pytest's own "collected N" and a letter per test move the parent's meter
        return [self.python, "-m", "pytest", *args, *engine,
                f"--tokperf-server-bin={build.binary}", *db,
                "--tokperf-baseline=off", "-p", "no:cacheprovider", "--no-header"]

    def session_env(self) -> dict[str, str]:
        """A session's environment: ours, the runner's ``env``, and a PostgreSQL URL (maybe
        with a password) as PYTEST_TOKPERF_DB, out of the command line other users' ``ps``
        shows. Every session a runner starts (journalled or paired) gets it."""
        db = {"PYTEST_TOKPERF_DB": self.db.dsn} if isinstance(self.db, PgUrl) else {}
        return {**os.environ, **self.env, **db}

    def run_session(self, build: Build, number: int, *, expected_s: float | None = None,
                    again: bool = False) -> Session:
        """One pytest session on ``build``, journalled; ``expected_s`` (the build's sessions
        so far) lets the terminal show the time left. A session measured busy follows the
        runner's ``busy`` policy: measured once more after a quiet window, or it stands
        (noted), or with 'fail' it stops the run."""
        session = self._session(build, number, expected_s)
        busy = self._busy_in(session.run_ids)
        if busy and not again and self.busy.waits_s > 0:
            from pytest_tokperf.hardware.load import wait_for_quiet

            self.progress(f"{build.label}: session {number} measured busy ({busy}): waiting up "
                          f"to {self.busy.waits_s:g} s for a quiet window (--busy-wait)")
            with Meter(self.progress, "waiting for a quiet window", expected_s=self.busy.waits_s,
                       bounded=True):
                quiet = wait_for_quiet(self.busy.waits_s)
            if quiet is not None:
                return self.run_session(build, number, expected_s=expected_s, again=True)
        if busy and self.busy.outcome == "fail":
            raise EngineError(f"{build.label}: session {number} was measured busy ({busy}) and "
                              f"--busy fail stops the run; rerun on a quiet machine")
        session = replace(session, busy=busy)
        self.journal.add(session)
        return session

    def _session(self, build: Build, number: int, expected_s: float | None) -> Session:
        from pytest_tokperf.environment import utc_now
        from pytest_tokperf.storage.store import ResultStore

        if isinstance(self.db, Path):
            self.db.parent.mkdir(parents=True, exist_ok=True)
        with ResultStore.open(self.db) as store:
            before = {r.run.run_id for r in store.runs()}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"session-{safe_name(build.label)}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        self.progress(f"{build.label}: session {number} ...")
        started = time.monotonic()
        code = run_watched(self.command(build), log, self.session_env(), SessionMeter(
            self.progress, f"{build.label} session {number}:", log, expected_s=expected_s))
        seconds = time.monotonic() - started
        with ResultStore.open(self.db) as store:
            new = tuple(r.run.run_id for r in store.runs() if r.run.run_id not in before)
        tail = tail_text(log, 1).strip(" =\n")
        if code not in (0, 1) or not new or not _run_values(self.db, new, self.metrics):
            raise EngineError(
                f"pytest on {build.label} (exit {code}) stored no tok_bench results "
                f"in {self.db}: {tail}; full output: {log}"
            )
        self.progress(f"{build.label}: session {number} done in {seconds:.0f} s ({tail})")
        return Session(build.label, self.selection, new, str(build.binary), code,
                       round(seconds, 1), utc_now(), self.journal.digest(build.binary))

    def _busy_in(self, run_ids: Sequence[str]) -> str:
        """The machine of these runs' results measured with neighbours busy ("" if none)."""
        from pytest_tokperf.storage.rows import machine_loads_from_json
        from pytest_tokperf.storage.store import ResultStore

        marks = ", ".join("?" for _ in run_ids)
        with ResultStore.open(self.db) as store:
            texts = store.tuples(f"SELECT machine_load FROM results WHERE run_id IN ({marks})",
                                 tuple(run_ids))
        loads = [machine_loads_from_json(text)[0] for (text,) in texts]
        return next((load.brief() for load in loads if load is not None and load.loaded), "")

    def busy_of(self, sessions: Sequence[Session]) -> str:
        """The machine of these sessions measured busy ("" when all were quiet)."""
        return "; ".join(dict.fromkeys(s.busy for s in sessions if s.busy))

    def groups(self, sessions: Sequence[Session]) -> Groups:
        out: Groups = {}
        for session in sessions:
            for target, values in _run_values(self.db, session.run_ids, self.metrics).items():
                out.setdefault(target, []).append(values)
        return out


def pooled(groups: Sequence[Sequence[float]]) -> list[float]:
    return [x for g in groups for x in g]


def session_medians(groups: Sequence[Sequence[float]]) -> list[float]:
    """One figure per session, its median: samples of one session share the machine's
    state, so the session is the unit of replication."""
    return [statistics.median(g) for g in groups if g]


def metric_for(name: str, min_effect: float | None) -> Metric:
    base = METRICS[name]
    return base if min_effect is None else Metric(base.name, base.higher_is_better, min_effect)


@dataclass(frozen=True, slots=True)
class BuildComparison:
    """One target on two builds: the judge's verdict beside a robust B / A ratio.

    ``median_a``/``median_b`` are the medians of the session medians; ``mean_a``/``mean_b``
    the plain means of every sample (compare-llama-bench's figure, kept for reference:
    one session stalled by a neighbour moves it by its whole weight).
    """

    target: Target
    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    sessions_a: int
    sessions_b: int
    comparison: Comparison
    median_a: float = float("nan")
    median_b: float = float("nan")
    busy: str = ""
    """The machine of the compared sessions measured busy ("" when all were quiet)."""

    @property
    def ratio(self) -> float:
        """B / A of the medians of session medians: a stalled session moves it by one
        session's rank, not by its weight in a pooled mean."""
        return self.median_b / self.median_a


def compare_groups(a: Groups, b: Groups, *, min_effect: float | None = None) -> list[BuildComparison]:
    """Every target both sides measured: B judged against A, sessions nested (Holm)."""
    common = sorted(set(a) & set(b), key=lambda t: (t.test_id, t.metric, t.series_key))
    if not common:
        raise ConfigError("no test has results on both builds: is the selection the same, "
                          "and does it call tok_bench?")
    verdicts = compare_many({t: [g for g in a[t] if g] for t in common},
                            {t: [g for g in b[t] if g] for t in common},
                            {t: metric_for(t.metric, min_effect) for t in common})
    return [BuildComparison(t, statistics.fmean(pooled(a[t])), statistics.fmean(pooled(b[t])),
                            len(pooled(a[t])), len(pooled(b[t])), len(a[t]), len(b[t]), verdicts[t],
                            statistics.median(session_medians(a[t])),
                            statistics.median(session_medians(b[t])))
            for t in common]


def compare_builds(runner: BuildRunner, a: Build, b: Build, rounds: int,
                   *, min_effect: float | None = None) -> list[BuildComparison]:
    """``rounds`` sessions of each build, A B A B ..., then B judged against A."""
    if rounds < 3:
        raise ConfigError(f"rounds {rounds!r}: the judge needs at least 3 sessions per build")
    to_run = sum(max(rounds - len(runner.sessions(x)), 0) for x in (a, b))
    with Meter(runner.progress, "compare-builds:", float(to_run), unit="sessions",
               line_every=1.0) as meter:
        for r in range(1, rounds + 1):
            runner.progress(f"round {r}/{rounds}")
            for build in (a, b):
                ran = len(runner.sessions(build))
                runner.ensure(build, r)
                meter.update(meter.done + max(r - ran, 0))
    used = [runner.sessions(x)[:rounds] for x in (a, b)]
    busy = runner.busy_of([*used[0], *used[1]])
    return [replace(c, busy=busy) for c in compare_groups(
        runner.groups(used[0]), runner.groups(used[1]), min_effect=min_effect)]
