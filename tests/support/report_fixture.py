"""A results database for report tests: three series over twelve engine builds.

* ``test_decode[short]`` (prompt 512): decode 100 tok/s on builds b6000-b6005, 88 from
  b6006 on (a 12% regression), verdict ``fail`` on the newest result;
* ``test_decode[long]`` (prompt 4096): 80 tok/s throughout, ``pass``;
* ``test_decode[deep]`` (prompt 512 at depth 8192): 60 tok/s throughout, ``unchecked``;
* with ``concurrency=True`` also ``test_batch`` at 1, 2 and 4 concurrent requests
  (88, 80 and 62 tok/s per request on the newest build; all streams' output 80, 140
  and 200 tok/s as measured, below per-stream x N because prefill is in the wall time).

Ceilings fall with depth, so efficiency differs per series. Samples carry a fixed
+/-0.5% wobble and each build a small drift, so the statistics see noise but every run
gives the same answer.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.support.storage_factory import (
    make_ceiling,
    make_engine,
    make_hardware,
    make_model,
    make_result,
    make_run,
    make_sample,
)

from pytest_tokperf.results import BenchResult, Ceiling, Summary, Verdict, Workload
from pytest_tokperf.storage.store import ResultStore

BUILDS = tuple(f"b{6000 + i}" for i in range(12))
STEP_AT = 6
WOBBLE = (0.0, 0.005, -0.004, 0.002, -0.003)
JITTER = (0.0, 0.003, -0.002, 0.001, -0.003, 0.002)
"""Build-to-build drift of the level; the newest build (11) gets 0, so its figures are round."""
SHORT = Workload(prompt_tokens=512, generate_tokens=128, repetitions=5)
LONG = Workload(prompt_tokens=4096, generate_tokens=128, repetitions=5)
DEEP = Workload(prompt_tokens=512, generate_tokens=128, depth_tokens=8192, repetitions=5)
CEILINGS = {SHORT: 125.0, LONG: 110.0, DEEP: 85.0}


def commit(i: int) -> str:
    return f"c0ffee{i:x}"


def bench(build: int, workload: Workload, decode: float, ttft_s: float) -> BenchResult:
    drift = JITTER[(build + 1) % len(JITTER)]
    decode, ttft_s = decode * (1 + drift), ttft_s * (1 - drift)
    samples = tuple(
        dataclasses.replace(
            make_sample(i), decode_tokens_per_s=decode * (1 + w),
            engine_decode_tokens_per_s=decode * (1 + w), ttft_s=ttft_s * (1 + w),
            prefill_tokens_per_s=workload.prompt_tokens / ttft_s * (1 - w),
            prompt_tokens=workload.prompt_tokens,
        )
        for i, w in enumerate(WOBBLE)
    )
    engine = make_engine(version=BUILDS[build], build=commit(build))
    base = make_result(engine=engine, workload=workload, decode=decode)

    def summary(name: str) -> Summary | None:
        return Summary.of([getattr(s, name) for s in samples])

    ttft = summary("ttft_s")
    assert ttft is not None
    return dataclasses.replace(
        base, samples=samples, ttft_s=ttft,
        decode_tokens_per_s=summary("decode_tokens_per_s"),
        engine_decode_tokens_per_s=summary("engine_decode_tokens_per_s"),
        prefill_tokens_per_s=summary("prefill_tokens_per_s"), notes=(),
    )


def ceiling(workload: Workload, decode_tokens_per_s: float) -> Ceiling:
    base = make_ceiling()
    footprint = dataclasses.replace(base.footprint, depth_tokens=workload.depth_tokens)
    return dataclasses.replace(base, footprint=footprint, decode_tokens_per_s=decode_tokens_per_s)


def record(store: ResultStore, run_id: str, test_id: str, result: BenchResult,
           verdict: Verdict) -> int:
    limit = CEILINGS.get(result.workload, 125.0)
    decode = result.decode_tokens_per_s
    assert decode is not None
    return store.record(
        run_id, test_id, result, model=make_model(), hardware=make_hardware(),
        ceiling=ceiling(result.workload, limit), efficiency=decode.median / limit,
        verdict=verdict,
    ).result_id


def build_db(path: Path, *, concurrency: bool = False) -> Path:
    with ResultStore.open(path) as store:
        for i in range(len(BUILDS)):
            run_id = f"run-{i:02d}"
            store.begin_run(make_run(run_id, f"2026-01-{i + 1:02d}T03:04:05.000000+00:00"))
            newest = i == len(BUILDS) - 1
            short = 100.0 if i < STEP_AT else 88.0
            record(store, run_id, "test_decode[short]", bench(i, SHORT, short, 0.05),
                   "fail" if newest else "pass")
            record(store, run_id, "test_decode[long]", bench(i, LONG, 80.0, 0.4), "pass")
            record(store, run_id, "test_decode[deep]", bench(i, DEEP, 60.0, 0.08),
                   "unchecked" if newest else "pass")
            store.finish_run(run_id)
        if concurrency:
            run_id = "run-batch"
            store.begin_run(make_run(run_id, "2026-02-01T00:00:00.000000+00:00"))
            for n, per_request, output in ((1, 88.0, 80.0), (2, 80.0, 140.0), (4, 62.0, 200.0)):
                workload = dataclasses.replace(SHORT, concurrency=n)
                measured = dataclasses.replace(bench(11, workload, per_request, 0.05),
                                               aggregate_tokens_per_s=Summary.of([output]))
                record(store, run_id, "test_batch", measured, "pass")
            store.finish_run(run_id)
    return path
