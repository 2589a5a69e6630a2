"""Bridge between a run and the results store: one run row, many recorded results.

On SQLite every ``record`` commits before it returns; on PostgreSQL the run is one
transaction that ``close`` commits. Each result is first written to the run's journal, where
one the database cannot take stays (``lost_line``). Nothing here raises ``StorageError``
after the database was opened: a measured result is never traded for a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_tokperf.bench.ceilings import ModelFiles
from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.errors import StorageError
from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, ModelInfo, RunInfo, Verdict
from pytest_tokperf.storage.journal import Journal, journal_line
from pytest_tokperf.storage.location import DbLocation, local_base
from pytest_tokperf.storage.store import ResultStore, Stored


@dataclass
class Recorder:
    store: ResultStore | None
    location: DbLocation | None
    pytest_version: str | None = None
    models: ModelFiles = field(default_factory=ModelFiles)
    run_id_preset: str | None = None
    """The run id to store, chosen before the first result (the prompt salts derive from
    it); None: a new one."""
    _run: RunInfo | None = field(default=None, init=False)
    journal: Journal | None = field(default=None, init=False)
    unstored: list[str] = field(default_factory=list, init=False)
    """Test ids of results the database did not take (they are in the journal)."""
    store_error: str | None = field(default=None, init=False)
    """The database's last refusal, for ``lost_line``."""
    _announced: int = field(default=0, init=False)
    _held: list[str] = field(default_factory=list, init=False)
    """Test ids stored in a run not committed yet (PostgreSQL): lost if the commit fails."""

    @classmethod
    def open(cls, path: DbLocation | None, pytest_version: str | None = None,
             models: ModelFiles | None = None) -> Recorder:
        """Open (creating or migrating) the DB at ``path``; None writes nothing."""
        if path is None:
            return cls.disabled()
        return cls(store=ResultStore.open(path, check_writable=True), location=path,
                   pytest_version=pytest_version,
                   models=models or ModelFiles())

    @classmethod
    def disabled(cls) -> Recorder:
        return cls(store=None, location=None)

    @property
    def run(self) -> RunInfo | None:
        """The run row, once the first result created it."""
        return self._run

    @property
    def run_id(self) -> str | None:
        return self._run.run_id if self._run is not None else None

    def model(self, path: Path | None, result: BenchResult,
              identity: Callable[[], ModelInfo | None] | None = None) -> ModelInfo | None:
        """The identity of the model ``result`` was measured on: from its file (parsed once
        per run), else what the engine says about it (``identity``), else its bare name."""
        key = str(path) if path is not None else (result.engine.model_path or "")
        if key and Path(key).exists():  # a GGUF file or a Hugging Face folder
            return self.models.info(Path(key))
        said = identity() if identity is not None else None
        return said or (self.models.info(Path(key)) if key else None)

    def record(
        self,
        test_id: str,
        result: BenchResult,
        ceiling: Ceiling | None,
        verdict: Verdict,
        *,
        model_path: Path | None,
        hardware: HardwareInfo | None,
        identity: Callable[[], ModelInfo | None] | None = None,
    ) -> Stored | None:
        """Store one result (None: not storing); ``identity`` asks the engine its model."""
        if self.store is None or self.location is None:
            return None
        from pytest_tokperf.environment import collect_run_info, utc_now

        store = self.store
        if self._run is None:
            run = collect_run_info(pytest_version=self.pytest_version)
            if self.run_id_preset is not None:
                run = replace(run, run_id=self.run_id_preset)
            self._run = run
            self.journal = Journal.beside(local_base(self.location), run)
            self._try(lambda: store.begin_run(run))
        model = self.model(model_path, result, identity)
        efficiency = decode_efficiency(result, ceiling)
        created_at = utc_now()
        journal = self.journal
        assert journal is not None
        try:
            journal.append(journal_line(test_id, result, model=model, hardware=hardware,
                                        ceiling=ceiling, efficiency=efficiency,
                                        verdict=verdict, created_at=created_at))
        except OSError as exc:
            self.store_error = f"{self.store_error or ''} journal: {exc}".strip()
        run_id = self._run.run_id
        stored = self._try(lambda: store.record(
            run_id, test_id, result, model=model, hardware=hardware, ceiling=ceiling,
            efficiency=efficiency, verdict=verdict, created_at=created_at))
        if stored is None:
            self.unstored.append(test_id)
        elif store.backend.holds_run:
            self._held.append(test_id)
        return stored

    def _try(self, write: Callable[[], Stored | None]) -> Stored | None:
        """``write()``, or None with the refusal kept when the database will not take it."""
        try:
            return write()
        except (StorageError, OSError) as exc:
            self.store_error = str(exc)
            return None

    def lost_line(self) -> str | None:
        """One line for results in the journal only, with the import command (None: none)."""
        if not self.unstored or self.location is None:
            return None
        journal = self.journal
        where = " and ".join(repr(str(p)) for p in journal.paths) if journal and journal.paths \
            else None
        head = (f"tokperf: {len(self.unstored)} result(s) could not be stored in "
                f"{str(self.location)!r} ({self.store_error})")
        if where is None:
            return head + "; the journal could not be written either: see the report files"
        first = journal.paths[0] if journal else ""
        return (f"{head}; they are kept in the journal {where}: import them with "
                f"`tokperf import --db {self.location} {first}` once the database is writable "
                f"(or into another database)")

    def close(self) -> str | None:
        """Finish the run and close the store; the journal is deleted when every result
        is in the database. Returns ``lost_line()`` (also when finishing the run failed)."""
        if self.store is None:
            return None
        store = self.store
        if self._run is not None:
            run_id = self._run.run_id
            self._try(lambda: store.finish_run(run_id))  # a missing end time loses nothing
            if store.run_lost:  # the commit failed: none of the run is in the database
                self.unstored += self._held
            self._held = []
        try:
            store.close()
        except (StorageError, OSError) as exc:
            self.store_error = str(exc)
        if self.journal is not None and not self.unstored:
            self.journal.discard()
        return self.announce()

    def announce(self) -> str | None:
        """``lost_line()`` if results were lost since it was last announced, else None."""
        if len(self.unstored) <= self._announced:
            return None
        self._announced = len(self.unstored)
        return self.lost_line()

