"""The fault corpus: one misbehaving engine per case, with the limit it must end within
and a fragment of the one-line error it must end with.

Shared by ``tests/transport/test_faults_corpus.py`` (the message and the absence of secrets, no
timing) and ``tests/package/test_bad_inputs_corpus.py`` (the same cases, timed against the limit
+ 2 s). Each case is tried through the stdlib reader and through httpx where both apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SECRET = "sk-tokperf-SECRET-4f1c9a"
PASSWORD = "hunter2secret"


@dataclass(frozen=True)
class Fault:
    name: str
    limit_s: float
    call: Callable[[str], object]
    """Runs against the fake's URL; returns or raises."""
    server: Callable[[], object]
    expect: str
    """A fragment the one-line error must hold ('' : the call must succeed)."""


def fault_corpus() -> list[Fault]:
    import httpx
    from tests.support.fake_engines import FakeOllama
    from tests.support.fake_faults import FakeFaultyLlama, FakeKilledMLX
    from tests.support.fake_http import FakeHtml
    from tests.support.fake_routes import FakeProxy, over_tls

    from pytest_tokperf.engines.llama_server.adapter import LlamaServer
    from pytest_tokperf.engines.registry import create_engine
    from pytest_tokperf.engines.wire import not_ready_error
    from pytest_tokperf.results import GenerationRequest
    from pytest_tokperf.transport.credentials import ApiKey

    def gen(reader: str, total: float = 3.0, idle: float = 1.0, key: bool = False,
            tokens: int = 16) -> Callable[[str], object]:
        def call(url: str) -> object:
            transport = httpx.HTTPTransport() if reader == "httpx" else None
            engine = LlamaServer(url, idle_timeout_s=idle, timeout_s=total, transport=transport,
                                 api_key=ApiKey(SECRET) if key else None)
            try:
                return engine.generate(GenerationRequest(4, tokens, timeout_s=total))
            finally:
                engine.close()
        return call

    def info(reader: str, total: float = 3.0, password: bool = False) -> Callable[[str], object]:
        def call(url: str) -> object:
            if password:
                url = url.replace("http://", f"http://tokperf:{PASSWORD}@")
            transport = httpx.HTTPTransport() if reader == "httpx" else None
            engine = LlamaServer(url, timeout_s=total, transport=transport)
            try:
                return engine.info()
            finally:
                engine.close()
        return call

    def fake(mode: str, **kw: object) -> Callable[[], object]:
        return lambda: FakeFaultyLlama(mode, **kw)  # type: ignore[arg-type]

    out: list[Fault] = []
    for reader in ("stdlib", "httpx"):
        out += [
            Fault(f"{reader}: stall mid-stream", 1.0, gen(reader), fake("stall"), "no token for 1 s"),
            Fault(f"{reader}: no first token", 3.0, gen(reader), fake("stall_first"), "no token within 3 s"),
            Fault(f"{reader}: no response head", 3.0, gen(reader), fake("silent"), "3 s"),
            Fault(f"{reader}: keep-alive pings forever", 3.0, gen(reader), fake("pings"), "keep-alive"),
            Fault(f"{reader}: pings only", 3.0, gen(reader), fake("pings_only"), "keep-alive"),
            Fault(f"{reader}: endless line", 20.0, gen(reader, 20.0, 20.0), fake("endless"), "MiB"),
            Fault(f"{reader}: drip 1 byte / 50 ms", 1.0, gen(reader), fake("drip"), "no token for 1 s"),
            Fault(f"{reader}: streams 100x n_predict", 3.0, gen(reader), fake("overrun"), "events for 16 tokens asked"),
            Fault(f"{reader}: stream ends early", 3.0, gen(reader), fake("short"), "without a final"),
            Fault(f"{reader}: connection cut mid-chunk", 3.0, gen(reader), fake("broken"),
                  "llama-server at http://"),
            Fault(f"{reader}: /props one byte per 0.2 s", 3.0, info(reader), fake("props_drip"), "total deadline"),
            Fault(f"{reader}: /props endless", 30.0, info(reader, 30.0), fake("props_endless"), "8 MiB"),
            Fault(f"{reader}: /props 100 MB", 30.0, info(reader, 30.0), fake("props_huge"), "8 MiB"),
            Fault(f"{reader}: wrong API key", 3.0, gen(reader, key=True), fake("ok", api_key="other"), "API"),
            Fault(f"{reader}: error event echoes the key", 3.0, gen(reader, key=True),
                  fake("echo_error", api_key=SECRET), "mid-stream"),
            Fault(f"{reader}: /props error echoes the password split", 5.0,
                  info(reader, 5.0, password=True), fake("props_split_secret"), "access denied"),
        ]
    def tls(mode: str) -> Callable[[], object]:
        return lambda: over_tls(FakeFaultyLlama(mode))

    def proxy(mode: str, https: bool = True) -> Callable[[], object]:
        return lambda: FakeProxy(over_tls(FakeFaultyLlama()) if https else FakeFaultyLlama(),
                                 mode)

    out += [
        Fault("https: /props head one byte per 0.2 s", 3.0, info("stdlib"), tls("props_head_drip"),
              "total deadline"),
        Fault("proxy CONNECT answered one byte per 0.2 s: /props", 3.0, info("stdlib"),
              proxy("trickle"), "total deadline"),
        Fault("http proxy answers one byte per 0.2 s: /props", 3.0, info("stdlib"),
              proxy("trickle", https=False), "total deadline"),
        Fault("proxy answers CONNECT with 407", 3.0, info("stdlib"), proxy("deny"), "407"),
        Fault("stdlib: /props head one byte per 0.2 s", 3.0, info("stdlib"), fake("props_head_drip"),
              "total deadline"),
        Fault("mlx killed after 7 of 32 tokens", 5.0,
              lambda url: create_engine("mlx", url, timeout_s=5.0).generate(
                  GenerationRequest(4, 32, timeout_s=5.0)),
              lambda: FakeKilledMLX(healthy=0), "the stream ended after 7 of 32"),
        Fault("refused port", 3.0, lambda url: create_engine("llama-server", "http://127.0.0.1:9",
                                                             timeout_s=3.0).info(),
              fake("ok"), "refused"),
        Fault("HTML login page", 3.0, info("stdlib"), lambda: FakeHtml(), "HTML"),
        Fault("Ollama where llama-server was asked", 5.0, lambda url: _ready(url),
              lambda: FakeOllama(), "ollama"),
        Fault("https:// on an http port", 6.0,
              lambda url: (_ for _ in ()).throw(not_ready_error("llama-server",
                                                                url.replace("http:", "https:"))),
              fake("ok"), "not with TLS"),
    ]
    return out


def _ready(url: str) -> object:
    from pytest_tokperf.engines.registry import create_engine
    from pytest_tokperf.engines.wire import not_ready_error

    engine = create_engine("llama-server", url, timeout_s=5.0)
    try:
        if not engine.ready():
            raise not_ready_error("llama-server", url)
    finally:
        engine.close()
    return None


