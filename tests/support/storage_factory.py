"""Value types for storage tests, every optional field filled unless a test says not."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
import hashlib
import random
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from pytest_tokperf.storage.location import PgUrl
from pytest_tokperf.storage.store import ResultStore
from pytest_tokperf.storage.rows import (
    environment_row,
    result_row,
    run_row,
    series_key,
    series_of,
    series_row,
)
from pytest_tokperf.storage.schema import MIGRATIONS
from pytest_tokperf.results import (
    Bandwidth,
    BenchResult,
    Ceiling,
    EngineInfo,
    Footprint,
    HardwareInfo,
    MachineLoad,
    ModelInfo,
    RunInfo,
    Sample,
    Summary,
    Workload,
)


def make_run(
    run_id: str = "run-1", started_at: str = "2026-01-02T03:04:05.000000+00:00"
) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        started_at=started_at,
        host="bench-host",
        os="Linux-6.8-x86_64",
        python="CPython 3.11.7",
        plugin_version="0.1.0",
        pytest_version="9.2.0",
        project_commit="0123456789abcdef0123456789abcdef01234567",
        ci_provider="github-actions",
        ci_job="bench#42",
    )


def make_engine(**changes: Any) -> EngineInfo:
    engine = EngineInfo(
        name="llama-server",
        version="b6000",
        build="abc1234",
        base_url="http://127.0.0.1:8080",
        backend="CUDA",
        model_path="/models/tiny.gguf",
        model_name="tiny",
        context_size=4096,
        threads=8,
        speculative=False,
        settings=(("batch_size", "2048"), ("flash_attn", "true"), ("kv_type", "q8_0")),
    )
    return dataclasses.replace(engine, **changes)


def make_sample(i: int = 0) -> Sample:
    return Sample(
        ttft_s=0.05 + i / 1000,
        prefill_tokens_per_s=5000.0 + i,
        decode_tokens_per_s=100.0 + i / 10,
        prompt_tokens=512,
        generated_tokens=128,
        inter_token_s=(0.01, 0.0101 + i / 1e5, 0.0099),
        engine_prefill_s=0.045,
        engine_prefill_tokens_per_s=5100.5,
        engine_decode_tokens_per_s=101.25 + i / 10,
        cached_prompt_tokens=0,
        speculative=False,
        text_chars=640 + i,
    )


def _summary(base: float) -> Summary:
    return Summary(
        median=base,
        mean=base * 1.01,
        stdev=base / 50,
        minimum=base * 0.97,
        maximum=base * 1.04,
        n=3,
    )


def make_result(
    *, engine: EngineInfo | None = None, workload: Workload | None = None, decode: float = 100.0
) -> BenchResult:
    return BenchResult(
        workload=workload or Workload(prompt_tokens=512, generate_tokens=128, repetitions=3),
        engine=engine or make_engine(),
        samples=tuple(make_sample(i) for i in range(3)),
        ttft_s=_summary(0.05),
        decode_tokens_per_s=_summary(decode),
        prefill_tokens_per_s=_summary(5000.0),
        engine_decode_tokens_per_s=_summary(decode * 1.01),
        engine_prefill_tokens_per_s=_summary(5100.0),
        inter_token_p50_s=0.01,
        inter_token_p90_s=0.012,
        inter_token_p99_s=0.02,
        decode_agreement=0.003,
        ttft_minus_engine_prefill_s=0.004,
        notes=("warm cache", "second note"),
    )


def make_model(**changes: Any) -> ModelInfo:
    model = ModelInfo(
        file_name="tiny.gguf",
        path="/models/tiny.gguf",
        file_bytes=123_456_789,
        content_hash="f" * 64,
        architecture="llama",
        parameter_count=1_100_000_000,
        quant_types=("Q4_K", "Q6_K"),
        file_type="MOSTLY_Q4_K_M",
        context_length=8192,
    )
    return dataclasses.replace(model, **changes)


def make_hardware(**changes: Any) -> HardwareInfo:
    hardware = HardwareInfo(
        name="NVIDIA H200",
        kind="gpu",
        driver="570.86",
        memory_bytes=141 * 2**30,
        spec_bandwidth=Bandwidth(4.8e12, "catalog", "H200 SXM datasheet"),
        measured_bandwidth=Bandwidth(4.1e12, "measured", "copy probe 1 GiB"),
        peak_flops=989e12,
        detail="SXM5",
    )
    return dataclasses.replace(hardware, **changes)


def make_ceiling() -> Ceiling:
    footprint = Footprint(
        architecture="llama",
        weights_bytes=600_000_000,
        kv_bytes_per_position=65_536,
        depth_tokens=0,
        kv_type="q8_0",
        resident_bytes=650_000_000,
        active_parameters=1_000_000_000,
        total_parameters=1_100_000_000,
        expert_count=0,
        experts_used=0,
        tied_output=True,
        warnings=("no output tensor",),
    )
    return Ceiling(
        bandwidth=Bandwidth(4.1e12, "measured", "copy probe 1 GiB"),
        footprint=footprint,
        decode_tokens_per_s=6833.3,
        prefill_tokens_per_s=12000.0,
    )


def record_kwargs() -> dict[str, Any]:
    """Keyword arguments for ``ResultStore.record`` with every optional part present."""
    return {
        "model": make_model(),
        "hardware": make_hardware(),
        "ceiling": make_ceiling(),
        "efficiency": 0.0146,
        "verdict": "pass",
    }


def result_at(build: str, decode: float, rng: random.Random, cv: float = 0.01) -> BenchResult:
    """A result of engine ``build`` whose 5 samples decode at ``decode`` tok/s (CV ``cv``)."""
    samples = tuple(
        dataclasses.replace(make_sample(i), decode_tokens_per_s=rate, engine_decode_tokens_per_s=rate,
                            ttft_s=0.05 * rng.gauss(1, cv))
        for i, rate in enumerate(decode * rng.gauss(1, cv) for _ in range(5))
    )
    return dataclasses.replace(make_result(engine=make_engine(version=build, build=build)),
                               samples=samples)


def fill_history(db: Path | PgUrl, levels: list[tuple[str, float]], seed: int = 1, *,
                 test_id: str = "t::decode", speculative: bool = False, finish: bool = False,
                 load: MachineLoad | None = None,
                 probed: float | Sequence[float] | None = None,
                 ) -> tuple[ResultStore, str]:
    """A DB with one run per (build, decode level), 5 samples each at CV 1%;
    ``speculative``: with a draft model (another series of the same test); ``finish``:
    each run finished (committed, on PostgreSQL); ``load``: every run measured on a
    machine in that state; ``probed``: each run's bandwidth probe, GB/s (one for all, or
    one per level)."""
    rng = random.Random(seed)
    store = ResultStore.open(db)
    key = ""
    for i, (build, level) in enumerate(levels):
        run = make_run(run_id=f"run-{i}", started_at=f"2026-01-{i + 1:02d}T00:00:00+00:00")
        store.begin_run(run)
        result = result_at(build, level, rng)
        if load is not None:
            result = dataclasses.replace(result, load=load)
        if speculative:
            engine = dataclasses.replace(result.engine, speculative=True, settings=(
                *result.engine.settings, ("draft_model", "draft.gguf")))
            result = dataclasses.replace(result, engine=engine)
        store.record(run.run_id, test_id, result, model=make_model(),
                     hardware=make_hardware() if probed is None else probed_hardware(
                         probed if isinstance(probed, (int, float)) else probed[i]),
                     ceiling=make_ceiling(), efficiency=0.7, verdict="unchecked")
        if finish:
            store.finish_run(run.run_id)
        key = series_key(test_id, result, make_model())
    return store, key


def probed_hardware(gb_per_s: float) -> HardwareInfo:
    """The test hardware with a bandwidth probe of ``gb_per_s`` (a per-result figure)."""
    return make_hardware(measured_bandwidth=Bandwidth(gb_per_s * 1e9, "measured",
                                                      f"probe {gb_per_s} GB/s"))


def v6_db(path: Path) -> None:
    """A schema-6 file as the previous release wrote it: an environment per result."""
    db = Database(path)
    for step in MIGRATIONS[:6]:
        step(db)
    db.execute("PRAGMA user_version = 6")
    run = make_run()
    db.table("runs").insert(run_row(run))
    for i, gb in enumerate((31.0, 64.0)):
        engine = make_engine(base_url=f"http://127.0.0.1:{50000 + i}")
        result = make_result(engine=engine)
        env = environment_row(engine, make_model(), probed_hardware(gb))
        env["env_hash"] = hashlib.sha256(repr(sorted(env.items())).encode()).hexdigest()
        env_id = db.table("environments").insert(env).last_rowid
        series = series_of("t::decode", result, make_model())
        db.table("series").insert(series_row(series), ignore=True)
        row = {k: v for k, v in result_row(result, make_ceiling(), 0.5, "unchecked").items()
               if k in db.table("results").columns_dict}
        db.table("results").insert({**row, "run_id": run.run_id, "environment_id": env_id,
                                    "series_key": series.key, "test_id": "t::decode",
                                    "created_at": f"2026-01-0{i + 1}T00:00:00+00:00"})
    db.close()


def judge_every_result(store: ResultStore, verdict: str = "regression") -> int:
    """Store a gate verdict on decode for every result in ``store`` (what a pytest session
    with history stores at its end); returns how many."""
    from pytest_tokperf.storage.records import GateVerdict

    ids = [row["id"] for row in store.query("SELECT id FROM results ORDER BY id")]
    store.save_gate_verdicts(GateVerdict(
        result_id=i, metric="decode", verdict=verdict, relative_change=-0.23, ci_low=-0.25,
        ci_high=-0.21, p_value=1e-9, n_baseline=25, n_current=5, baseline="b00..b04 (5 runs)",
        correction="Holm over 2", reason="decode -23.0% [-25.0%, -21.0%]") for i in ids)
    return len(ids)
