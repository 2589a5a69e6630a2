"""The engine registry, the start commands for other engines, and the salted prompt."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import httpx
import pytest

from pytest_tokperf.engines.base import Engine
from pytest_tokperf.launch.process import free_port
from pytest_tokperf.launch.plans import (
    LaunchPlan,
    find_binary,
    launch_plan,
    lmstudio_plan,
    mlx_plan,
    ollama_plan,
    sglang_plan,
    start_planned,
    vllm_plan,
)
from pytest_tokperf.engines import BUILTIN_ENGINE_NAMES
from pytest_tokperf.engines.ollama import Ollama
from pytest_tokperf.engines.registry import (
    BUILTIN_ENGINES,
    EngineConfig,
    EngineRegistry,
    create_engine,
)
from pytest_tokperf.engines.wire import text_prompt
from pytest_tokperf.errors import ConfigError, EngineUnavailable


def test_every_builtin_name_makes_an_engine() -> None:
    assert EngineRegistry().names()[:7] == ("llama-server", "ollama", "vllm", "lmstudio", "mlx", "sglang", "openai")
    assert tuple(BUILTIN_ENGINES) == BUILTIN_ENGINE_NAMES  # the light copy settings reads
    for name in BUILTIN_ENGINES:
        engine = create_engine(name, "http://127.0.0.1:9/", timeout_s=5.0, model="m")
        assert isinstance(engine, Engine) and engine.name == name
        assert engine.base_url == "http://127.0.0.1:9"
        engine.close()


def test_the_model_and_settings_reach_the_adapter() -> None:
    engine = create_engine("ollama", "http://127.0.0.1:9", timeout_s=5.0, model="llama3.2:3b",
                           settings=(("ctx_size", "8192"),))
    assert isinstance(engine, Ollama) and engine.model() == "llama3.2:3b"
    engine.close()


def test_an_unknown_engine_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="'tgi' is not an engine.*llama-server, ollama, vllm, "
                                          "lmstudio, mlx, sglang, openai.*pytest_tokperf_add_engines"):
        create_engine("tgi", "http://127.0.0.1:9")


def test_a_registered_factory_gets_the_config() -> None:
    registry = EngineRegistry()
    seen: list[EngineConfig] = []

    def factory(config: EngineConfig) -> Engine:
        seen.append(config)
        return Ollama(config.base_url, model=config.model)

    registry.register("my-ollama", factory)
    registry.register("my-ollama", factory)  # the same factory again is harmless
    engine = registry.create("my-ollama", "http://127.0.0.1:9/", timeout_s=3.0, model="x")
    engine.close()
    assert seen == [EngineConfig(base_url="http://127.0.0.1:9", timeout_s=3.0, model="x")]
    assert "my-ollama" in registry.names() and "my-ollama" not in EngineRegistry().names()


def test_registering_wrong_things_says_what_is_wrong() -> None:
    registry = EngineRegistry()
    with pytest.raises(ConfigError, match="'ollama' is already registered"):
        registry.register("ollama", lambda config: Ollama(config.base_url))
    with pytest.raises(ConfigError, match="'my engine' is not usable"):
        registry.register("my engine", lambda config: Ollama(config.base_url))
    with pytest.raises(ConfigError, match="not callable"):
        registry.register("x", "factory")  # type: ignore[arg-type]
    registry.register("broken", lambda config: object())  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="'broken' returned <object.*lacks the Engine methods"):
        registry.create("broken", "http://127.0.0.1:9")


def test_prompts_are_unique_at_their_first_token_and_about_the_asked_length() -> None:
    prompts = [text_prompt(64, salt) for salt in range(50)]
    assert len({p.split()[0] for p in prompts}) == 50
    assert all(60 <= len(p.split()) + 2 <= 68 for p in prompts)
    assert text_prompt(64, 3) == text_prompt(64, 3)
    # salts less than 1296 apart differ in their first two characters, so a prefix cache
    # can share no more than the first character's tokens between them
    start = 7 * 10**9 + 123
    assert len({text_prompt(64, s)[:2] for s in range(start, start + 1296)}) == 1296


# -- start commands ------------------------------------------------------------------


def test_start_commands_bind_loopback_on_the_given_port() -> None:
    ollama = ollama_plan(Path("/usr/bin/ollama"), 11500)
    assert ollama.command == ("/usr/bin/ollama", "serve")
    assert ollama.env == (("OLLAMA_HOST", "127.0.0.1:11500"),)
    assert ollama.shown == "OLLAMA_HOST=127.0.0.1:11500 /usr/bin/ollama serve"
    assert (ollama.url, ollama.ready_path, ollama.detaches) == ("http://127.0.0.1:11500", "/api/version", False)
    mlx = mlx_plan(Path("/opt/mlx_lm.server"), "mlx-community/Llama-3.2-3B-Instruct-4bit", 8081)
    assert mlx.command == ("/opt/mlx_lm.server", "--model", "mlx-community/Llama-3.2-3B-Instruct-4bit",
                           "--host", "127.0.0.1", "--port", "8081")
    lms = lmstudio_plan(Path("/usr/local/bin/lms"), 1235)
    assert lms.command == ("/usr/local/bin/lms", "server", "start", "--port", "1235")
    assert lms.detaches and lms.stop_command == ("/usr/local/bin/lms", "server", "stop")
    sglang = sglang_plan(Path("sglang"), "Qwen/Qwen3-0.6B", 30001)
    assert sglang.command == ("sglang", "serve", "--model-path", "Qwen/Qwen3-0.6B", "--host",
                              "127.0.0.1", "--port", "30001")


def test_vllm_gets_only_the_clean_flags_its_help_lists() -> None:
    help_text = "--enable-prompt-tokens-details  ...  --enable-prefix-caching, --no-enable-prefix-caching"
    plan = vllm_plan(Path("vllm"), "Qwen/Qwen3-0.6B", 8001, help_text, ("--max-model-len", "4096"))
    assert plan.command == ("vllm", "serve", "Qwen/Qwen3-0.6B", "--host", "127.0.0.1", "--port", "8001",
                            "--no-enable-prefix-caching", "--enable-prompt-tokens-details",
                            "--max-model-len", "4096")
    assert plan.clean == ("--no-enable-prefix-caching", "--enable-prompt-tokens-details")
    assert plan.ready_path == "/health"
    assert "--enable-per-request-metrics" not in vllm_plan(Path("vllm"), "m", 1, "").command
    # "--enable-prefix-caching" alone (an old build's help) is not the --no- form
    assert "--no-enable-prefix-caching" not in vllm_plan(
        Path("vllm"), "m", 1, "[--enable-prefix-caching]").command


def test_the_users_own_setting_wins_over_a_clean_flag() -> None:
    help_text = "--no-enable-prefix-caching --enable-per-request-metrics"
    plan = vllm_plan(Path("vllm"), "m", 1, help_text, ("--enable-prefix-caching",))
    assert plan.command[-2:] == ("--enable-per-request-metrics", "--enable-prefix-caching")
    mlx = mlx_plan(Path("mlx_lm.server"), "m", 1, "--prompt-cache-size N", ("--prompt-cache-size=4",))
    assert mlx.command[-1] == "--prompt-cache-size=4" and mlx.clean == ()
    ollama = ollama_plan(Path("ollama"), 2, "OLLAMA_NUM_PARALLEL OLLAMA_KEEP_ALIVE", ("OLLAMA_KEEP_ALIVE=-1",))
    assert dict(ollama.env)["OLLAMA_KEEP_ALIVE"] == "-1" and ollama.clean == ("OLLAMA_NUM_PARALLEL=1",)
    with pytest.raises(ConfigError, match="'--flash-attn'.*takes no options.*NAME=value"):
        ollama_plan(Path("ollama"), 2, "", ("--flash-attn",))


def test_starting_needs_the_binary_and_a_model(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(tmp_path))  # no engine venvs there
    with pytest.raises(ConfigError, match="'vllm' is not on PATH nor in .*venvs/vllm "
                       r"\(.ci/install-engines vllm"):
        find_binary("vllm")
    with pytest.raises(ConfigError, match="'sglang' is not on PATH"):
        find_binary("sglang")
    with pytest.raises(ConfigError, match="'tgi' cannot be started.*--tokperf-url"):
        find_binary("tgi")
    for engine in ("mlx", "sglang", "vllm"):
        with pytest.raises(ConfigError, match="needs --tokperf-model"):
            launch_plan(engine, model=None, port=1, binary=Path("x"))
    assert launch_plan("ollama", model=None, port=2, binary=Path("ollama")).engine == "ollama"


def test_a_planned_server_starts_answers_and_stops(tmp_path: Path) -> None:
    port = free_port()
    plan = LaunchPlan(engine="http.server", url=f"http://127.0.0.1:{port}", ready_path="/",
                      command=(sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                               "--directory", str(tmp_path)))
    with start_planned(plan, tmp_path / "server.log", timeout_s=30.0) as server:
        assert httpx.get(server.url + "/", timeout=5.0).status_code == 200
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_detached_start_that_fails_shows_its_log(tmp_path: Path) -> None:
    plan = LaunchPlan(engine="lmstudio", url="http://127.0.0.1:9", ready_path="/v1/models",
                      command=(sys.executable, "-c", "print('no LM Studio here'); raise SystemExit(3)"),
                      stop_command=(sys.executable, "-c", "pass"))
    with pytest.raises(EngineUnavailable, match="exited with code 3(.|\n)*no LM Studio here"):
        start_planned(plan, tmp_path / "lms.log", timeout_s=30.0)
