"""``tokperf bench``'s loop: each server configuration of the grid started once, its tests
measured through the run's ``TokBench`` values, every result recorded a ``BenchRow``.

A prompt-only test repeats a fixed count (``-r N``, else the least of ``MIN-MAX``) and
its decode is held to no efficiency floor and no spread limit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_tokperf.bench.grid import BenchPlan, BenchTest
from pytest_tokperf.errors import ConfigError, EngineUnavailable, TokperfError

if TYPE_CHECKING:
    from pytest_tokperf.bench.run import BenchRun, Recorded
    from pytest_tokperf.results import HardwareInfo, ModelInfo, Progress
    from pytest_tokperf.settings import Settings

TEST_ID = "tokperf bench"
"""The start of every result's test id; the test and the grid's options given follow."""


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One test's result with what llama-bench reports beside it."""

    test: BenchTest
    recorded: Recorded
    test_time: str
    """RFC 3339 UTC second the test started, as llama-bench's ``test_time``."""
    created_at: str
    """When the result was recorded (ISO 8601 UTC)."""
    run_id: str | None
    series_key: str | None
    model: ModelInfo | None
    model_bytes: int | None
    """Bytes of the model's tensors (llama-bench's ``model_size``)."""
    cpu_info: str
    gpu_info: str
    binary: Path | None = None
    """The llama-server binary started (None: attached): its source names its fields."""


@dataclass
class Outcome:
    """What the run came to: rows to print, failed tests, configurations that failed."""

    rows: list[BenchRow]
    failures: list[str]
    broken: list[str]
    """A server that could not be started or reached, a configuration refused (exit 2)."""
    interrupted: bool = False


def measure(run: BenchRun, chosen: BenchPlan, settings: Sequence[Settings], outcome: Outcome,
            *, draft: str | None, progress: Progress, named: Callable[[str], str]) -> None:
    """Every test on every configuration (``settings``, the first the run's own) into
    ``outcome``; a server that cannot start skips the rest of its configuration, a failed
    test nothing else. ``named`` writes an error with the bench's option names."""
    started = settings[0]
    for point, point_settings in zip(chosen.points, settings, strict=True):
        suffix = point.label(chosen.several_models)
        if point_settings != started:
            try:
                run.serve(point_settings)
            except ConfigError as exc:
                outcome.broken.append(named(f"{suffix}: {exc}" if suffix else str(exc)))
                continue
            started = point_settings
        for test in chosen.tests:
            label = " ".join(p for p in (TEST_ID, test.label, suffix) if p)
            progress(f"measuring {label.removeprefix(TEST_ID + ' ')}")
            try:
                _run_test(run, test, label, outcome, progress, draft)
            except KeyboardInterrupt:
                outcome.failures.append(f"{label}: interrupted")
                outcome.interrupted = True
                return
            except (ConfigError, EngineUnavailable) as exc:
                outcome.broken.append(named(f"{suffix}: {exc}" if suffix else str(exc)))
                break
            except TokperfError as exc:
                outcome.failures.append(f"{label}: {type(exc).__name__}: {named(str(exc))}")
            except AssertionError as exc:  # the efficiency floor: recorded, keep going
                outcome.failures.append(f"{label}: {exc}")


def _run_test(run: BenchRun, test: BenchTest, label: str, outcome: Outcome,
              progress: Progress, draft: str | None) -> None:
    """One test, with its speculative A/B (``--draft``) when it generates, each result a row."""
    s = run.settings
    test_time = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    recorded_at: dict[int, str] = {}

    def on_record(recorded: Recorded) -> None:
        from pytest_tokperf.environment import utc_now

        index = next(i for i, r in enumerate(run.recorded) if r is recorded)
        recorded_at.setdefault(index, utc_now())

    first = len(run.recorded)
    fixed = s.repetitions if s.repetitions is not None or test.kind != "pp" \
        else s.min_repetitions
    tok_bench = run.tok_bench(label, repetitions=fixed, on_record=on_record,
                              progress=progress)
    if test.kind == "pp":  # 2 streamed tokens: no decode to hold to a floor or a spread
        tok_bench = replace(tok_bench, min_efficiency=None,
                            options=replace(tok_bench.options, max_cv=math.inf))
    try:
        tok_bench(prompt_tokens=test.prompt_tokens, generate_tokens=test.generate_tokens,
                  depth_tokens=test.n_depth, concurrency=test.concurrency,
                  cached_prefix_tokens=test.warm, chat=test.chat)
        if draft and test.kind != "pp":
            tok_bench.speculative(draft, test.prompt_tokens, test.generate_tokens,
                                  depth_tokens=test.n_depth)
    finally:
        for index in range(first, len(run.recorded)):
            outcome.rows.append(bench_row(run, test, index, test_time,
                                          recorded_at.get(index) or test_time))


def bench_row(run: BenchRun, test: BenchTest, index: int, test_time: str, created_at: str
         ) -> BenchRow:
    """The row of ``run.recorded[index]``: its model, devices, series and run."""
    from pytest_tokperf.storage.rows import series_key

    recorded = run.recorded[index]
    path = run.session.model_path
    model = run.recorder.model(path, recorded.result)
    model_bytes = None
    if path is not None:
        try:
            loaded = run.recorder.models.load(path)
            model_bytes = getattr(loaded, "tensor_bytes", None)
        except TokperfError:
            pass
    if model_bytes is None and model is not None:
        model_bytes = model.file_bytes
    cpu, gpu = _devices(run.ceilings.hardware, recorded)
    return BenchRow(
        test=test, recorded=recorded, test_time=test_time, created_at=created_at,
        run_id=run.recorder.run_id or run.recorder.run_id_preset,
        series_key=recorded.series_key or series_key(recorded.test_id, recorded.result, model),
        model=model, model_bytes=model_bytes, cpu_info=cpu, gpu_info=gpu,
        binary=run.session.binary_path)


def _devices(hardware: HardwareInfo | None, recorded: Recorded) -> tuple[str, str]:
    """llama-bench's ``cpu_info`` and ``gpu_info``: the machine's CPU, the GPUs the
    engine used (their descriptions, else the device the ceiling was computed for)."""
    from pytest_tokperf.engines.speed_settings import ServerSettings

    gpus = [d.description or d.name
            for d in ServerSettings.from_engine(recorded.result.engine).gpu_devices]
    if hardware is not None and hardware.kind == "cpu":
        return hardware.name, ", ".join(gpus)
    if not gpus and hardware is not None and hardware.kind in ("gpu", "apple"):
        gpus = [hardware.name]
    return _cpu_name(), ", ".join(gpus)


@functools.cache
def _cpu_name() -> str:
    """The machine's CPU where the engine runs on a GPU (asked once)."""
    from pytest_tokperf.hardware.bandwidth import device_hardware
    from pytest_tokperf.hardware.placement import Device

    cpu = device_hardware(Device("cpu"))
    return cpu.name if cpu is not None else ""


def check_models(chosen: BenchPlan, *, attached: bool) -> None:
    """Refuse a model file a started server could not load, before anything starts."""
    from pytest_tokperf.bench.session import check_model_file
    from pytest_tokperf.settings import BUILTIN_MODELS

    for model in dict.fromkeys(p.model for p in chosen.points):
        if model not in BUILTIN_MODELS and not attached:
            check_model_file(Path(model).expanduser(), source=f"--tokperf-model {model!r}")
