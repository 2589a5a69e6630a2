"""Bridge between a run and the results store: one run row, many recorded results.

The run row is created on the first result (a session that measures nothing writes
nothing); every ``record`` call commits before it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_tokperf.bench.models import ModelFiles
from pytest_tokperf.ceiling import decode_efficiency
from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, ModelInfo, RunInfo, Verdict
from pytest_tokperf.storage.store import ResultStore, Stored


@dataclass
class Recorder:
    store: ResultStore | None
    location: Path | None
    pytest_version: str | None = None
    models: ModelFiles = field(default_factory=ModelFiles)
    run_id_preset: str | None = None
    """The run id to store (chosen before the first result: the run's prompt salts derive
    from it); None: a new one at the first result."""
    _run: RunInfo | None = field(default=None, init=False)

    @classmethod
    def open(cls, path: Path | None, pytest_version: str | None = None,
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
        if said is not None:
            return said
        return self.models.info(Path(key)) if key else None

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
        """Store one result; None when not storing. ``identity`` asks the engine about its
        model when no file can be read here."""
        if self.store is None:
            return None
        from pytest_tokperf.environment import collect_run_info

        store = self.store
        if self._run is None:
            run = collect_run_info(pytest_version=self.pytest_version)
            if self.run_id_preset is not None:
                run = replace(run, run_id=self.run_id_preset)
            store.begin_run(run)
            self._run = run
        return store.record(
            self._run.run_id,
            test_id,
            result,
            model=self.model(model_path, result, identity),
            hardware=hardware,
            ceiling=ceiling,
            efficiency=decode_efficiency(result, ceiling),
            verdict=verdict,
        )

    def close(self) -> None:
        if self.store is None:
            return
        if self._run is not None:
            self.store.finish_run(self._run.run_id)
        self.store.close()
