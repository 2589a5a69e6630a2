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
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_tokperf.builds.progress import Meter
from pytest_tokperf.builds.releases import ReleaseIndex, release_number
from pytest_tokperf.builds.specs import (
    Build,
    Builder,
    BuildSpec,
    BuildTimedOut,
    parse_spec,
)
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.errors import ConfigError, EngineError, InstallError, TokperfError
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.results import Progress
from pytest_tokperf.stats.metric import CONFIRM_GAP_S, WINDOW_SD, pct
from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT
from pytest_tokperf.storage.location import DbLocation
from pytest_tokperf.versions.bisect import Lab, RunnerLab, bisect_releases
from pytest_tokperf.versions.paired import (
    QuietWait,
    again_if_busy,
    judge_documents,
    run_paired_session,
)
from pytest_tokperf.versions.sessions import BuildRunner, Groups, selection_key
from pytest_tokperf.versions.windows import HostWindows
from pytest_tokperf.versions.watch_journal import (
    COMPARE_URL,
    JUDGED,
    AbRow,
    AbStep,
    BuildStep,
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
    journal_for,
    watch_folder,
)


@dataclass(slots=True)
class InvertedLab:
    """A bisect ``Lab`` whose figures are inverted (1/x): the first release that improved
    reads as the first that regressed, so the same bisect names an improvement."""

    lab: Lab

    def groups(self, number: int, sessions: int) -> Groups:
        return {t: [[1.0 / v for v in g if v] for g in gs]
                for t, gs in self.lab.groups(number, sessions).items()}


@dataclass(frozen=True, slots=True)
class _Pending:
    """A flag waiting for its confirmation in another window."""

    kind: Kind
    before: tuple[Build, BuildStep]
    after: tuple[Build, BuildStep]
    first: AbStep
    index: int
    measured: int
    at: float


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
    busy: BusyPolicy = BusyPolicy()
    """An A/B measured busy: measured again after a quiet window (within its wait), and
    a flag only where the policy judges busy figures."""
    confirm: bool = True
    retry_failed: bool = False
    sessions: int = 3
    max_sessions: int = 8
    wait_quiet: QuietWait | None = None
    """Seconds waited for a quiet window within a budget, None when none came
    (default ``hardware.load.wait_for_quiet``)."""
    confirm_gap: float = CONFIRM_GAP_S
    """A flag is confirmed in another machine window: after another A/B was measured, or
    once this many seconds passed since its first A/B (the watch's end waits for it)."""
    windows: HostWindows | None = None
    """This host's window level (learned from every flag confirmed); None: the default."""
    sleep: Callable[[float], None] = time.sleep
    progress: Progress = print
    _measured: int = field(default=0, init=False)
    _worked: bool = field(default=False, init=False)
    _reused: int = field(default=0, init=False)
    _pending: list[_Pending] = field(default_factory=list, init=False)

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
            done = self._one(spec, ref, ref_step, before, flags, i)
            releases.append(done)
            self._confirm_due(releases, flags, final=False)
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
        self._confirm_due(releases, flags, final=True)
        place = {r.label: i for i, r in enumerate(releases)}
        flags.sort(key=lambda f: place[f.after])
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
             before: tuple[Build, BuildStep] | None, flags: list[StepFlag],
             index: int) -> ReleaseWatch:
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
                if kind is not None and self.confirm:  # in another window: _confirm_due
                    self._pending.append(_Pending(kind, before, (build, step), vs_pred, index,
                                                  self._measured, time.monotonic()))
                elif kind is not None:
                    flags.append(self._named(kind, before[1], step, vs_pred, None))
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
        (ctrl, ctrl_step), (cand, cand_step) = a, b
        entry = self.journal.ab((ctrl.label, ctrl_step.sha256), (cand.label, cand_step.sha256),
                                self.selection, attempt)
        if entry is not None:
            self._reused += 1
            document = Path(entry["document"])
            rows = (self._judge(document) if document.is_file()
                    else tuple(AbRow(**r) for r in entry["rows"]))
            self.progress(f"A/B {ctrl.label} -> {cand.label} ({role}): from the journal")
            return AbStep(role, ctrl.label, cand.label, attempt, str(document),
                          float(entry["seconds"]), rows, measured=False,
                          busy_first=str(entry.get("busy_first") or ""))
        self.progress(f"A/B {ctrl.label} -> {cand.label} ({role}"
                      f"{', again to confirm' if role == 'confirm' else ''})")
        self._worked = True
        started = time.monotonic()
        # the A/B's session draws its own meter (versions.session_progress)
        document, busy = again_if_busy(lambda: self.measure(ctrl, cand, attempt),
                                       f"A/B {ctrl.label} -> {cand.label}",
                                       self.busy.waits_s, self.progress, self.wait_quiet)
        busy_first = str(busy) if busy is not None else ""
        rows = self._judge(document)
        seconds = time.monotonic() - started  # a busy try and the wait included
        self._measured += 1
        done = AbStep(role, ctrl.label, cand.label, attempt, str(document), round(seconds, 1),
                      rows, busy_first=busy_first)
        self.journal.add({"step": "ab", "role": role, "control": ctrl.label,
                          "control_sha256": ctrl_step.sha256, "candidate": cand.label,
                          "candidate_sha256": cand_step.sha256, "selection": self.selection,
                          "attempt": attempt, "document": str(document),
                          "seconds": done.seconds, "rows": [asdict(r) for r in rows],
                          **({"busy_first": busy_first} if busy_first else {})})
        lead = done.lead(self.metrics)
        if lead is not None:
            self.progress(f"  {cand.label} vs {ctrl.label}: {lead.metric} {lead.verdict} "
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
            pooled, how = self._pooled(first, second)
            again = pooled.flag(self.metrics, self.busy)
            if again != kind:
                why = ("the second A/B was measured busy" if second.busy and not self.busy.judges
                       and second.flag(self.metrics, BusyPolicy("judge")) == kind
                       else f"both windows pooled read {again or 'no change'}{how}")
                self.progress(f"{before.label} -> {after.label}: {kind} not confirmed ({why})")
                return replace(flag, confirmed=False, note=f"not confirmed: {why}")
        note = (f"confirmed in a second window{how}" if second is not None
                else "one A/B (--no-confirm)")
        if before.number is None or after.number is None:
            return replace(flag, note=note)
        good, bad = before.number, after.number
        flag = replace(flag, note=note, upstream=(good + 1, bad),
                       compare_url=COMPARE_URL.format(good=good, bad=bad))
        between = self.between(good, bad) if self.between is not None else []
        if not between or self.lab is None:
            return replace(flag, note=f"{note}; no registry release between them")
        return self._bisect(flag, kind, good, bad, between, first)

    def _confirm_due(self, releases: list[ReleaseWatch], flags: list[StepFlag], *,
                     final: bool) -> None:
        """Measure each pending flag again in another window: once another A/B was
        measured since its first, or ``confirm_gap`` s after it (at the end: waited for)."""
        for item in list(self._pending):
            waited = time.monotonic() - item.at
            if self._measured == item.measured and waited < self.confirm_gap:
                if not final:
                    continue
                self.progress(f"waiting {self.confirm_gap - waited:.0f} s to confirm "
                              f"{item.after[0].label} in another machine window (--confirm-gap)")
                with Meter(self.progress, "waiting for another machine window",
                           expected_s=self.confirm_gap - waited):
                    self.sleep(self.confirm_gap - waited)
            self._pending.remove(item)
            before, after = item.before[1], item.after[1]
            try:
                second = self._ab("confirm", item.before, item.after, 2)
            except EngineError as exc:  # unconfirmed, never named on its first A/B alone
                self.progress(f"the confirmation of {after.label} failed: {exc}")
                flags.append(StepFlag(item.kind, before.label, after.label, item.first, None,
                                      False, f"not confirmed: the second A/B failed: {exc}",
                                      before.label, after.label))
                continue
            flags.append(self._named(item.kind, before, after, item.first, second))
            releases[item.index] = replace(releases[item.index], confirm=second)

    def _pooled(self, first: AbStep, second: AbStep) -> tuple[AbStep, str]:
        """Both windows' A/Bs judged as one (``judge_documents`` over two windows, each
        allowed this host's window level), kept in ``windows``; the second alone where a
        document is gone."""
        paths = [Path(first.document), Path(second.document)]
        if not all(p.is_file() for p in paths):
            return second, ""
        docs = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
        level, how = self.windows.level() if self.windows is not None else (
            WINDOW_SD, f"the default {WINDOW_SD:.1%}")
        found = judge_documents(docs, JUDGED, min_effect=self.min_effect, windows=[0, 1],
                                window_sd=level)
        if self.windows is not None:
            each = [judge_documents([d], JUDGED, min_effect=self.min_effect) for d in docs]
            for one, two in zip(*each, strict=True):
                if one.metric in self.metrics and one.comparison.shift and two.comparison.shift:
                    self.windows.add(f"{first.control}->{first.candidate}",
                                     one.comparison.shift, two.comparison.shift)
        rows = tuple(AbRow.of(f) for f in found)
        lead = replace(second, rows=rows).lead(self.metrics)
        text = (f": {lead.metric} {lead.verdict} {pct(lead.change)} over both, a window "
                f"allowed {how}" if lead is not None else "")
        return replace(second, rows=rows), text

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
        if self.busy.judges:
            return []
        notes = []
        for release in releases:
            for ab in release.abs:
                rows = [r for r in ab.rows if r.busy and r.flagged and r.metric in self.metrics]
                for r in rows:
                    notes.append(f"{ab.candidate} vs {ab.control} ({ab.role}): {r.metric} "
                                 f"{r.verdict} {pct(r.change)} measured busy ({r.busy}): "
                                 f"not a flag")
        return notes


def watch_list(words: Sequence[str], index: Callable[[], ReleaseIndex], *,
               first: str | None = None, last: str | None = None,
               since: dict[str, Any] | None = None, since_last: bool = False,
               reference: str | None = None, journal_path: Path | None = None
               ) -> tuple[list[BuildSpec], BuildSpec]:
    """The builds to watch, in order, and the reference: BUILD ``words`` (a release, a
    span ``10380..10499``, a binary, a source tree), or the registry's releases from
    ``first`` (or the last one ``since``, the journal's last watch, with ``since_last``)
    up to ``last``. ``index`` is asked only when releases are named."""
    if since_last or first or last:
        if words:
            raise ConfigError(f"{' '.join(words)!r} beside --from/--to/--since-last: give the "
                              f"builds one way")
        specs = _span(index, first, last, since, since_last, journal_path)
    elif words:
        specs = [spec for word in words for spec in (
            [BuildSpec(r.tag, "release", r.number) for r in index().select(word)]
            if ".." in word and not Path(word).expanduser().exists() else [parse_spec(word)])]
    else:
        raise ConfigError("nothing to watch: give builds (`tokperf watch 10380..10499`, "
                          "binaries or source trees), --from N [--to N], or --since-last")
    if reference:
        return specs, parse_spec(reference)
    if since is not None:
        return specs, parse_spec(str(since["reference"]))
    if not specs:
        raise ConfigError("no release lies in the span given: nothing to watch")
    return specs, specs[0]


def _span(index: Callable[[], ReleaseIndex], first: str | None, last: str | None,
          since: dict[str, Any] | None, since_last: bool, journal_path: Path | None
          ) -> list[BuildSpec]:
    """The registry's releases from ``first`` (or the last watched) to ``last``."""
    if since is not None and not str(since.get("last_number", "")).isdigit():
        raise ConfigError(f"the last watch in {journal_path} ended on "
                          f"{since.get('last')!r}, not a release: give --from")
    if since is None and not first:
        raise ConfigError("give --from N (the first release to watch)"
                          + (f": {journal_path} holds no earlier watch of this selection"
                             if since_last else ""))
    low = int(since["last_number"]) if since is not None else release_number(str(first))
    high = release_number(last) if last else index().numbers[-1]
    if low > high:
        raise ConfigError(f"--from b{low} comes after --to b{high}: write the older first")
    inside = index().between(low, high)
    if not inside:
        index().get(low)  # names the nearest releases
    return [BuildSpec(r.tag, "release", r.number) for r in inside]


def run_watch(db: DbLocation, selection: Sequence[str], builder: Builder,
              specs: Sequence[BuildSpec], reference: BuildSpec, *, folder: Path | None = None,
              progress: Progress = print, **options: Any) -> WatchResult:
    """The watch of ``specs`` against ``reference``: each build A/B'd with the selection's
    pytest sessions into ``db``, the A/B documents in ``folder`` (default: beside the DB),
    the journal beside the DB (``options``: ``Watch``'s metrics, min_effect, busy,
    confirm, retry_failed, sessions, max_sessions)."""
    folder = folder or watch_folder(db, specs)
    runner = BuildRunner(db, selection, progress=progress, metrics=("decode", "ttft"),
                         log_dir=folder)
    return Watch(
        WatchJournal(journal_for(db)), folder, selection_key(selection, ["watch"]),
        provide=builder, measure=lambda a, b, n: run_paired_session(runner, a, b, n),
        lab=lambda: RunnerLab(runner, builder.release),
        between=lambda lo, hi: [n for n in builder.index().numbers if lo < n < hi],
        progress=progress, windows=HostWindows(journal_for(db, ".windows.jsonl")),
        **options).run(specs, reference)
