"""https and proxied requests are bounded as plain http is: a total deadline from the
request to the last byte, the status line and headers included.

httpx (which read these before) restarts its read timeout on every byte, so an https
engine or a proxy that trickles its answer's head one byte at a time was never cut
off. Fakes on 127.0.0.1 (``fake_routes``): a self-signed https engine, an HTTP proxy.
"""

from __future__ import annotations

import pytest
from tests.support.fake_faults import FakeFaultyLlama
from tests.support.fake_routes import FakeProxy, needs_openssl, over_tls
from tests.transport.test_engines_faults import bounded

from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.errors import EngineUnavailable
from pytest_tokperf.results import GenerationRequest

pytestmark = needs_openssl
TOTAL_S = 2.0


def _info(url: str) -> object:
    engine = LlamaServer(url, timeout_s=TOTAL_S)
    try:
        return bounded(engine.info, TOTAL_S)
    finally:
        engine.close()


def _generate(url: str, tokens: int = 8) -> object:
    engine = LlamaServer(url, timeout_s=TOTAL_S, idle_timeout_s=1.0)
    try:
        return bounded(lambda: engine.generate(GenerationRequest(4, tokens, timeout_s=TOTAL_S)),
                       TOTAL_S)
    finally:
        engine.close()


def test_an_https_head_trickled_byte_by_byte_meets_the_total_deadline() -> None:
    with over_tls(FakeFaultyLlama()) as ok:
        assert ok.url.startswith("https://")
        assert _generate(ok.url).generated_tokens == 8  # type: ignore[attr-defined]
    with over_tls(FakeFaultyLlama("props_head_drip")) as fake, \
            pytest.raises(EngineUnavailable, match="within 2 s \\(a total deadline"):
        _info(fake.url)


@pytest.mark.parametrize("https", [True, False], ids=["CONNECT", "absolute-form"])
def test_a_proxy_that_trickles_its_answer_meets_the_total_deadline(https: bool) -> None:
    def engine() -> object:
        return over_tls(FakeFaultyLlama()) if https else FakeFaultyLlama()

    with FakeProxy(engine()) as proxy:
        assert _generate(proxy.url).generated_tokens == 8  # type: ignore[attr-defined]
        host = proxy.url.split("://", 1)[1]
        want = f"CONNECT {host} " if https else f"POST {proxy.url}/completion "
        assert any(line.startswith(want) for line in proxy.seen), proxy.seen
    with FakeProxy(engine(), "trickle") as proxy:
        with pytest.raises(EngineUnavailable, match="within 2 s \\(a total deadline"):
            _info(proxy.url)
        with pytest.raises(EngineUnavailable, match="within 2 s \\(a total deadline"):
            _generate(proxy.url)


def test_a_proxy_that_refuses_the_tunnel_is_named_with_the_fix() -> None:
    with FakeProxy(over_tls(FakeFaultyLlama()), "deny") as proxy, \
            pytest.raises(EngineUnavailable) as caught:
        _info(proxy.url)
    message = str(caught.value)
    assert f"the proxy {proxy.proxy_url!r} from the environment answered CONNECT" in message
    assert "HTTP 407; give it credentials" in message and "\n" not in message
