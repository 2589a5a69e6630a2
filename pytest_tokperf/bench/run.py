"""``BenchRun``: one benchmarking run, the composition root of the library.

The pytest plugin and ``tokperf bench`` both hold one; nothing else assembles an engine
session, ceilings, a results store and a regression gate. ``open`` checks what it can
before any engine starts, ``tok_bench`` hands out ``TokBench`` values whose results
``record`` stores and judges as they finish, ``finish`` settles the gate's verdicts
together and ``close`` stops the engine and closes the store.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tokperf.bench.ceilings import DEFAULT_KV_TYPE, CeilingSource, ModelFiles
from pytest_tokperf.bench.fixture import WORKLOAD_DEFAULTS, ABPlan, Revise, TokBench
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.bench.recorder import Recorder
from pytest_tokperf.bench.session import EngineSession, check_model_file
from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.engines.registry import EngineRegistry
from pytest_tokperf.errors import ConfigError, ModelFileError, StorageError
from pytest_tokperf.results import BenchResult, Ceiling, ModelInfo, Progress, Verdict
from pytest_tokperf.settings import BUILTIN_MODELS, Settings

if TYPE_CHECKING:
    from pytest_tokperf.bench.ab import ABResult, Restart
    from pytest_tokperf.engines.base import Engine
    from pytest_tokperf.bench.gate import Gate, GateFinding
    from pytest_tokperf.stats.moved import HostExponents
    from pytest_tokperf.storage.store import Stored

VERDICT_RANK: dict[Verdict, int] = {"unchecked": 0, "pass": 1, "unstable": 2, "suspect": 3,
                                    "fail": 4, "busy": 5, "error": 6}
"""Which verdict wins when a test's own assertion revises the recorded one."""


def check_report_paths(settings: Settings) -> None:
    """Refuse a report path that cannot be written, before anything is measured (only
    its folders are created)."""
    flag = "--tokperf-report"
    for value in filter(None, (settings.report_md, settings.report_json, settings.report_html,
                               settings.report_histogram)):
        path = Path(value).expanduser()
        if path.is_dir():
            raise ConfigError(f"{flag} {value!r} is a folder; name the file to write, e.g. "
                              f"{str(path / 'tokperf-report')!r} plus its extension")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{flag} {value!r}: its folder cannot be made ({exc}); pass a "
                              f"path in a writable folder") from exc
        existed = path.exists()
        try:  # os.access says yes to root everywhere, /proc included: try it
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise ConfigError(f"{flag} {value!r} cannot be written ({exc.strerror or exc}); "
                              f"pass a path in a writable folder") from exc
        if not existed:
            path.unlink(missing_ok=True)


SALTS_PER_BENCH = 10**6
"""Salts one ``TokBench`` may use (1000 per call, ``TokBench._next_options``)."""


def _check_model(models: ModelFiles, model: str, option: str) -> None:
    """Refuse a model file that cannot be read, its whole header parsed once for the run."""
    path = Path(model).expanduser()
    source = f"{option} {model!r}"
    check_model_file(path, source=source)
    try:
        models.load(path)
    except ModelFileError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


def salt_seed(run_id: str) -> int:
    """The first prompt salt of the run whose stored id is ``run_id``: one of 2**24 starts,
    each with room for 1000 ``TokBench`` values; the same run id gives the same prompts."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return int.from_bytes(digest[:3], "big") * SALTS_PER_BENCH * 1000


def ceiling_source(settings: Settings, models: ModelFiles) -> CeilingSource:
    """The ceilings of an engine started or attached with ``settings`` (K and V cache types
    f16 unless its llama-server arguments ask for others)."""
    from pytest_tokperf.engines.speed_settings import parse_llama_server_args

    asked = parse_llama_server_args(settings.server_args)
    return CeilingSource(explicit_bandwidth=settings.bandwidth, threads=settings.threads,
                         kv_type=asked.cache_type_k or DEFAULT_KV_TYPE,
                         kv_type_v=asked.cache_type_v or DEFAULT_KV_TYPE,
                         models=models, device=settings.device,
                         calibration=settings.bandwidth_file)


@dataclass(frozen=True, slots=True)
class Recorded:
    """One result as the run recorded it: where it was stored and how the gate saw it at
    record time (the session's final verdicts come from ``BenchRun.finish``)."""

    test_id: str
    result: BenchResult
    ceiling: Ceiling | None
    verdict: Verdict
    stored: Stored | None = None
    findings: tuple[GateFinding, ...] = ()

    @property
    def efficiency(self) -> float | None:
        return decode_efficiency(self.result, self.ceiling)

    @property
    def series_key(self) -> str | None:
        return self.stored.series_key if self.stored is not None else None

    @property
    def result_id(self) -> int | None:
        return self.stored.result_id if self.stored is not None else None


@dataclass
class BenchRun:
    """Engine session, ceilings, store and gate of one run; see the module doc."""

    settings: Settings
    session: EngineSession
    ceilings: CeilingSource
    recorder: Recorder
    gate: Gate
    recorded: list[Recorded] = field(default_factory=list)
    findings: list[GateFinding] = field(default_factory=list)
    """The final gate verdicts, once ``finish`` ran."""
    gate_summary: str = ""
    """How the final verdicts were controlled together, and their counts (one line)."""
    control: EngineSession | None = None
    """The same-run A/B's control engine (``Settings.ab``), started beside the candidate."""
    ab_results: list[tuple[str, ABResult]] = field(default_factory=list)
    """Every same-run A/B of the run, by test id, in the order measured."""
    _finished: bool = field(default=False, init=False)
    _problems_seen: int = field(default=0, init=False)
    _identity_asked: bool = field(default=False, init=False)
    _identity: ModelInfo | None = field(default=None, init=False)
    salt_seed: int = 0
    """Where this run's prompt salts start: no cache serves an earlier run's prompts."""
    _benches: int = field(default=0, init=False)
    _exponents: HostExponents | None = field(default=None, init=False)

    @classmethod
    def open(
        cls,
        settings: Settings,
        *,
        log_dir: Path,
        registry: EngineRegistry | None = None,
        progress: Progress | None = None,
        pytest_version: str | None = None,
    ) -> BenchRun:
        """Check the settings that can be checked now, open the store, start nothing:
        ``ConfigError`` (a missing binary or model file, a bad baseline) or ``StorageError``
        (an unwritable DB) before any engine starts."""
        from pytest_tokperf.bench.gate import Gate

        gate = Gate(settings.baseline, min_effect=settings.min_effect)
        models = ModelFiles()
        sides = [(settings, "--tokperf-model")]
        if settings.ab and settings.active:
            sides.append((settings.ab_settings(), "--tokperf-ab-model"))
        for side, option in sides:
            if side.url is None and side.engine in (None, "llama-server"):
                from pytest_tokperf.launch.process import resolve_server_binary

                resolve_server_binary(side.server_bin, side.engine_version)
                if side.model not in BUILTIN_MODELS:
                    _check_model(models, side.model, option)
        if settings.active:
            check_report_paths(settings)
        recorder = Recorder.open(settings.db, pytest_version, models) if settings.active \
            else Recorder.disabled()
        run_id = str(uuid.uuid4())
        recorder.run_id_preset = run_id
        return cls(
            settings=settings,
            session=EngineSession(settings=settings, log_dir=log_dir, progress=progress,
                                  registry=registry),
            ceilings=ceiling_source(settings, models),
            recorder=recorder,
            gate=gate,
            salt_seed=salt_seed(run_id),
            control=EngineSession(settings=settings.ab_settings(),
                                  log_dir=log_dir / "control", progress=progress,
                                  registry=registry) if settings.ab and settings.active else None,
        )

    def tok_bench(
        self,
        test_id: str,
        *,
        cls: type[TokBench] = TokBench,
        repetitions: int | None = None,
        warmup: int | None = None,
        min_efficiency: float | None = None,
        workload_defaults: tuple[tuple[str, int | bool], ...] = (),
        progress: Progress | None = None,
        on_record: Callable[[Recorded], None] | None = None,
    ) -> TokBench:
        """A ``TokBench`` (or subclass ``cls``) whose results this run records as ``test_id``;
        unset arguments come from the settings, ``on_record`` sees each ``Recorded``."""
        unknown = {name for name, _ in workload_defaults} - set(WORKLOAD_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown workload argument(s) {sorted(unknown)!r}; known: "
                              f"{', '.join(WORKLOAD_DEFAULTS)}")
        s = self.settings

        def record(result: BenchResult, ceiling: Ceiling | None, verdict: Verdict) -> Revise:
            recorded = self.record(test_id, result, ceiling, verdict)
            if on_record is not None:
                on_record(recorded)

            def revise(final: Verdict) -> None:
                revised = self.revise(recorded, final)
                if revised is not None and on_record is not None:
                    on_record(revised)

            return revise

        # Each TokBench its own salts: a later test's prompts never start like an earlier's
        salt_base = self.salt_seed + SALTS_PER_BENCH * self._benches
        self._benches += 1
        return cls(
            engine=self.session.engine,
            record=record,
            repetitions=s.repetitions if repetitions is None else repetitions,
            warmup=s.warmup if warmup is None else warmup,
            options=replace(MeasureOptions.of(s), salt_base=salt_base),
            max_repetitions=s.max_repetitions,
            ceiling_for=lambda result: self.ceilings.ceiling_for(result, self.session.model_path),
            before_measure=self.ceilings.probe,
            min_efficiency=s.min_efficiency if min_efficiency is None else min_efficiency,
            progress=progress,
            workload_defaults=workload_defaults,
            speculative_engine=lambda draft: self.session.speculative_engine(draft)[0],
            ab=self._ab_plan(test_id),
            engine_pids=self._engine_pids,
            judge_busy=s.busy.judges,
            busy_wait_s=s.busy.waits_s,
            busy_wait_option=s.option_name("busy_wait"),
        )

    def _engine_pids(self) -> tuple[int, ...]:
        control = self.control.pids() if self.control is not None else ()
        return (*self.session.pids(), *control)

    def _ab_plan(self, test_id: str) -> ABPlan | None:
        """How this run's tok_bench calls become same-run A/Bs (None: they do not)."""
        if self.control is None:
            return None
        from pytest_tokperf.builds.identity import build_changes

        s, control = self.settings, self.control

        def changed() -> str:
            return build_changes(control.binary_path, self.session.binary_path)

        def restart() -> Restart | None:
            if not (self.session.restartable() and control.restartable()):
                return None

            def again(candidate_first: bool) -> tuple[Engine, Engine, tuple[int, ...]]:
                for side in ((self.session, control) if candidate_first
                             else (control, self.session)):
                    side.restart()
                return control.engine(), self.session.engine(), self._engine_pids()

            return again

        return ABPlan(control=control.engine, min_effect=s.ab_min_effect,
                      control_model_given=s.ab_model is not None, changed=changed,
                      on_result=lambda ab: self.ab_results.append((test_id, ab)),
                      starts=s.ab_starts, restart=restart)

    def record(
        self, test_id: str, result: BenchResult, ceiling: Ceiling | None, verdict: Verdict
    ) -> Recorded:
        """Store one result (committed on return; on PostgreSQL at the run's end) with what
        the engine and the run noticed among its notes, then judge it against its history."""
        noticed = [p for p in dict.fromkeys((*result.engine.warnings,
                                             *self.ceilings.problems[self._problems_seen:]))
                   if p not in result.notes]
        self._problems_seen = len(self.ceilings.problems)
        if noticed:
            result = replace(result, notes=(*result.notes, *noticed))
        stored = self.recorder.record(test_id, result, ceiling, verdict,
                                      model_path=self.session.model_path,
                                      hardware=self.ceilings.hardware,
                                      identity=self._engine_identity)
        findings: tuple[GateFinding, ...] = ()
        store = self.recorder.store
        if stored is not None and store is not None and verdict != "error":
            if self._exponents is None:  # the host's bandwidth relation, once a run
                from pytest_tokperf.storage.history import bandwidth_exponents

                run = self.recorder.run
                self._exponents = bandwidth_exponents(store, run.host if run else None)
            findings = tuple(self.gate.judge(
                store, test_id=test_id, series_key=stored.series_key, samples=result.samples,
                current_build=result.engine.build or result.engine.version or "?",
                run_id=self.recorder.run_id, result_id=stored.result_id,
                concurrency=result.workload.concurrency, load=result.load,
                exponents=self._exponents,
            ))
        recorded = Recorded(test_id, result, ceiling, verdict, stored, findings)
        self.recorded.append(recorded)
        return recorded

    def _engine_identity(self) -> ModelInfo | None:
        """What the engine says about its model (asked once per run)."""
        if not self._identity_asked:
            from pytest_tokperf.engines.base import model_identity

            self._identity_asked = True
            self._identity = model_identity(self.session.engine())
        return self._identity

    def revise(self, recorded: Recorded, verdict: Verdict) -> Recorded | None:
        """The test decided (an explicit assertion): store its verdict if it is worse than
        the one recorded; returns the revised ``Recorded``, or None when nothing changed."""
        current = next((r for r in self.recorded if r is recorded or (
            r.stored is not None and r.stored == recorded.stored)), recorded)
        if VERDICT_RANK[verdict] <= VERDICT_RANK[current.verdict]:
            return None
        revised = replace(current, verdict=verdict)
        self.recorded = [revised if r is current else r for r in self.recorded]
        if revised.stored is not None and self.recorder.store is not None:
            try:
                self.recorder.store.set_verdict(revised.stored.result_id, verdict)
            except StorageError as exc:
                self.recorder.store_error = str(exc)
        return revised

    def finish(self) -> list[GateFinding]:
        """Control the session's gate verdicts together, store and return them (once)."""
        if self._finished:
            return self.findings
        self._finished = True
        self.findings, self.gate_summary = self.gate.finish(
            [f for r in self.recorded for f in r.findings])
        store = self.recorder.store
        if store is not None:
            try:
                store.save_gate_verdicts(v for f in self.findings if (v := f.stored()) is not None)
            except StorageError as exc:  # the results are stored (or journaled) already
                self.recorder.store_error = str(exc)
        return self.findings

    def serve(self, settings: Settings) -> None:
        """Measure what follows on an engine started with ``settings`` (the next point of
        ``tokperf bench``'s grid); the store, the gate and everything recorded stay. Take
        new ``TokBench`` values: older ones measure the stopped engine. ``ConfigError`` for
        an unreadable model file (before anything stops) and with a same-run A/B."""
        if settings.ab or self.control is not None:
            raise ConfigError("a same-run A/B measures one server configuration against "
                              "another engine; it cannot change configuration mid-run")
        models = self.ceilings.models
        if settings.url is None and settings.model not in BUILTIN_MODELS:
            _check_model(models, settings.model, "--tokperf-model")
        old = self.session
        try:
            old.close()
        finally:
            self.ceilings.close()
        self.settings = settings
        self.session = EngineSession(settings=settings, log_dir=old.log_dir,
                                     progress=old.progress, registry=old.registry)
        self.ceilings = ceiling_source(settings, models)
        self._problems_seen = 0
        self._identity_asked, self._identity = False, None

    def close(self) -> str | None:
        """Stop the engine (and any drafting engine) and close the store; returns the
        recorder's line about results kept only in the journal, if not yet announced."""
        try:
            try:
                self.session.close()
            finally:
                if self.control is not None:
                    self.control.close()
        finally:
            self.ceilings.close()
            lost = self.recorder.close()
        return lost
