"""What a started engine is started with: the exact command line, per engine.

Fake programs on PATH (``fake_engine_bins``) record how they were called, print their
engine's help when asked and serve the engine's API on the port they were given; the
session reads the help, starts the server, measures through it and stops it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.fake_engine_bins import calls, install, stop

from pytest_tokperf.bench.measure import run_workload
from pytest_tokperf.bench.session import EngineSession
from pytest_tokperf.results import Workload
from pytest_tokperf.settings import Settings, resolve


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A PATH holding only the fake engine programs (and the record they write)."""
    record = tmp_path / "calls.jsonl"
    install(tmp_path / "bin", record)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for name in list(os.environ):
        if name.startswith("OLLAMA_"):
            monkeypatch.delenv(name)
    yield record
    stop(record.with_suffix(".lms.pid"))  # a failed test must not leave the daemon


def _settings(engine: str, model: str, root: Path, server_args: tuple[str, ...] = ()) -> Settings:
    values = {"engine": engine, "model": model, "threads": "2", "db": "off",
              "startup_timeout": "30", "request_timeout": "30"}
    return resolve(lambda name: values.get(name), lambda key: None, {}, root,
                   server_args=server_args)


def _start(engine: str, model: str, root: Path) -> tuple[EngineSession, str]:
    session = EngineSession(settings=_settings(engine, model, root), log_dir=root / "logs")
    try:
        url = session.engine().base_url
    except BaseException:
        session.close()
        raise
    return session, url.rsplit(":", 1)[1]


def _program(record: Path, name: str) -> list[dict[str, Any]]:
    return [c for c in calls(record) if c["program"] == name]


CASES = [
    ("vllm", "Qwen/Qwen3-0.6B", "vllm", ["serve", "--help=all"],
     ["serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", "{port}",
      "--no-enable-prefix-caching", "--enable-prompt-tokens-details",
      "--enable-per-request-metrics"]),
    ("sglang", "Qwen/Qwen2.5-0.5B-Instruct", "sglang", ["serve", "--help"],
     ["serve", "--model-path", "Qwen/Qwen2.5-0.5B-Instruct", "--host", "127.0.0.1", "--port",
      "{port}", "--disable-radix-cache"]),
    ("mlx", "mlx-community/Llama-3.2-3B-Instruct-4bit", "mlx_lm.server", ["--help"],
     ["--model", "mlx-community/Llama-3.2-3B-Instruct-4bit", "--host", "127.0.0.1", "--port",
      "{port}", "--prompt-cache-size", "0"]),
    ("ollama", "llama3.2:3b", "ollama", ["serve", "--help"], ["serve"]),
]


@pytest.mark.parametrize(("engine", "model", "program", "help_call", "command"), CASES,
                         ids=[c[0] for c in CASES])
def test_a_started_engine_gets_the_clean_flags_its_help_lists(
    fake_path: Path, tmp_path: Path, engine: str, model: str, program: str,
    help_call: list[str], command: list[str],
) -> None:
    session, port = _start(engine, model, tmp_path)
    try:
        info = session.engine().info()
        result = run_workload(session.engine(), Workload(16, 6, repetitions=1, warmup=0))
    finally:
        session.close()
    made = _program(fake_path, program)
    assert [c["argv"] for c in made] == [help_call, [a.format(port=port) for a in command]]
    assert result.samples and info.name == engine
    clean = dict(info.settings).get("clean_flags", "")
    if engine == "ollama":
        assert made[1]["env"] == {
            "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_NUM_PARALLEL": "1",
            "OLLAMA_MAX_LOADED_MODELS": "1", "OLLAMA_KEEP_ALIVE": "30m",
            "OLLAMA_CONTEXT_LENGTH": "4096"}
        assert clean == ("OLLAMA_NUM_PARALLEL=1 OLLAMA_MAX_LOADED_MODELS=1 OLLAMA_KEEP_ALIVE=30m "
                         "OLLAMA_CONTEXT_LENGTH=4096")
    else:
        assert clean == " ".join(a for a in command[command.index("{port}") + 1:])


def test_vllm_started_clean_reports_cached_tokens_and_its_own_timings(
    fake_path: Path, tmp_path: Path
) -> None:
    """The flags take effect: the cold-prompt check and the agreement check both run."""
    session, _ = _start("vllm", "Qwen/Qwen3-0.6B", tmp_path)
    try:
        result = run_workload(session.engine(), Workload(16, 8, repetitions=2, warmup=0))
    finally:
        session.close()
    assert [s.cached_prompt_tokens for s in result.samples] == [0, 0]
    assert result.engine_decode_tokens_per_s is not None and result.decode_agreement is not None


def test_a_build_without_a_flag_is_started_without_it(
    fake_path: Path, tmp_path: Path
) -> None:
    install(tmp_path / "bin", fake_path, help_variant={"vllm": "vllm-0.9"})
    session, port = _start("vllm", "Qwen/Qwen3-0.6B", tmp_path)
    session.close()
    (_, started) = _program(fake_path, "vllm")
    assert started["argv"] == ["serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", port,
                               "--no-enable-prefix-caching", "--enable-prompt-tokens-details"]


def test_a_program_that_prints_no_help_is_started_plain_and_says_so(
    fake_path: Path, tmp_path: Path
) -> None:
    install(tmp_path / "bin", fake_path, help_variant={"vllm": "silent"})
    lines: list[str] = []
    session = EngineSession(settings=_settings("vllm", "Qwen/Qwen3-0.6B", tmp_path),
                            log_dir=tmp_path / "logs", progress=lines.append)
    try:
        info = session.engine().info()
    finally:
        session.close()
    *helps, started = _program(fake_path, "vllm")
    assert [h["argv"] for h in helps] == [["serve", "--help=all"], ["serve", "--help"]]
    assert started["argv"][-2:] == ["--port", info.base_url.rsplit(":", 1)[1]]
    assert dict(info.settings)["clean_flags"] == "none: vllm printed no help"
    assert "vllm printed no help: starting it without the flags a clean measurement needs" in lines


def test_the_users_server_args_come_last_and_win(fake_path: Path, tmp_path: Path) -> None:
    settings = _settings("vllm", "Qwen/Qwen3-0.6B", tmp_path,
                         server_args=("--enable-prefix-caching", "--max-model-len", "2048"))
    session = EngineSession(settings=settings, log_dir=tmp_path / "logs")
    try:
        session.engine()
    finally:
        session.close()
    (_, started) = _program(fake_path, "vllm")
    assert started["argv"][-5:] == ["--enable-prompt-tokens-details",
                                    "--enable-per-request-metrics", "--enable-prefix-caching",
                                    "--max-model-len", "2048"]
    assert "--no-enable-prefix-caching" not in started["argv"]


def test_lm_studio_is_started_through_its_daemon_and_stopped_with_lms(
    fake_path: Path, tmp_path: Path
) -> None:
    session, port = _start("lmstudio", "qwen2.5-7b-instruct", tmp_path)
    try:
        info = session.engine().info()
    finally:
        session.close()
    assert [c["argv"] for c in _program(fake_path, "lms")] == [
        ["server", "start", "--port", port], ["server", "stop"]]
    assert info.name == "lmstudio" and "clean_flags" not in dict(info.settings)
    assert not fake_path.with_suffix(".lms.pid").exists()


def test_the_plugin_starts_vllm_from_path_and_records_the_clean_flags(
    fake_path: Path, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile("""
        def test_decode(tok_bench):
            r = tok_bench(prompt_tokens=16, generate_tokens=8, repetitions=2, warmup=0)
            settings = dict(r.result.engine.settings)
            assert settings["clean_flags"] == ("--no-enable-prefix-caching "
                "--enable-prompt-tokens-details --enable-per-request-metrics")
            assert r.result.engine_decode_tokens_per_s is not None
    """)
    result = pytester.runpytest("--tokperf-engine", "vllm", "--tokperf-model", "Qwen/Qwen3-0.6B",
                                "--tokperf-db", "off")
    result.assert_outcomes(passed=1)
    assert [c["argv"][0] for c in _program(fake_path, "vllm")] == ["serve", "serve"]
