"""A llama-server on 127.0.0.1 that misbehaves on purpose, for the fault-injection tests.

``FakeFaultyLlama(mode)`` answers ``/health``, ``/v1/models`` and ``/props`` like
llama-server and streams ``/completion`` in one of these ways:

- ``ok``: a normal stream of ``n_predict`` tokens and the final ``stop`` event;
- ``pings``: a few tokens, then an SSE comment (``: ping``) every 0.1 s, forever
  (mlx_lm and proxies keep idle streams alive this way);
- ``pings_only``: the response head, then only comments;
- ``endless``: a few tokens, then one ``data:`` line that never ends, 64 KiB at a time;
- ``drip``: a few tokens, then the next event one byte every 50 ms, forever;
- ``stall``: a few tokens, then silence with the connection open;
- ``stall_first``: the response head, then silence;
- ``silent``: the request is read, no response head ever comes;
- ``echo_error``: a few tokens, then an error event quoting the request's
  ``Authorization`` header (as a careless proxy might);
- ``overrun``: a hundred times ``n_predict`` tokens (an engine that ignores the limit);
- ``short``: 7 tokens, then the connection closes without a final event (a killed server).
- ``broken``: 3 tokens, then half a chunk, and the connection is shut (a server killed
  mid-write, as vLLM's uvicorn is: the body breaks off inside a chunk).

and answers ``GET /props`` in one of these ways (else like llama-server):

- ``props_drip``: a Content-Length of 4 KiB, then one byte every 0.2 s;
- ``props_head_drip``: the status line and headers themselves, one byte every 0.2 s;
- ``props_endless``: a chunked body of 64 KiB chunks, forever;
- ``props_huge``: a Content-Length of 100 MB, then zeros;
- ``props_split_secret``: HTTP 500 whose JSON error quotes the URL's password, split
  across two chunks sent 50 ms apart.

With ``api_key`` set, a request without ``Authorization: Bearer <key>`` gets
llama-server's 401, whose message here quotes the header it got. Every endless mode
stops when the client hangs up or the fake is closed.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

from tests.support.fake_engines import FakeMLX
from tests.support.fake_http import FakeServer, Handler

PREFIX_TOKENS = 3
SHORT_TOKENS = 7


def token_event(i: int) -> dict[str, Any]:
    return {"index": 0, "content": f" t{i}", "tokens": [300 + i], "stop": False,
            "id_slot": -1, "tokens_predicted": i + 1, "tokens_evaluated": 4}


def final_event(n: int) -> dict[str, Any]:
    return {"index": 0, "content": "", "tokens": [], "stop": True, "stop_type": "limit",
            "tokens_predicted": n, "tokens_evaluated": 4,
            "timings": {"cache_n": 0, "prompt_n": 4, "prompt_ms": 1.0, "predicted_n": n,
                        "predicted_ms": float(n)}}


class FakeFaultyLlama(FakeServer):
    def __init__(self, mode: str = "ok", api_key: str | None = None) -> None:
        super().__init__(mode)
        self.api_key = api_key
        self.closing = threading.Event()
        self.authorizations: list[str | None] = []

    def __exit__(self, *exc: object) -> None:
        self.closing.set()
        super().__exit__(*exc)

    def _authorized(self, h: Handler) -> bool:
        got = h.headers.get("Authorization")
        self.authorizations.append(got)
        if self.api_key is None or got == f"Bearer {self.api_key}":
            return True
        h.send_json(401, {"error": {"code": 401, "type": "authentication_error",
                                    "message": f"Invalid API Key (got {got!r})"}})
        return False

    def get_health(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"status": "ok"})

    def get_v1_models(self, h: Handler, body: Any) -> None:
        if self._authorized(h):
            h.send_json(200, {"object": "list", "data": [{"id": "fake.gguf",
                                                          "meta": {"n_vocab": 1000}}]})

    def get_props(self, h: Handler, body: Any) -> None:
        if self.mode.startswith("props_"):
            try:
                self._bad_props(h)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        if self._authorized(h):
            h.send_json(200, {"build_info": "b11434-fake", "model_path": "/m/fake.gguf",
                              "total_slots": 1,
                              "default_generation_settings": {"n_ctx": 2048}})

    def _bad_props(self, h: Handler) -> None:
        mode, out = self.mode, h.wfile
        if mode == "props_head_drip":
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}"
            for i in range(len(head)):
                if self.closing.wait(0.2):
                    return
                out.write(head[i:i + 1])
                out.flush()
            return
        if mode == "props_split_secret":
            h.send_response(500)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            h.chunk('{"error": {"message": "access denied for tokperf:hunter2')
            self.closing.wait(0.05)
            h.chunk('secret at the upstream proxy"}}')
            h.end_stream()
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if mode == "props_drip":
            h.send_header("Content-Length", "4096")
            h.end_headers()
            while not self.closing.wait(0.2):
                out.write(b" ")
                out.flush()
        elif mode == "props_huge":
            h.send_header("Content-Length", str(100 << 20))
            h.end_headers()
            block = bytes(1 << 20)
            for _ in range(100):
                out.write(block)
        elif mode == "props_endless":
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            block = "[" * (64 << 10)
            while not self.closing.is_set():
                h.chunk(block)

    def post_completion(self, h: Handler, body: Any) -> None:
        if not self._authorized(h):
            return
        if self.mode == "silent":
            self.closing.wait(60)
            return
        h.start_stream("text/event-stream")
        try:
            self._stream(h, int(body.get("n_predict", 8)))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up, as it should

    def _stream(self, h: Handler, n: int) -> None:
        mode, wait = self.mode, self.closing.wait
        if mode == "stall_first":
            wait(60)
            return
        if mode == "pings_only":
            while not wait(0.1):
                h.chunk(": ping\n\n")
            return
        if mode == "overrun":
            for i in range(n * 100):
                h.sse(token_event(i))
            h.sse(final_event(n * 100))
            h.end_stream()
            return
        if mode == "broken":
            for i in range(PREFIX_TOKENS):
                h.sse(token_event(i))
            h.wfile.write(b"40\r\ndata: {\"content\"")
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if mode == "short":
            for i in range(SHORT_TOKENS):
                h.sse(token_event(i))
            h.end_stream()
            return
        for i in range(n if mode == "ok" else PREFIX_TOKENS):
            h.sse(token_event(i))
        if mode == "ok":
            h.sse(final_event(n))
            h.end_stream()
        elif mode == "pings":
            while not wait(0.1):
                h.chunk(": ping\n\n")
        elif mode == "endless":
            h.chunk('data: {"content": "')
            block = "x" * (64 << 10)
            while not self.closing.is_set():
                h.chunk(block)
        elif mode == "drip":
            event = f"data: {json.dumps(token_event(PREFIX_TOKENS))}\n\n"
            i = 0
            while not wait(0.05):
                h.chunk(event[i % len(event)])
                i += 1
        elif mode == "stall":
            wait(60)
        elif mode == "echo_error":
            h.sse({"error": {"message": f"upstream refused {h.headers.get('Authorization')}"}})
            h.end_stream()


class FakeKilledMLX(FakeMLX):
    """mlx_lm.server killed mid-generation: completion requests after the first
    ``healthy`` stream 7 tokens, then the connection ends with neither a
    ``finish_reason`` nor ``data: [DONE]``."""

    def __init__(self, healthy: int = 2) -> None:
        super().__init__()
        self.healthy = healthy
        self.completions = 0

    def post_v1_completions(self, h: Handler, body: Any) -> None:
        self.completions += 1
        if self.completions <= self.healthy or not body.get("stream"):
            super().post_v1_completions(h, body)
            return
        h.start_stream("text/event-stream")
        model = str(body.get("model") or "default_model")
        for _ in range(SHORT_TOKENS):
            h.sse(self.chunk(model, " tok", None))
        h.end_stream()
