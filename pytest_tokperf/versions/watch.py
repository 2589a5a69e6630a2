"""The release watch: each build of a list A/B'd against a reference and its predecessor.

Every build (a release, a binary or a source tree: ``specs``) is built within a time limit,
then measured with the same-run A/B (``paired_builds``) as the candidate against the
reference build and against the build before it. A step the judge flags against its
predecessor (a regression or an improvement, measured quiet) is measured again; confirmed,
it is bisected (``bisect``) over the registry releases between the two when the list
skipped some, and named: the first bad (or improved) release, the upstream builds and the
compare link. Every finished step (build, A/B with its document and verdicts, bisect) is a
line of a journal beside the DB (``<db>.watch.jsonl``), so the same command after a kill
measures only what is missing, and a later watch can start at the last release watched.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.specs import Build, BuildSpec, BuildTimedOut
from pytest_tokperf.errors import EngineError, InstallError, TokperfError
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.results import Progress
from pytest_tokperf.stats.metric import pct
from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT
from pytest_tokperf.versions.bisect import Lab, bisect_releases
from pytest_tokperf.versions.paired import QuietWait, again_if_busy, judge_documents
from pytest_tokperf.versions.sessions import Groups
from pytest_tokperf.versions.watch_journal import (
    COMPARE_URL,
    JUDGED,
    AbRow,
    AbStep,
    BuildStep,
    BusyRule,
    Kind,
    Measure,
    Provide,
    ReleaseWatch,
    Role,
    StepFlag,
    WatchJournal,
    WatchResult,
    build_of,
    build_step_of,
)


@dataclass(slots=True)
class InvertedLab:
    """A bisect ``Lab`` whose figures are inverted (1/x): the first release that improved
    reads as the first that regressed, so the same bisect names an improvement."""

    lab: Lab

    def groups(self, number: int, sessions: int) -> Groups:
        return {t: [[1.0 / v for v in g if v] for g in gs]
                for t, gs in self.lab.groups(number, sessions).items()}


@dataclass(slots=True)
class Watch:
    """A watch over builds; ``provide`` builds, ``measure`` runs one A/B session, ``lab``
    and ``between`` (registry releases strictly between two) drive the bisect."""

    journal: WatchJournal
    folder: Path
    selection: str
    provide: Provide
    measure: Measure
    lab: Callable[[], Lab] | None = None
    between: Callable[[int, int], list[int]] | None = None
    metrics: tuple[str, ...] = ("decode",)
    min_effect: float = PAIRED_MIN_EFFECT
    busy: BusyRule = "skip"
    confirm: bool = True
    retry_failed: bool = False
    sessions: int = 3
    max_sessions: int = 8
    busy_wait: float = 0.0
    """Seconds an A/B measured busy waits for a quiet window to be measured again
    (``--busy skip`` only; 0: never)."""
    wait_quiet: QuietWait | None = None
    """Seconds waited for a quiet window within a budget, None when none came
    (default ``hardware.load.wait_for_quiet``)."""
    progress: Progress = print
    _measured: int = field(default=0, init=False)
    _worked: bool = field(default=False, init=False)
    _reused: int = field(default=0, init=False)
    _ab_seconds: list[float] = field(default_factory=list, init=False)

    def run(self, specs: Sequence[BuildSpec], reference: BuildSpec) -> WatchResult:
        started = time.monotonic()
        order = list({s.key: s for s in specs}.values())
        self.folder.mkdir(parents=True, exist_ok=True)
        meter = Meter(self.progress, "watch:", float(len(order)), unit="builds", line_every=1.0)
        ref_step = self._build_step(reference)
        if not ref_step.ok:
            meter.close()
            raise InstallError(f"the reference {reference.text} did not build: {ref_step.reason}; "
                               f"choose another --reference")
        ref = build_of(ref_step)
        self.progress(f"watch: {len(order)} builds against the reference {ref.label}; "
                      f"A/B documents in {self.folder}, journal {self.journal.path}")
        releases: list[ReleaseWatch] = []
        flags: list[StepFlag] = []
        before: tuple[Build, BuildStep] | None = None
        paced_from = 0  # the time left is paced by work done now, not by steps replayed
        for i, spec in enumerate(order):
            if not self._worked:
                paced_from = i
            self.progress(f"[{i + 1}/{len(order)}] {spec.text}")
            done = self._one(spec, ref, ref_step, before, flags)
            releases.append(done)
            if not done.skipped:
                before = (build_of(done.build), done.build)
            if not self._worked:  # replayed from the journal: no pace to tell
                continue
            if paced_from and meter.warmup != paced_from:
                meter.close()
                meter = Meter(self.progress, "watch:", float(len(order)), unit="builds",
                              line_every=1.0, warmup=float(paced_from))
                meter.update(float(paced_from))
            meter.update(float(i + 1))
        meter.close()
        last = next((r for r in reversed(releases) if not r.skipped), None)
        if last is not None:
            self.journal.add({"step": "watched", "selection": self.selection,
                              "reference": reference.key, "last": last.build.spec,
                              "last_number": last.build.number, "folder": str(self.folder)})
        result = WatchResult(ref.label, self.metrics, str(self.folder), str(self.journal.path),
                             tuple(releases), tuple(flags), tuple(self._busy_notes(releases)),
                             self._measured, self._reused, time.monotonic() - started)
        (self.folder / "summary.json").write_text(dumps(result.as_json()) + "\n",
                                                  encoding="utf-8")
        return result

    def _one(self, spec: BuildSpec, ref: Build, ref_step: BuildStep,
             before: tuple[Build, BuildStep] | None, flags: list[StepFlag]) -> ReleaseWatch:
        step = ref_step if spec.key == ref_step.spec else self._build_step(spec)
        label = step.label
        if not step.ok:
            why = (f"build timed out: {step.reason}" if step.outcome == "timed-out"
                   else f"build failed: {step.reason}")
            self.progress(f"skipped {label}: {why}")
            return ReleaseWatch(spec.text, label, step, skipped=why)
        build = build_of(step)
        vs_ref = vs_pred = second = None
        try:
            if step.spec != ref_step.spec:
                vs_ref = self._ab("reference", (ref, ref_step), (build, step), 1)
            if before is not None and before[1].spec == ref_step.spec and vs_ref:
                vs_pred = replace(vs_ref, role="predecessor")  # one A/B, both roles
            elif before is not None:
                vs_pred = self._ab("predecessor", before, (build, step), 1)
            if before is not None and vs_pred is not None:
                kind = vs_pred.flag(self.metrics, self.busy)
                if kind is not None:
                    second = self._ab("confirm", before, (build, step), 2) if self.confirm else None
                    flags.append(self._named(kind, before[1], step, vs_pred, second))
        except EngineError as exc:
            self.progress(f"skipped {label}: A/B failed: {exc}")
            return ReleaseWatch(spec.text, label, step, before[1].label if before else None,
                                vs_ref, vs_pred, second, skipped=f"A/B failed: {exc}")
        return ReleaseWatch(spec.text, label, step, before[1].label if before else None,
                            vs_ref, vs_pred, second)

    def _build_step(self, spec: BuildSpec) -> BuildStep:
        entry = self.journal.build(spec.key) if spec.kind == "release" else None
        if entry is not None:
            step = build_step_of(entry)
            if not step.ok and not self.retry_failed:
                return step
            if step.ok and self.journal.digest(Path(step.binary)) == step.sha256:
                return step
        started = time.monotonic()
        self._worked = self._worked or spec.kind != "binary"  # a given binary is no work
        try:
            build = self.provide(spec)
        except BuildTimedOut as exc:
            step = BuildStep(spec.key, spec.text if spec.kind != "release" else spec.key,
                             spec.number, "", "", time.monotonic() - started, "timed-out", str(exc))
        except InstallError as exc:
            step = BuildStep(spec.key, spec.text if spec.kind != "release" else spec.key,
                             spec.number, "", "", time.monotonic() - started, "failed", str(exc))
        else:
            step = BuildStep(spec.key, build.label, build.number, str(build.binary),
                             self.journal.digest(build.binary), time.monotonic() - started,
                             "given" if spec.kind == "binary" else "built")
        step = replace(step, seconds=round(step.seconds, 1))
        self.journal.add({"step": "build", **{k: v for k, v in asdict(step).items()
                                              if k != "measured"}})
        return step

    def _ab(self, role: Role, a: tuple[Build, BuildStep], b: tuple[Build, BuildStep],
            attempt: int) -> AbStep:
        (base, base_step), (cand, cand_step) = a, b
        entry = self.journal.ab((base.label, base_step.sha256), (cand.label, cand_step.sha256),
                                self.selection, attempt)
        if entry is not None:
            self._reused += 1
            document = Path(entry["document"])
            rows = (self._judge(document) if document.is_file()
                    else tuple(AbRow(**r) for r in entry["rows"]))
            self.progress(f"A/B {base.label} -> {cand.label} ({role}): from the journal")
            return AbStep(role, base.label, cand.label, attempt, str(document),
                          float(entry["seconds"]), rows, measured=False,
                          busy_first=str(entry.get("busy_first") or ""))
        self.progress(f"A/B {base.label} -> {cand.label} ({role}"
                      f"{', again to confirm' if role == 'confirm' else ''})")
        expected = statistics.fmean(self._ab_seconds) if self._ab_seconds else None
        self._worked = True
        started = time.monotonic()

        def measure() -> Path:
            began = time.monotonic()
            with Meter(self.progress, f"A/B {base.label} -> {cand.label}", expected_s=expected):
                document = self.measure(base, cand, attempt)
            self._ab_seconds.append(time.monotonic() - began)  # what an A/B is expected to take
            return document

        document, busy = again_if_busy(measure, f"A/B {base.label} -> {cand.label}",
                                       self.busy_wait if self.busy == "skip" else 0.0,
                                       self.progress, self.wait_quiet)
        busy_first = str(busy) if busy is not None else ""
        rows = self._judge(document)
        seconds = time.monotonic() - started  # a busy try and the wait included
        self._measured += 1
        done = AbStep(role, base.label, cand.label, attempt, str(document), round(seconds, 1),
                      rows, busy_first=busy_first)
        self.journal.add({"step": "ab", "role": role, "baseline": base.label,
                          "baseline_sha256": base_step.sha256, "candidate": cand.label,
                          "candidate_sha256": cand_step.sha256, "selection": self.selection,
                          "attempt": attempt, "document": str(document),
                          "seconds": done.seconds, "rows": [asdict(r) for r in rows],
                          **({"busy_first": busy_first} if busy_first else {})})
        lead = done.lead(self.metrics)
        if lead is not None:
            self.progress(f"  {cand.label} vs {base.label}: {lead.metric} {lead.verdict} "
                          f"{lead.change:+.1%}{' (measured busy)' if lead.busy else ''}")
        return done

    def _judge(self, document: Path) -> tuple[AbRow, ...]:
        found = judge_documents([json.loads(document.read_text(encoding="utf-8"))], JUDGED,
                                min_effect=self.min_effect)
        return tuple(AbRow.of(f) for f in found)

    def _named(self, kind: Kind, before: BuildStep, after: BuildStep, first: AbStep,
               second: AbStep | None) -> StepFlag:
        flag = StepFlag(kind, before.label, after.label, first, second, True, "",
                        before.label, after.label)
        if second is not None:
            again = second.flag(self.metrics, self.busy)
            if again != kind:
                why = ("the second A/B was measured busy" if second.busy and self.busy == "skip"
                       and second.flag(self.metrics, "judge") == kind
                       else f"the second A/B reads {again or 'no change'}")
                self.progress(f"{before.label} -> {after.label}: {kind} not confirmed ({why})")
                return replace(flag, confirmed=False, note=f"not confirmed: {why}")
        note = "confirmed by a second A/B" if second is not None else "one A/B (--no-confirm)"
        if before.number is None or after.number is None:
            return replace(flag, note=note)
        good, bad = before.number, after.number
        flag = replace(flag, note=note, upstream=(good + 1, bad),
                       compare_url=COMPARE_URL.format(good=good, bad=bad))
        between = self.between(good, bad) if self.between is not None else []
        if not between or self.lab is None:
            return replace(flag, note=f"{note}; no registry release between them")
        return self._bisect(flag, kind, good, bad, between, first)

    def _bisect(self, flag: StepFlag, kind: Kind, good: int, bad: int, between: list[int],
                first: AbStep) -> StepFlag:
        assert self.lab is not None
        lead = first.lead(self.metrics)
        metric = lead.metric if lead is not None else self.metrics[0]
        entry = self.journal.bisect(kind, good, bad, self.selection)
        if entry is None:
            self.progress(f"bisecting the {kind} over the {len(between)} release(s) between "
                          f"b{good} and b{bad}")
            lab = self.lab()
            try:
                found = bisect_releases(
                    [good, *between, bad], good, bad,
                    InvertedLab(lab) if kind == "improvement" else lab,
                    sessions=self.sessions, max_sessions=self.max_sessions, metrics=[metric],
                    progress=self.progress)
            except TokperfError as exc:
                return replace(flag, note=f"{flag.note}; the bisect stopped: {exc}")
            entry = {"step": "bisect", "kind": kind, "good": good, "bad": bad,
                     "selection": self.selection, "metric": metric, "status": found.status,
                     "last_good": found.last_good, "first_bad": found.first_bad,
                     "remaining": list(found.remaining), "midpoints": found.midpoints}
            self.journal.add(entry)
        status = entry["status"]
        if status != "found":
            span = ", ".join(f"b{n}" for n in [*between, bad])
            return replace(flag, note=f"{flag.note}; bisect {status} on {metric} (its "
                           f"sessions did not place the step): the first is one of {span}")
        last_good, first_bad = int(entry["last_good"]), int(entry["first_bad"])
        return replace(flag, note=f"{flag.note}; bisected over {len(between)} release(s) "
                       f"between ({entry['midpoints']} measured)",
                       last_good=f"b{last_good}", first_bad=f"b{first_bad}",
                       upstream=(last_good + 1, first_bad),
                       compare_url=COMPARE_URL.format(good=last_good, bad=first_bad))

    def _busy_notes(self, releases: Sequence[ReleaseWatch]) -> list[str]:
        if self.busy == "judge":
            return []
        notes = []
        for release in releases:
            for ab in release.abs:
                rows = [r for r in ab.rows if r.busy and r.flagged and r.metric in self.metrics]
                for r in rows:
                    notes.append(f"{ab.candidate} vs {ab.baseline} ({ab.role}): {r.metric} "
                                 f"{r.verdict} {pct(r.change)} measured busy ({r.busy}): "
                                 f"not a flag")
        return notes
