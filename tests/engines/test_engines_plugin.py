"""The real ``tok_bench`` fixture against every fake engine, through pytester."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.fake_engines import FakeLMStudio, FakeMLX, FakeOllama, FakeSGLang, FakeVLLM
from tests.support.fake_http import FakeServer

BENCH = """
def test_bench(tok_bench):
    r = tok_bench(prompt_tokens=24, generate_tokens={gen}, repetitions=2, warmup=1)
    res = r.result
    assert res.engine.name == {name!r}
    assert res.engine.version == {version!r}
    assert [s.generated_tokens for s in res.samples] == [{got}, {got}]
    assert r.decode_tokens_per_s > 0 and r.ttft_s > 0
    assert {note!r} in " | ".join(res.notes) if {note!r} else True, res.notes
"""

CASES: list[tuple[str, Callable[[], FakeServer], str | None, str, int, str]] = [
    ("ollama", lambda: FakeOllama(), "llama3.2:3b", "0.12.3", 10, ""),
    ("vllm", lambda: FakeVLLM(), None, "0.11.0", 10, ""),
    ("lmstudio", lambda: FakeLMStudio(eos_after=6), None, "1.52.1", 6, "asked for 10 tokens, got [6]"),
    ("mlx", lambda: FakeMLX(), "mlx-community/Llama-3.2-3B-Instruct-4bit", "0.28.3", 10, ""),
    ("sglang", lambda: FakeSGLang(), None, "0.5.3", 10, ""),
]


@pytest.mark.parametrize(("name", "make", "model", "version", "got", "note"), CASES,
                         ids=[c[0] for c in CASES])
def test_tok_bench_measures_each_engine(
    pytester: pytest.Pytester, name: str, make: Callable[[], FakeServer], model: str | None,
    version: str, got: int, note: str,
) -> None:
    pytester.makepyfile(BENCH.format(name=name, version=version, gen=10, got=got, note=note))
    with make() as fake:
        args = ["--tokperf-engine", name, "--tokperf-url", fake.url, "--tokperf-db", "off"]
        if model:
            args += ["--tokperf-model", model]
        result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"tokperf: engine {name}, attach http://127.0.0.1:*, build *",
                                 "*test_bench*24/10*"])


def test_a_url_that_is_another_engine_fails_naming_both(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BENCH.format(name="ollama", version="", gen=8, got=8, note=""))
    with FakeVLLM() as fake:
        result = pytester.runpytest("--tokperf-engine", "ollama", "--tokperf-url", fake.url,
                                    "--tokperf-model", "llama3.2:3b", "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*EngineProtocolError: --tokperf-engine 'ollama': {fake.url} does "
                                 f"not answer as ollama*it looks like vLLM 0.11.0*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_an_unknown_model_fails_listing_the_pulled_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BENCH.format(name="ollama", version="0.12.3", gen=8, got=8, note=""))
    with FakeOllama() as fake:
        result = pytester.runpytest("--tokperf-engine", "ollama", "--tokperf-url", fake.url,
                                    "--tokperf-model", "mistral:7b", "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no model 'mistral:7b'*pulled models: 'llama3.2:3b'*"])


def test_an_unknown_engine_name_is_a_usage_error_listing_all(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--tokperf-engine", "tgi", "--tokperf-url", "http://127.0.0.1:9")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'tgi' is not an engine*ollama, vllm, lmstudio, mlx, sglang, openai*"])


def test_a_conftest_registers_an_engine(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        from pytest_tokperf.engines.openai_compat import OpenAICompatible

        class MyServer(OpenAICompatible):
            name = "my-server"
            display = "my inference server"
            send_ignore_eos = True

        def pytest_tokperf_add_engines(register):
            register("my-server", lambda config: MyServer(
                config.base_url, timeout_s=config.timeout_s, model=config.model,
                settings=config.settings, transport=config.transport,
            ))
    """)
    pytester.makepyfile(BENCH.format(name="my-server", version=None, gen=9, got=9, note=""))
    with FakeVLLM(eos_after=3) as fake:
        result = pytester.runpytest("--tokperf-engine", "my-server", "--tokperf-url", fake.url,
                                    "--tokperf-db", "off")
    result.assert_outcomes(passed=1)


def test_ollama_model_file_gives_a_ceiling(pytester: pytest.Pytester, test_model: Path) -> None:
    """/api/show's modelfile names the GGUF blob; on the same host that is enough for a
    ceiling, as for an attached llama-server."""
    pytester.makepyfile("""
        def test_bench(tok_bench):
            r = tok_bench(prompt_tokens=24, generate_tokens=10, repetitions=2, warmup=0)
            assert r.ceiling is not None and r.efficiency > 0
            assert r.ceiling.bandwidth.source == "explicit"
    """)
    with FakeOllama(blob_path=str(test_model)) as fake:
        result = pytester.runpytest("--tokperf-engine", "ollama", "--tokperf-url", fake.url,
                                    "--tokperf-model", "llama3.2:3b", "--tokperf-db", "off",
                                    "--tokperf-bandwidth", "30GB/s")
    result.assert_outcomes(passed=1)
