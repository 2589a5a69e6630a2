"""One HTTP policy for every request: a total deadline, a byte cap, a cap on events.

Plain requests (``GET /props``, ``/health``, ``/v1/models``) used to obey only httpx's
read timeout, which restarts on every byte, and were buffered whole; a stream past
``n_predict`` ran to the request deadline. Each fake here misbehaves in one way
(``fake_faults``); both readers are tried where both apply. No speed is asserted: the
messages say which limit fired (``bounded`` only turns a hang into a failure).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import httpx
import pytest
from tests.support.fake_faults import FakeFaultyLlama
from tests.transport.test_engines_faults import bounded, llama

from pytest_tokperf.engines.base import make_client
from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.errors import EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import GenerationRequest
from pytest_tokperf.transport.bounded import BodyTooLarge, BoundedTransport, bounded_get
from pytest_tokperf.transport.stream import event_cap

TOTAL_S = 1.5


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeFaultyLlama]:
    with FakeFaultyLlama(*request.param) as server:
        yield server


@pytest.fixture(params=["stdlib", "httpx"])
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def info_error(engine: LlamaServer) -> str:
    try:
        with pytest.raises((EngineUnavailable, EngineProtocolError)) as caught:
            bounded(engine.info, TOTAL_S)
    finally:
        engine.close()
    return str(caught.value)


@pytest.mark.parametrize("fake", [("props_drip",)], indirect=True)
def test_a_trickled_body_ends_at_the_total_deadline(fake: FakeFaultyLlama, reader: str) -> None:
    message = info_error(llama(fake.url, reader, timeout_s=TOTAL_S))
    assert "did not answer in full within 1.5 s (a total deadline" in message
    assert "server properties" in message and "--tokperf-request-timeout" in message


@pytest.mark.parametrize("fake", [("props_head_drip",)], indirect=True)
def test_a_trickled_status_line_ends_at_the_total_deadline(fake: FakeFaultyLlama) -> None:
    message = info_error(llama(fake.url, "stdlib", timeout_s=TOTAL_S))
    assert "within 1.5 s (a total deadline" in message


@pytest.mark.parametrize("fake", [("props_endless",)], indirect=True)
def test_an_endless_body_is_refused_at_the_cap(fake: FakeFaultyLlama, reader: str) -> None:
    tracemalloc.start()
    try:
        message = info_error(llama(fake.url, reader, timeout_s=30.0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"more than {8 << 20} bytes (8 MiB)" in message
    assert "tokperf_max_body" in message
    assert peak < 64 << 20, f"{peak} bytes held for a capped body"


@pytest.mark.parametrize("fake", [("props_huge",)], indirect=True)
def test_a_declared_length_past_the_cap_is_refused_and_the_cap_is_a_setting(
        fake: FakeFaultyLlama, reader: str) -> None:
    message = info_error(llama(fake.url, reader, timeout_s=30.0, max_body_bytes=1 << 20))
    assert f"more than {1 << 20} bytes (1 MiB)" in message


def test_a_mock_transport_is_capped_too() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(
        200, content=iter([b" " * (1 << 16)] * 48)))
    client = make_client(10.0, transport, max_body_bytes=1 << 20)
    with pytest.raises(BodyTooLarge, match="more than 1048576 bytes"):
        client.get("http://engine.invalid/props")


def test_a_stream_is_not_capped_as_a_body() -> None:
    body = b"data: {}\n\n" * 300_000
    transport = httpx.MockTransport(lambda r: httpx.Response(
        200, content=iter([body]), headers={"content-type": "text/event-stream"}))
    client = httpx.Client(transport=BoundedTransport(transport, max_body_bytes=1 << 20))
    assert len(client.get("http://engine.invalid/completion").content) == len(body)


@pytest.mark.parametrize("fake", [("props_drip",)], indirect=True)
def test_a_probe_outside_an_adapter_has_a_total_deadline(fake: FakeFaultyLlama) -> None:
    with pytest.raises(httpx.ReadTimeout, match="total deadline"):
        bounded(lambda: bounded_get(f"{fake.url}/props", 1.0), 1.0)


@pytest.mark.parametrize("fake", [("overrun",)], indirect=True)
def test_a_stream_past_its_token_limit_is_cut_with_the_count(
        fake: FakeFaultyLlama, reader: str) -> None:
    engine = llama(fake.url, reader)
    request = GenerationRequest(prompt_tokens=4, generate_tokens=16, timeout_s=30.0)
    try:
        with pytest.raises(EngineProtocolError) as caught:
            bounded(lambda: engine.generate(request), 30.0)
    finally:
        engine.close()
    message = str(caught.value)
    count = int(message.split(" streamed ")[1].split()[0])
    assert count > event_cap(16)
    assert f"events for 16 tokens asked (the cap is {event_cap(16)}" in message
    assert "ignores the token limit" in message


@pytest.mark.parametrize("fake", [("props_split_secret",)], indirect=True)
def test_a_secret_split_across_chunks_is_masked(fake: FakeFaultyLlama, reader: str) -> None:
    url = fake.url.replace("http://", "http://tokperf:hunter2secret@")
    message = info_error(llama(url, reader, timeout_s=10.0))
    assert "access denied for" in message
    assert "hunter2" not in message and "secret" not in message


@pytest.mark.parametrize("fake", [("ok",)], indirect=True)
def test_a_normal_engine_is_untouched(fake: FakeFaultyLlama, reader: str) -> None:
    engine = llama(fake.url, reader, timeout_s=10.0)
    try:
        assert engine.info().build == "b11434-fake"
        result = engine.generate(GenerationRequest(prompt_tokens=4, generate_tokens=16,
                                                   timeout_s=10.0))
    finally:
        engine.close()
    assert result.generated_tokens == 16
