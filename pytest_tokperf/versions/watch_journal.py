"""What a release watch records: its steps as values (a build, an A/B with its rows, a
flagged step and what it names, a build's whole watch, the result) and its journal, one
JSON line per finished step beside the DB (``<db>.watch.jsonl``), read back by a rerun.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_tokperf.builds.sdist import file_sha256
from pytest_tokperf.builds.specs import Build, BuildSpec
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.jsontext import dumps, jsonl_objects
from pytest_tokperf.safe_files import safe_name
from pytest_tokperf.storage.location import DbLocation, local_base
from pytest_tokperf.versions.paired import PairedBuildComparison

Role = Literal["reference", "predecessor", "confirm"]
Kind = Literal["regression", "improvement"]
Outcome = Literal["built", "given", "failed", "timed-out"]

JUDGED = ("decode", "prefill", "ttft")
"""The metrics each A/B's rows keep; the watch flags those it is given (decode)."""
COMPARE_URL = "https://github.com/ggml-org/llama.cpp/compare/b{good}...b{bad}"

Measure = Callable[[Build, Build, int], Path]
"""One A/B session: control, candidate, attempt -> the path of its A/B JSON document."""
Provide = Callable[[BuildSpec], Build]


@dataclass(frozen=True, slots=True)
class AbRow:
    """One test's metric in one A/B, as the journal keeps it."""

    test_id: str
    workload: str
    metric: str
    verdict: str
    change: float
    ci_low: float
    ci_high: float
    pairs: int
    busy: str = ""

    @classmethod
    def of(cls, found: PairedBuildComparison) -> AbRow:
        c = found.comparison
        return cls(found.test_id, found.workload, found.metric, c.verdict, c.relative_change,
                   c.ci_low, c.ci_high, found.pairs, found.busy)

    @property
    def flagged(self) -> bool:
        return self.verdict in ("regression", "improvement")


@dataclass(frozen=True, slots=True)
class AbStep:
    """One A/B of the watch: ``candidate`` measured against ``control``."""

    role: Role
    control: str
    candidate: str
    attempt: int
    document: str
    seconds: float
    rows: tuple[AbRow, ...]
    measured: bool = True
    """Measured by this run (False: found in the journal)."""
    busy_first: str = ""
    """The document of a first try measured busy, which this one (measured after a quiet
    window, ``--busy-wait``) replaces ("" when there was none)."""

    def counted(self, metrics: Sequence[str], busy: BusyPolicy) -> list[AbRow]:
        """The rows that may flag: the watched metrics, measured quiet (or busy judged)."""
        return [r for r in self.rows if r.metric in metrics and (busy.judges or not r.busy)]

    def flag(self, metrics: Sequence[str], busy: BusyPolicy) -> Kind | None:
        """A regression in any counted row, else an improvement in any, else None."""
        verdicts = {r.verdict for r in self.counted(metrics, busy)}
        return ("regression" if "regression" in verdicts
                else "improvement" if "improvement" in verdicts else None)

    def lead(self, metrics: Sequence[str]) -> AbRow | None:
        """The row a summary shows: the largest flagged change of the watched metrics,
        else the largest change."""
        rows = [r for r in self.rows if r.metric in metrics] or list(self.rows)
        if not rows:
            return None
        return max(rows, key=lambda r: (r.flagged, abs(r.change) if math.isfinite(r.change)
                                        else 0.0))

    @property
    def busy(self) -> str:
        return next((r.busy for r in self.rows if r.busy), "")


@dataclass(frozen=True, slots=True)
class BuildStep:
    """One build of the watch and how it went."""

    spec: str
    label: str
    number: int | None
    binary: str
    sha256: str
    seconds: float
    outcome: Outcome
    reason: str = ""
    measured: bool = True

    @property
    def ok(self) -> bool:
        return self.outcome in ("built", "given")


@dataclass(frozen=True, slots=True)
class StepFlag:
    """A step flagged against its predecessor, its confirmation and what it names."""

    kind: Kind
    before: str
    after: str
    first: AbStep
    second: AbStep | None
    confirmed: bool
    note: str
    """Why it is (not) confirmed; how the bisect went."""
    last_good: str = ""
    first_bad: str = ""
    upstream: tuple[int, int] | None = None
    """llama.cpp builds to read: after the last good release up to the first bad."""
    compare_url: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseWatch:
    """One build of the list: its build, its A/Bs, or why it was skipped."""

    spec: str
    label: str
    build: BuildStep
    predecessor: str | None = None
    vs_reference: AbStep | None = None
    vs_predecessor: AbStep | None = None
    confirm: AbStep | None = None
    skipped: str = ""

    @property
    def abs(self) -> tuple[AbStep, ...]:
        """Its A/Bs, each once (against the reference and the predecessor may be one)."""
        found: dict[tuple[str, int], AbStep] = {}
        for ab in (self.vs_reference, self.vs_predecessor, self.confirm):
            if ab is not None:
                found.setdefault((ab.control, ab.attempt), ab)
        return tuple(found.values())

    @property
    def ab_s(self) -> float:
        return sum(ab.seconds for ab in self.abs)

    @property
    def wall_s(self) -> float:
        """Build plus A/Bs, as journalled when they were done."""
        return self.build.seconds + self.ab_s


@dataclass(frozen=True, slots=True)
class WatchResult:
    reference: str
    metrics: tuple[str, ...]
    folder: str
    journal: str
    releases: tuple[ReleaseWatch, ...]
    flags: tuple[StepFlag, ...]
    busy: tuple[str, ...]
    """A/Bs that read a change while measured busy: reported, never a flag."""
    measured: int
    """A/Bs measured by this run."""
    reused: int
    """A/Bs found in the journal."""
    wall_s: float

    @property
    def named(self) -> tuple[StepFlag, ...]:
        """The confirmed flags: the steps the watch names."""
        return tuple(f for f in self.flags if f.confirmed)

    @property
    def skipped(self) -> tuple[ReleaseWatch, ...]:
        return tuple(r for r in self.releases if r.skipped)

    @property
    def measured_busy(self) -> tuple[int, int]:
        """(A/Bs measured with neighbours busy, A/Bs) over every release."""
        abs_ = [ab for r in self.releases for ab in r.abs]
        return sum(bool(ab.busy) for ab in abs_), len(abs_)

    @property
    def measured_again(self) -> int:
        """A/Bs measured busy, then again after a quiet window (``--busy-wait``)."""
        return sum(bool(ab.busy_first) for r in self.releases for ab in r.abs)

    def median_wall_s(self) -> float | None:
        walls = [r.wall_s for r in self.releases if not r.skipped]
        return statistics.median(walls) if walls else None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "named": [asdict(f) for f in self.named],
                "median_wall_s": self.median_wall_s()}


class WatchJournal:
    """``<db>.watch.jsonl``: one JSON line per finished step (build, ab, bisect, watched)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digests: dict[tuple[str, int, int], str] = {}

    def entries(self, step: str) -> list[dict[str, Any]]:
        return [entry for entry in jsonl_objects(self.path) if entry.get("step") == step]

    def add(self, entry: dict[str, Any]) -> None:
        from pytest_tokperf.environment import utc_now

        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(dumps({**entry, "at": utc_now()}, indent=None) + "\n")

    def digest(self, binary: Path) -> str:
        """SHA-256 of a binary, hashed once per path, size and mtime; "" when unreadable."""
        try:
            stat = binary.stat()
        except OSError:
            return ""
        key = (str(binary), stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            self._digests[key] = file_sha256(binary)
        return self._digests[key]

    def build(self, key: str) -> dict[str, Any] | None:
        return next((e for e in reversed(self.entries("build")) if e.get("spec") == key), None)

    def ab(self, control: tuple[str, str], candidate: tuple[str, str], selection: str,
           attempt: int) -> dict[str, Any] | None:
        """The A/B of these two builds (label and SHA-256 each), selection and attempt."""
        want = (*control, *candidate, selection, attempt)
        return next((e for e in self.entries("ab") if (
            e.get("control"), e.get("control_sha256"), e.get("candidate"),
            e.get("candidate_sha256"), e.get("selection"), e.get("attempt")) == want), None)

    def bisect(self, kind: str, good: int, bad: int, selection: str) -> dict[str, Any] | None:
        want = (kind, good, bad, selection)
        return next((e for e in self.entries("bisect") if (
            e.get("kind"), e.get("good"), e.get("bad"), e.get("selection")) == want), None)

    def last_watched(self, selection: str) -> dict[str, Any] | None:
        """The latest finished watch of this selection: its reference and last build."""
        return next((e for e in reversed(self.entries("watched"))
                     if e.get("selection") == selection), None)



def journal_for(db: DbLocation, suffix: str = ".watch.jsonl") -> Path:
    """The watch journal beside the DB: ``<db>.watch.jsonl`` (or another ``suffix``:
    the host's window levels, ``.windows.jsonl``)."""
    base = local_base(db)
    return base.with_name(base.name + suffix)


def watch_folder(db: DbLocation, specs: Sequence[BuildSpec]) -> Path:
    """``runs/watch-b10380-b10499`` beside the DB (binaries and trees: with a hash of
    their paths, since many are called llama-server)."""
    def name(spec: BuildSpec) -> str:
        return spec.key if spec.kind == "release" else Path(spec.key).name

    text = f"watch-{name(specs[0])}-{name(specs[-1])}"
    if any(s.kind != "release" for s in specs):
        text += "-" + hashlib.sha256("\0".join(s.key for s in specs).encode()).hexdigest()[:8]
    return local_base(db).parent / "runs" / safe_name(text)


def build_of(step: BuildStep) -> Build:
    return Build(step.label, Path(step.binary), step.number)


def build_step_of(entry: dict[str, Any]) -> BuildStep:
    names = BuildStep.__dataclass_fields__
    return BuildStep(**{k: v for k, v in entry.items() if k in names and k != "measured"},
                     measured=False)
