"""The client's own cost per event, measured while streaming, and the note it earns."""

from __future__ import annotations

import time

import pytest
from tests.support.fake_faults import FakeFaultyLlama

from pytest_tokperf.bench.measure import client_cost_note, run_workload
from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.results import EngineInfo, Generation, GenerationRequest, Workload

REQUEST = GenerationRequest(prompt_tokens=4, generate_tokens=100)


def _generation(interval_s: float, cost_s: float | None, n: int = 100) -> Generation:
    return Generation(request=REQUEST, sent_s=0.0,
                      chunk_times_s=tuple(0.01 + interval_s * i for i in range(n)),
                      chunk_tokens=(1,) * n, generated_tokens=n, prompt_tokens=4, text="",
                      stop_reason="limit", engine=None, client_s_per_event=cost_s)


def test_a_client_far_below_the_token_interval_says_nothing() -> None:
    # 30 tok/s from a real engine, 5 us of client work per token
    assert client_cost_note([_generation(1 / 30, 5e-6)] * 3) is None
    assert client_cost_note([_generation(1 / 30, None)]) is None


def test_a_client_near_the_token_interval_says_so() -> None:
    # 100k tok/s streamed, 6 us of client work per event: the client sets the pace
    note = client_cost_note([_generation(10e-6, 6e-6), _generation(10e-6, 7e-6),
                             _generation(12e-6, 5e-6)])
    assert note is not None
    assert note.startswith("client cost: reading and parsing took 6.0 us per streamed event, "
                           "60% of the 10.0 us between events (median stream)")
    assert "judge the engine's own figure" in note


class _FastEngine:
    """An engine whose tokens come every 8 us, and whose client needed 4 us for each."""

    name = "fake"
    base_url = "http://fake"
    supports_chat = False

    def ready(self) -> bool:
        return True

    def info(self) -> EngineInfo:
        return EngineInfo(name="fake", version="1", build="1", base_url=self.base_url)

    def generate(self, request: GenerationRequest) -> Generation:
        n = request.generate_tokens
        return Generation(request=request, sent_s=0.0,
                          chunk_times_s=tuple(0.001 + 8e-6 * i for i in range(n)),
                          chunk_tokens=(1,) * n, generated_tokens=n, prompt_tokens=4, text="",
                          stop_reason="limit", engine=None, client_s_per_event=4e-6)

    def close(self) -> None:
        pass


def test_the_result_carries_the_note() -> None:
    result = run_workload(_FastEngine(), Workload(4, 64, repetitions=2, warmup=0))  # type: ignore[arg-type]
    assert any(n.startswith("client cost: reading and parsing took 4.0 us per streamed "
                            "event, 50% of the 8.0 us") for n in result.notes), result.notes


@pytest.mark.parametrize("via_httpx", [False, True])
def test_a_stream_measures_its_client_cost(via_httpx: bool) -> None:
    import httpx

    with FakeFaultyLlama("ok") as fake:
        engine = LlamaServer(fake.url, transport=httpx.HTTPTransport() if via_httpx else None)
        try:
            generation = engine.generate(GenerationRequest(prompt_tokens=4, generate_tokens=50))
            done = time.perf_counter()
        finally:
            engine.close()
    assert generation.generated_tokens == 50
    cost = generation.client_s_per_event
    assert cost is not None and 0 < cost * 51 <= done - generation.sent_s  # 50 tokens + final
