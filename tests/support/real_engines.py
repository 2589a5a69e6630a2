"""Helpers for the real mlx_lm and vLLM tests: find the engine, start it once, ask its
own Python what it is, and the tok_bench tests the plugin runs against it.

The engines come from the venvs ``.ci/install-engines`` makes (or PATH); where neither
has one, its tests are skipped with the command that installs it.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import httpx

from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.launch.plans import BINARIES, find_binary, venv_dir, venv_program
from pytest_tokperf.settings import resolve


def missing(engine: str) -> str | None:
    """Why ``engine`` cannot run here (the skip reason), or None."""
    if shutil.which(BINARIES[engine]) or venv_program(engine) is not None:
        return None
    return (f"{BINARIES[engine]!r} is neither on PATH nor in {venv_dir(engine)}: run "
            f"`.ci/install-engines {engine}` (.ci/install does) to test the real {engine}")


def start(engine: str, model: Path, log_dir: Path, *extra: str) -> EngineSession:
    """An ``EngineSession`` that has started ``engine`` on loopback serving ``model``."""
    values = {"engine": engine, "model": str(model), "db": "off", "startup_timeout": "600",
              "request_timeout": "300"}
    settings = resolve(lambda name: values.get(name), lambda key: None, {}, log_dir,
                       server_args=extra)
    session = EngineSession(settings=settings, log_dir=log_dir)
    try:
        session.engine()
    except BaseException:
        session.close()
        raise
    return session


def program(engine: str) -> Path:
    """The engine's program as the plugin finds it (pytester's HOME has no cache, so
    its sessions get it as --tokperf-server-bin)."""
    return find_binary(engine)


def engine_python(engine: str, code: str) -> str:
    """What ``code`` prints in the engine's own Python (its version, its device)."""
    python = program(engine).parent / "python"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          timeout=300, check=True)
    return done.stdout.strip().splitlines()[-1]


def refused(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2.0)
    except httpx.TransportError:
        return True
    return False


BENCH_TESTS = """
def test_text(tok_bench):
    r = tok_bench(prompt_tokens=16, generate_tokens=24, repetitions=2, warmup=1)
    assert [s.generated_tokens for s in r.result.samples] == [24, 24], r.result.notes

def test_chat(tok_bench):
    r = tok_bench(prompt_tokens=16, generate_tokens=24, repetitions=2, warmup=1, chat=True)
    assert all(s.generated_tokens > 0 for s in r.result.samples)
"""
"""Two tok_bench tests through the plugin: a raw prompt and one through the chat template."""


def stored(db: Path) -> list[dict[str, Any]]:
    """Every stored result joined with its environment, as dicts."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            "select r.test_id, r.efficiency, r.ceiling_decode_tokens_per_s, r.notes, "
            "r.footprint_weights_bytes, r.series_key, e.engine_name, e.engine_settings, "
            "e.model_content_hash, e.model_path from results r "
            "join environments e on e.id = r.environment_id order by r.id").fetchall()
    return [dict(row) for row in rows]


def cached_tokens(db: Path) -> list[int | None]:
    """Every stored sample's ``cached_prompt_tokens``."""
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("select cached_prompt_tokens from samples")]


def killed_mid_stream(session: EngineSession, tokens: int, after_s: float, salt: int = 4242
                      ) -> BaseException:
    """Start a ``tokens``-long generation on ``session``'s started server, SIGKILL the
    server's process group ``after_s`` seconds after the client got its first streamed
    token, and return what the generation raised (an AssertionError when it returned as if
    nothing happened). The clock starts at that token, not at the request: a busy machine
    can hold a request back for seconds before its first byte, and a kill then is no
    mid-stream one."""
    import os
    import signal
    import threading
    import time

    from pytest_tokperf.engines import wire
    from pytest_tokperf.launch.process import ServerProcess
    from pytest_tokperf.results import GenerationRequest

    server = session.server
    assert isinstance(server, ServerProcess), "the kill needs a server this session started"
    engine = session.engine()
    outcome: list[BaseException] = []
    streaming = threading.Event()
    add = wire.ChunkLog.add
    last_token = [0.0]
    killed_at = [float("inf")]

    def seen(log: wire.ChunkLog, now_s: float, n_tokens: int, text: str,
             reasoning: bool = False) -> None:
        if n_tokens:
            streaming.set()
            last_token[0] = time.monotonic()
        add(log, now_s, n_tokens, text, reasoning)

    def generate() -> None:
        try:
            got = engine.generate(GenerationRequest(prompt_tokens=16, generate_tokens=tokens,
                                                    salt=salt, timeout_s=120.0))
        except BaseException as exc:  # what the user would see
            outcome.append(exc)
        else:
            when = ("its last token came before the kill" if last_token[0] < killed_at[0]
                    else "tokens still came after the kill")
            outcome.append(AssertionError(f"{tokens} tokens asked, the server killed "
                                          f"{after_s} s after the first, and the "
                                          f"generation returned {got.generated_tokens} "
                                          f"tokens ({when})"))

    wire.ChunkLog.add = seen  # type: ignore[method-assign]
    try:
        worker = threading.Thread(target=generate)
        worker.start()
        streaming.wait(timeout=120)
        time.sleep(after_s)
        killed_at[0] = time.monotonic()
        os.killpg(server.process.pid, signal.SIGKILL)
        worker.join(timeout=150)
    finally:
        wire.ChunkLog.add = add  # type: ignore[method-assign]
    assert not worker.is_alive(), "the generation did not end after its server was killed"
    return outcome[0]
