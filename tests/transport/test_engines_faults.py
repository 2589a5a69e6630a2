"""Fault injection: every stall ends at a limit that names itself, memory stays bounded,
a refused connection says "refused", the wrong engine is named, and no secret is shown.

Fake engines on 127.0.0.1 (``fake_faults``) misbehave; both stream readers are tried
(the stdlib one, which reads http, https and proxied streams, and httpx, which a given
``transport`` uses). Limits
here are short (idle 0.5 s, request 2 s); ``bounded`` fails a test that has not ended
20 s after its own limit, so a regression shows as a failure, not as a hung suite.
No speed is asserted: the messages say which limit fired.
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import TypeVar

import httpx
import pytest
from tests.support.fake_engines import FakeOllama
from tests.support.fake_faults import PREFIX_TOKENS, FakeFaultyLlama
from tests.support.fake_http import Handler

from pytest_tokperf.transport.credentials import ApiKey, Endpoint, redact_url
from pytest_tokperf.transport.events import EventParser, StreamStats
from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.engines.registry import create_engine
from pytest_tokperf.transport import stream as stream_module
from pytest_tokperf.engines.wire import not_ready_error
from pytest_tokperf.errors import EngineProtocolError, EngineUnavailable
from pytest_tokperf.results import GenerationRequest

IDLE_S = 0.5
TOTAL_S = 2.0
SECRET = "sk-tokperf-SECRET-4f1c9a"
T = TypeVar("T")


def bounded(fn: Callable[[], T], limit_s: float) -> T:
    """``fn()`` in a thread; a test failure when it is still running ``20 s`` after
    ``limit_s`` (a hang, not a slow machine)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s + 20.0)
    if thread.is_alive():
        pytest.fail(f"still running {limit_s + 20:.0f} s after a {limit_s:g} s limit: the "
                    f"stall was not bounded")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


@pytest.fixture(params=["stdlib", "httpx"])
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def llama(url: str, reader: str, idle_s: float = IDLE_S, **kwargs: object) -> LlamaServer:
    transport = httpx.HTTPTransport() if reader == "httpx" else None
    return LlamaServer(url, idle_timeout_s=idle_s, transport=transport, **kwargs)  # type: ignore[arg-type]


def generate(engine: LlamaServer, total_s: float = TOTAL_S, tokens: int = 16) -> object:
    request = GenerationRequest(prompt_tokens=4, generate_tokens=tokens, timeout_s=total_s)
    try:
        return bounded(lambda: engine.generate(request), total_s)
    finally:
        engine.close()


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeFaultyLlama]:
    with FakeFaultyLlama(*request.param) as server:
        yield server


# -- stalls ------------------------------------------------------------------------------


@pytest.mark.parametrize("fake", [("stall",)], indirect=True)
def test_a_plain_stall_ends_at_the_idle_limit(fake: FakeFaultyLlama, reader: str) -> None:
    with pytest.raises(EngineUnavailable) as error:
        generate(llama(fake.url, reader), total_s=60.0)
    message = str(error.value)
    assert f"no token for {IDLE_S:g} s (ini tokperf_idle_timeout) after {PREFIX_TOKENS} " \
           "streamed events" in message
    assert "raise ini tokperf_idle_timeout or PYTEST_TOKPERF_IDLE_TIMEOUT" in message
    assert "request-timeout" not in message


@pytest.mark.parametrize("fake", [("pings",)], indirect=True)
def test_keep_alive_comments_do_not_count_as_tokens(fake: FakeFaultyLlama, reader: str) -> None:
    with pytest.raises(EngineUnavailable) as error:
        generate(llama(fake.url, reader), total_s=60.0)
    message = str(error.value)
    assert f"no token for {IDLE_S:g} s" in message and "keep-alive comment(s)" in message


@pytest.mark.parametrize("fake", [("pings",)], indirect=True)
def test_keep_alive_comments_cannot_outlive_the_request_timeout(
    fake: FakeFaultyLlama, reader: str
) -> None:
    with pytest.raises(EngineUnavailable) as error:
        generate(llama(fake.url, reader, idle_s=600.0), total_s=TOTAL_S)
    message = str(error.value)
    assert f"did not finish 16 tokens within {TOTAL_S:g} s; raise --tokperf-request-timeout " \
           f"or use a smaller model ({PREFIX_TOKENS} events had arrived" in message
    assert "keep-alive comment(s)" in message


@pytest.mark.parametrize("fake", [("pings_only",), ("stall_first",), ("silent",)],
                         indirect=True)
def test_no_first_token_ends_at_the_request_timeout(fake: FakeFaultyLlama, reader: str) -> None:
    with pytest.raises(EngineUnavailable) as error:
        generate(llama(fake.url, reader), total_s=TOTAL_S)
    assert f"no token within {TOTAL_S:g} s of the request (--tokperf-request-timeout)" \
        in str(error.value)


@pytest.mark.parametrize("fake", [("drip",)], indirect=True)
def test_a_slow_drip_is_no_token(fake: FakeFaultyLlama, reader: str) -> None:
    """Bytes every 50 ms, never a whole event: the idle limit counts events, not bytes."""
    with pytest.raises(EngineUnavailable, match=f"no token for {IDLE_S:g} s"):
        generate(llama(fake.url, reader), total_s=60.0)


@pytest.mark.parametrize("fake", [("drip",)], indirect=True)
def test_a_slow_drip_cannot_outlive_the_request_timeout(fake: FakeFaultyLlama, reader: str) -> None:
    with pytest.raises(EngineUnavailable, match=f"did not finish 16 tokens within {TOTAL_S:g} s"):
        generate(llama(fake.url, reader, idle_s=600.0), total_s=TOTAL_S)


@pytest.mark.parametrize("fake", [("endless",)], indirect=True)
def test_an_endless_line_is_refused_with_memory_bounded(
    fake: FakeFaultyLlama, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = llama(fake.url, reader, idle_s=600.0)
    monkeypatch.setattr(stream_module, "MAX_EVENT_BYTES", 2 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(EngineProtocolError, match=r"an event of more than 2 MiB .*refused, "
                                                      r"so memory stays bounded"):
            generate(engine, total_s=60.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20, f"peak {peak >> 20} MiB reading a 2 MiB-capped line"


@pytest.mark.parametrize("fake", [("endless",)], indirect=True)
def test_an_endless_line_below_the_cap_ends_at_the_deadline(
    fake: FakeFaultyLlama, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cap is not what ends every endless line: with a big one, the deadline does."""
    engine = llama(fake.url, reader, idle_s=600.0)
    monkeypatch.setattr(stream_module, "MAX_EVENT_BYTES", 1 << 40)
    with pytest.raises((EngineUnavailable, EngineProtocolError)) as error:
        generate(engine, total_s=1.0)
    assert "within 1 s" in str(error.value) or "more than" in str(error.value)


@pytest.mark.parametrize("fake", [("ok",)], indirect=True)
def test_a_normal_stream_is_untouched(fake: FakeFaultyLlama, reader: str) -> None:
    generation = generate(llama(fake.url, reader), tokens=24)
    assert generation.generated_tokens == 24 and len(generation.chunk_times_s) == 24  # type: ignore[attr-defined]
    assert generation.client_s_per_event > 0  # type: ignore[attr-defined]


# -- refused, and the engine at the URL --------------------------------------------------


def test_refused_says_refused(reader: str) -> None:
    with FakeFaultyLlama() as gone:
        url = gone.url
    engine = llama(url, reader)
    assert engine.ready() is False
    with pytest.raises(EngineUnavailable, match=r"connection refused.*nothing listens on "
                                                r"127\.0\.0\.1:\d+"):
        generate(engine)
    with pytest.raises(EngineUnavailable, match="connection refused"):
        llama(url, reader).info()
    message = str(not_ready_error("llama-server", url))
    assert f"--tokperf-url '{url}' does not answer as a ready llama-server: connection " \
           f"refused: nothing listens on 127.0.0.1:" in message


def test_the_default_engine_at_an_ollama_url_names_ollama() -> None:
    with FakeOllama() as ollama:
        engine = create_engine("llama-server", ollama.url)
        try:
            with pytest.raises(EngineProtocolError) as error:
                engine.ready()
        finally:
            engine.close()
    message = str(error.value)
    assert "--tokperf-engine 'llama-server' (the default)" in message
    assert "it looks like Ollama 0.12.3" in message
    assert "Pass --tokperf-engine ollama to measure it" in message


# -- secrets -----------------------------------------------------------------------------


def test_redact_url_drops_userinfo_and_masks_query_values() -> None:
    assert redact_url(f"http://me:{SECRET}@10.0.0.5:8080/v1?api_key={SECRET}&x=1#f") == \
        "http://10.0.0.5:8080/v1?api_key=***&x=***"
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert SECRET not in redact_url(f"me:{SECRET}@host:1")
    assert SECRET not in redact_url(f"http://u:{SECRET}@host:99999999")


def test_an_api_key_never_shows_in_its_holders() -> None:
    key = ApiKey(SECRET, "$PYTEST_TOKPERF_API_KEY")
    endpoint = Endpoint.of("http://127.0.0.1:1", key)
    assert ("Authorization", f"Bearer {SECRET}") in endpoint.headers
    for shown in (repr(key), str(key), repr(endpoint), f"{key}", repr([key])):
        assert SECRET not in shown


@pytest.mark.parametrize("fake", [("ok", SECRET)], indirect=True)
def test_the_api_key_is_sent_as_bearer(fake: FakeFaultyLlama, reader: str) -> None:
    engine = llama(fake.url, reader, api_key=ApiKey(SECRET))
    info = engine.info()
    generation = generate(engine, tokens=4)
    assert generation.generated_tokens == 4  # type: ignore[attr-defined]
    assert set(fake.authorizations) == {f"Bearer {SECRET}"}
    assert SECRET not in repr(info)


@pytest.mark.parametrize("fake", [("ok", SECRET)], indirect=True)
def test_a_wrong_or_missing_key_says_how_to_pass_one(fake: FakeFaultyLlama, reader: str) -> None:
    with pytest.raises(EngineProtocolError) as error:
        generate(llama(fake.url, reader))
    message = str(error.value)
    assert "answered HTTP 401: Invalid API Key" in message
    assert "$PYTEST_TOKPERF_API_KEY" in message and "tokperf_api_key_env" in message


@pytest.mark.parametrize("fake", [("ok", "the-right-one"), ("echo_error",)], indirect=True)
def test_an_echoed_secret_is_masked(fake: FakeFaultyLlama, reader: str) -> None:
    """The fake quotes the Authorization it got (in a 401, or mid-stream): the message
    the user sees has the key masked."""
    for call in ("generate", "info"):
        engine = llama(fake.url, reader, api_key=ApiKey(SECRET))
        try:
            if call == "generate":
                generate(engine)
            else:
                engine.info()
        except (EngineUnavailable, EngineProtocolError) as exc:
            text = str(exc)
        else:
            text = ""
        finally:
            engine.close()
        assert SECRET not in text
    assert fake.authorizations and all(a == f"Bearer {SECRET}" for a in fake.authorizations)


@pytest.mark.parametrize("fake", [("stall",)], indirect=True)
def test_url_credentials_become_auth_and_never_show(fake: FakeFaultyLlama, reader: str) -> None:
    url = fake.url.replace("http://", f"http://tok:{SECRET}@") + f"/?token={SECRET}"
    engine = llama(url, reader)
    assert engine.base_url == fake.url and SECRET not in engine.info().base_url
    with pytest.raises(EngineUnavailable) as error:
        generate(engine, total_s=60.0)
    assert SECRET not in str(error.value) and fake.url in str(error.value)
    assert fake.authorizations[-1] is not None and fake.authorizations[-1].startswith("Basic ")
    assert fake.requests[-1][1] == f"/completion?token={SECRET}"


# -- the parser, byte by byte -------------------------------------------------------------


def _parse(blocks: list[bytes], ndjson: bool = False, limit: int = 1 << 20) -> list[bytes]:
    parser = EventParser(ndjson, "http://x", limit, StreamStats())
    out = [p for block in blocks for p in parser.feed(block)]
    return out + parser.end()


def test_sse_events_survive_any_split() -> None:
    stream = (b'data: {"a": 1}\n\n: ping\n\ndata: {"b": 2}\r\n\r\nevent: x\ndata: one\n'
              b"data: two\n\ndata:[DONE]\n\n")
    want = [b'{"a": 1}', b'{"b": 2}', b"one\ntwo", b"[DONE]"]
    assert _parse([stream]) == want
    assert _parse([stream[i:i + 1] for i in range(len(stream))]) == want
    for cut in range(1, len(stream)):
        assert _parse([stream[:cut], stream[cut:]]) == want, cut


def test_ndjson_lines_and_a_last_line_without_newline() -> None:
    assert _parse([b'{"a":1}\n\n{"b"', b':2}\r\n{"c":3}'], ndjson=True) == \
        [b'{"a":1}', b'{"b":2}', b'{"c":3}']


@pytest.mark.parametrize("ndjson", [False, True])
def test_the_cap_counts_bytes_without_an_end(ndjson: bool) -> None:
    with pytest.raises(EngineProtocolError, match="more than 1 MiB"):
        _parse([b"data: " + b"x" * 1000] * 2000, ndjson=ndjson)
    assert len(_parse([b"data: " + b"x" * (1 << 19) + b"\n\n"] * 8, ndjson=ndjson)) == 8


def test_an_ndjson_stall_ends_at_the_idle_limit() -> None:
    class StallingOllama(FakeOllama):
        def post_api_generate(self, h: Handler, body: object) -> None:
            h.start_stream("application/x-ndjson")
            for word in ("a", "b"):
                h.chunk(json.dumps({"model": "llama3.2:3b", "response": word, "done": False}) + "\n")
            time.sleep(3)

    with StallingOllama() as fake:
        engine = create_engine("ollama", fake.url, model="llama3.2:3b", idle_timeout_s=IDLE_S)
        request = GenerationRequest(prompt_tokens=4, generate_tokens=8, timeout_s=60)
        try:
            with pytest.raises(EngineUnavailable, match=f"no token for {IDLE_S:g} s .* after 2 "):
                bounded(lambda: engine.generate(request), 60)
        finally:
            engine.close()


@pytest.mark.parametrize("fake", [("broken",)], indirect=True)
def test_a_connection_cut_mid_chunk_names_the_engine_and_what_it_sent(
    fake: FakeFaultyLlama, reader: str
) -> None:
    """vLLM killed mid-write: the body breaks off inside a chunk. The message said only
    "lost URL during generation"; it names the engine, the events and the last one."""
    with pytest.raises(EngineUnavailable) as error:
        generate(llama(fake.url, reader), total_s=TOTAL_S)
    message = str(error.value)
    assert message.startswith(f"llama-server at {fake.url}/completion lost the connection "
                              f"during generation after {PREFIX_TOKENS} streamed event(s) of "
                              f"16 tokens asked (the last event: {{"), message
    assert "'content': ' t2'" in message and "this repetition failed" in message
    assert "\n" not in message
