"""Bridge between a session and the results store: one run, many recorded results.

The run row is created on the first result (a session that measures nothing writes
nothing); every ``record`` call commits before it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_tokperf.results import BenchResult, Ceiling, HardwareInfo, ModelInfo, RunInfo, Verdict
from pytest_tokperf.storage.store import ResultStore


@dataclass
class Recorder:
    store: ResultStore | None
    location: Path | None
    hardware: HardwareInfo | None = None
    pytest_version: str | None = None
    _run: RunInfo | None = field(default=None, init=False)
    _models: dict[str, ModelInfo] = field(default_factory=dict, init=False)

    @classmethod
    def open(cls, path: Path | None, pytest_version: str | None = None) -> Recorder:
        """Open (creating or migrating) the DB at ``path``; None writes nothing."""
        if path is None:
            return cls.disabled()
        return cls(store=ResultStore.open(path), location=path, pytest_version=pytest_version)

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

    def _model(self, path: Path | None, result: BenchResult) -> ModelInfo | None:
        from pytest_tokperf.bench.session import describe_model

        key = str(path) if path is not None else (result.engine.model_path or "")
        if not key:
            return None
        if key not in self._models:
            candidate = Path(key)
            self._models[key] = (
                describe_model(candidate) if candidate.is_file()
                else ModelInfo(file_name=candidate.name, path=key)
            )
        return self._models[key]

    def record(
        self,
        test_id: str,
        result: BenchResult,
        ceiling: Ceiling | None,
        verdict: Verdict,
        model_path: Path | None,
    ) -> tuple[int, str] | None:
        """Store one result; returns (result id, series key), or None when not storing."""
        if self.store is None:
            return None
        from pytest_tokperf.environment import collect_run_info
        from pytest_tokperf.storage.rows import series_key

        store = self.store
        if self._run is None:
            run = collect_run_info(pytest_version=self.pytest_version)
            store.begin_run(run)
            self._run = run
        efficiency = None
        if ceiling is not None and result.decode_tokens_per_s is not None:
            efficiency = result.decode_tokens_per_s.median / ceiling.decode_tokens_per_s
        model = self._model(model_path, result)
        result_id = store.record(
            self._run.run_id,
            test_id,
            result,
            model=model,
            hardware=self.hardware,
            ceiling=ceiling,
            efficiency=efficiency,
            verdict=verdict,
        )
        return result_id, series_key(test_id, result, model)

    def close(self) -> None:
        if self.store is None:
            return
        if self._run is not None:
            self.store.finish_run(self._run.run_id)
        self.store.close()
