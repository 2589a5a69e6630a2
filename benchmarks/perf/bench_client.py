"""Does the client ever limit the engine? Our streaming path against bare loops.

    .venv/bin/python benchmarks/perf/bench_client.py [--tokens 128,2048] [--streams 1,16] [--rounds 7]

(``PYTHONPATH=<another checkout>`` measures that checkout's path as "ours".)

A fake llama-server on 127.0.0.1 (a separate process, so it has its own interpreter
lock) streams ``/completion`` SSE as fast as it can, one HTTP chunk and one ``send``
per token, as llama-server does. Over the same bytes, in interleaved rounds:

- ``bare httpx``: ``client.stream`` + ``iter_lines`` + ``json.loads`` per event, with a
  timestamp (the loop issue 17 measured the old path against);
- ``bare stdlib``: a socket, ``recv``, ``split(b"\\n")``, ``json.loads`` and a timestamp
  per ``data:`` line: the least any Python client can do with these bytes;
- ``ours``: ``LlamaServer.generate`` as ``tok_bench`` calls it (the stdlib stream reader,
  limits, chunk log, ``Generation``);
- ``ours via httpx``: the same adapter made to read through httpx (``transport=``), the
  path https URLs, proxies and tests take.

Each figure is output tokens / wall time of the round (all streams; connect and
request included), median over the rounds. Streams run in threads, as
``run_workload`` runs them. The fake server's CPU (from /proc) is printed beside, since
on a small machine it competes with the client for the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import timeit
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from pytest_tokperf.engines.llama_server.adapter import LlamaServer
from pytest_tokperf.results import GenerationRequest

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
MAX_TOKENS = 4096


# -- the fake engine (runs in its own process) ------------------------------------------


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(i: int) -> bytes:
    event = {"index": 0, "content": " " + WORDS[i % len(WORDS)], "tokens": [300 + i % 7000],
             "stop": False, "id_slot": -1, "tokens_predicted": i + 1, "tokens_evaluated": 64}
    return _chunk(b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n")


def _final(n: int) -> bytes:
    event = {"index": 0, "content": "", "tokens": [], "id_slot": 0, "stop": True,
             "model": "fake.gguf", "tokens_predicted": n, "tokens_evaluated": 64,
             "stop_type": "limit", "prompt": "fake prompt",
             "timings": {"cache_n": 0, "prompt_n": 64, "prompt_ms": 1.0, "predicted_n": n,
                         "predicted_ms": 10.0}}
    return _chunk(b"data: " + json.dumps(event).encode() + b"\n\n") + b"0\r\n\r\n"


def serve() -> None:
    """Answer ``GET /v1/models`` and stream ``POST /completion``; print the port first."""
    tokens = [_event(i) for i in range(MAX_TOKENS)]
    head = (b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    models = json.dumps({"data": [{"id": "fake", "meta": {"n_vocab": 8192}}]}).encode()

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head_bytes, _, body = data.partition(b"\r\n\r\n")
            lines = head_bytes.decode("latin-1").split("\r\n")
            method = lines[0].split(" ")[0]
            length = next((int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                           if k.strip().lower() == "content-length"), 0)
            while len(body) < length:
                body += conn.recv(65536)
            if method == "GET":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(models), models))
                return
            n = min(int(json.loads(body).get("n_predict", 16)), MAX_TOKENS)
            conn.sendall(head)
            send = conn.send
            for i in range(n):
                send(tokens[i])
            conn.sendall(_final(n))

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


# -- the clients ------------------------------------------------------------------------


def _body(n: int) -> dict[str, object]:
    return {"prompt": [1, 2, 3], "n_predict": n, "stream": True}


def bare_httpx(url: str) -> Callable[[int], int]:
    client = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))

    def run(n: int) -> int:
        seen = 0
        with client.stream("POST", url + "/completion", json=_body(n)) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    json.loads(line[6:])
                    time.perf_counter()
                    seen += 1
        return seen - 1

    return run


def bare_stdlib(url: str) -> Callable[[int], int]:
    port = int(url.rsplit(":", 1)[1])

    def run(n: int) -> int:
        body = json.dumps(_body(n)).encode()
        seen = 0
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (len(body), body))
            tail = b""
            while True:
                block = sock.recv(262144)
                if not block:
                    break
                lines = (tail + block).split(b"\n")
                tail = lines.pop()
                for line in lines:
                    if line[:6] == b"data: ":
                        json.loads(line[6:])
                        time.perf_counter()
                        seen += 1
        return seen - 1

    return run


def ours(url: str, via_httpx: bool = False) -> Callable[[int], int]:
    engine = LlamaServer(url, transport=httpx.HTTPTransport() if via_httpx else None)
    costs: list[float] = []

    def run(n: int) -> int:
        generation = engine.generate(GenerationRequest(prompt_tokens=3, generate_tokens=n))
        cost = getattr(generation, "client_s_per_event", None)  # None: an older checkout
        if cost is not None:
            costs.append(cost)
        return generation.generated_tokens

    run.costs = costs  # type: ignore[attr-defined]
    return run


# -- measuring --------------------------------------------------------------------------


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (Linux /proc), else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(run: Callable[[int], int], n: int, streams: int, pool: ThreadPoolExecutor
              ) -> tuple[float, int]:
    start = time.perf_counter()
    if streams == 1:
        total = run(n)
    else:
        total = sum(pool.map(run, [n] * streams))
    return time.perf_counter() - start, total


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", default="128,2048")
    parser.add_argument("--streams", default="1,16")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return 0
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        return report(url, server.pid, args)
    finally:
        server.kill()
        server.wait()


def report(url: str, server_pid: int, args: argparse.Namespace) -> int:
    variants = {"bare httpx": bare_httpx(url), "bare stdlib": bare_stdlib(url),
                "ours": ours(url), "ours via httpx": ours(url, via_httpx=True)}
    stamp = timeit.timeit(time.perf_counter, number=1_000_000)
    print(f"fake llama-server at {url} (pid {server_pid}); {os.cpu_count()} cores; "
          f"{args.rounds} interleaved rounds per cell; time.perf_counter() costs "
          f"{stamp * 1e3:.0f} ns per call")
    print(f"{'tokens':>6} {'streams':>7}  " + "  ".join(f"{k:>14}" for k in variants)
          + f"  {'ours/bare':>9}  {'server CPU':>10}  {'ours: client us/event':>21}")
    with ThreadPoolExecutor(max_workers=max(int(s) for s in args.streams.split(","))) as pool:
        for n in (int(x) for x in args.tokens.split(",")):
            for streams in (int(x) for x in args.streams.split(",")):
                rates: dict[str, list[float]] = {k: [] for k in variants}
                costs = variants["ours"].costs  # type: ignore[attr-defined]
                for run in variants.values():
                    one_round(run, n, streams, pool)  # warm-up
                costs.clear()
                server_before, started = cpu_s(server_pid), time.perf_counter()
                for _ in range(args.rounds):
                    for name, run in variants.items():
                        seconds, total = one_round(run, n, streams, pool)
                        rates[name].append(total / seconds)
                wall = time.perf_counter() - started
                server_after = cpu_s(server_pid)
                server_cpu = (server_after - server_before
                              if server_before is not None and server_after is not None
                              else float("nan"))
                med = {k: statistics.median(v) for k, v in rates.items()}
                bare = max(med["bare httpx"], med["bare stdlib"])
                cost = statistics.median(costs) * 1e6 if costs else float("nan")
                print(f"{n:>6} {streams:>7}  " + "  ".join(f"{med[k]:>10.0f} t/s" for k in med)
                      + f"  {bare / med['ours']:>8.2f}x  {server_cpu / wall:>9.0%}  "
                      f"{cost:>21.1f}", flush=True)
    print("t/s: generated tokens of all streams / wall time per round (median); ours/bare: "
          "time of ours over the faster bare loop; server CPU: the fake server's CPU time "
          "over the wall time of all rounds (100% = one core); client us/event: ours' "
          "measured reading + parsing time per streamed event (Generation.client_s_per_event)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
