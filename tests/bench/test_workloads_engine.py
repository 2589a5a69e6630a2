"""Workloads beyond a short cold prompt, against the session's real llama-server."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine


def test_warm_prefix_is_served_from_the_slot_and_stored_as_its_own_series(
    pytester: pytest.Pytester, llama_url: str, test_model: Path
) -> None:
    # The marker sets the workload; parametrize varies one part of it.
    pytester.makepyfile("""
        import pytest

        @pytest.mark.tokperf(prompt_tokens=64, generate_tokens=8, depth_tokens=256,
                             repetitions=2, warmup=0)
        @pytest.mark.parametrize("cached", [0, 300])
        def test_turn(tok_bench, cached):
            r = tok_bench(cached_prefix_tokens=cached)
            w = r.result.workload
            assert (w.prompt_tokens, w.depth_tokens, w.cached_prefix_tokens) == (64, 256, cached)
            served = [s.cached_prompt_tokens for s in r.result.samples]
            processed = [s.prompt_tokens for s in r.result.samples]
            if cached:
                assert all(300 <= c < 320 for c in served), served
                assert all(p == 320 - c for p, c in zip(processed, served)), (processed, served)
            else:
                assert served == [0, 0] and processed == [320, 320]
            assert not [n for n in r.result.notes if "cache" in n], r.result.notes
    """)
    db = pytester.path / "r.db"
    result = pytester.runpytest("--tokperf-url", llama_url, f"--tokperf-model={test_model}",
                                "--tokperf-db", str(db))
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_turn?0?*d256+64/8 *", "*test_turn?300?*d256+64/8 warm300*"])
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select r.cached_prefix_tokens, s.cached_prefix_tokens, s.series_text "
                            "from results r join series s using (series_key) "
                            "order by r.id").fetchall()
    assert [(r[0], r[1]) for r in rows] == [(0, 0), (300, 300)]
    assert "cached_prefix_tokens" not in rows[0][2] and '"cached_prefix_tokens":300' in rows[1][2]


def test_unknown_marker_argument_lists_the_workload_ones(pytester: pytest.Pytester,
                                                         llama_url: str) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.tokperf(depth=1024)
        def test_typo(tok_bench):
            tok_bench()
    """)
    result = pytester.runpytest("--tokperf-url", llama_url, "--tokperf-db", "off")
    result.assert_outcomes(errors=1)  # the fixture refuses it, before any request
    result.stdout.fnmatch_lines(["*@pytest.mark.tokperf got unknown argument(s) ?'depth'?; known: "
                                 "repetitions, warmup, min_efficiency, prompt_tokens, "
                                 "generate_tokens, depth_tokens, concurrency, cached_prefix_tokens*"])


SPECULATIVE_TEST = """
def test_ab(tok_bench):
    mine = tok_bench.speculative("self", prompt_tokens=16, generate_tokens=48,
                                 repetitions=2, warmup=0)
    # Greedy decoding drafted by the model itself: llama-server accepts every draft.
    assert mine.acceptance_rate is not None and mine.acceptance_rate >= 0.9, mine.ab.describe()
    small = tok_bench.speculative("small", prompt_tokens=16, generate_tokens=48,
                                  repetitions=2, warmup=0)
    # A small random-weight draft predicts nothing the random target would say.
    assert small.acceptance_rate is not None and small.acceptance_rate < 0.5, small.ab.describe()
    for ab in (mine, small):
        assert ab.base.ceiling is not None and ab.accelerated.ceiling is None
        assert not ab.base.result.engine.speculative and ab.accelerated.result.engine.speculative
        assert ab.multiplier is not None and ab.multiplier > 0
        assert ab.ab.drafted_tokens and ab.ab.drafted_tokens > 0
"""


def test_speculative_ab_measures_both_sides_and_stores_them_apart(
    pytester: pytest.Pytester, server_binary: Path
) -> None:
    pytester.makepyfile(SPECULATIVE_TEST)
    db = pytester.path / "r.db"
    result = pytester.runpytest(
        "--tokperf-engine", "llama-server", "--tokperf-model", "test",
        f"--tokperf-server-bin={server_binary}", "--tokperf-threads", "1",
        "--tokperf-db", str(db), "--tokperf-bandwidth", "30GB/s",
        "-o", "tokperf_max_cv=0.99",  # 2 repetitions of a 30 ms decode: no 'unstable' here
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_ab*16/48 *", "*test_ab*16/48 +draft*"])
    notes = " ".join(result.stdout.str().split())  # notes wrap at 120 columns
    assert re.search(r"speculative A/B: \S+x the base decode .* draft acceptance", notes)
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "select r.verdict, r.ceiling_decode_tokens_per_s is not null, s.speculative, "
            "s.draft_model, sum(m.draft_tokens) from results r join series s using (series_key) "
            "join samples m on m.result_id = r.id group by r.id order by r.id").fetchall()
    test_gguf, draft_gguf = rows[1][3], rows[3][3]
    assert rows == [("unchecked", 1, 0, None, None), ("unchecked", 0, 1, test_gguf, rows[1][4]),
                    ("unchecked", 1, 0, None, None), ("unchecked", 0, 1, draft_gguf, rows[3][4])]
    assert test_gguf.startswith("tokperf-test-llama") and "-draft-" in draft_gguf
    # One drafting server per draft, each started once for the session, all stopped.
    logs = sorted((pytester.path / ".tokperf" / "logs").glob("llama-server-draft-*.log"))
    assert len(logs) == 2
    assert _writing_to(logs) == [], "a drafting llama-server outlived the session"


def _writing_to(logs: list[Path]) -> list[str]:
    """Pids of live processes whose stdout is one of ``logs``."""
    names = {str(p) for p in logs}
    live = []
    for proc_dir in Path("/proc").iterdir():
        try:
            if proc_dir.name.isdigit() and os.readlink(proc_dir / "fd" / "1") in names:
                live.append(proc_dir.name)
        except OSError:
            continue
    return live


def test_a_draft_with_another_vocabulary_is_refused_before_it_starts(
    pytester: pytest.Pytester, server_binary: Path, tmp_path: Path
) -> None:
    from pytest_tokperf.model.spec import ModelSpec
    from pytest_tokperf.model.writer import write_model

    other = write_model(ModelSpec(n_layer=1, n_embd=64, n_ff=128, n_head=2, n_head_kv=2,
                                  n_vocab=600), tmp_path / "other-vocab.gguf")
    pytester.makepyfile("""
        def test_ab(tok_bench):
            tok_bench.speculative(prompt_tokens=8, generate_tokens=8, repetitions=1, warmup=0)
    """)
    result = pytester.runpytest(
        "--tokperf-engine", "llama-server", "--tokperf-model", "test",
        f"--tokperf-server-bin={server_binary}", "--tokperf-threads", "1", "--tokperf-db", "off",
        f"--tokperf-draft-model={other}",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"*ConfigError: draft model '{other}' cannot speculate for target model '*.gguf': "
        "vocabulary sizes 8192 (target) and 600 (draft) differ by 7592*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert not list((pytester.path / ".tokperf" / "logs").glob("*draft*")), "a draft server started"


def test_speculative_on_an_attached_server_names_the_fix(pytester: pytest.Pytester,
                                                         llama_url: str) -> None:
    pytester.makepyfile("""
        def test_ab(tok_bench):
            tok_bench.speculative("self", prompt_tokens=8, generate_tokens=8)
    """)
    result = pytester.runpytest("--tokperf-url", llama_url, "--tokperf-db", "off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"*ConfigError: speculative A/B needs a llama-server that tokperf starts (attached to "
        f"{llama_url})*use --tokperf-engine llama-server without --tokperf-url*"])


def test_generated_model_streams_every_token_after_a_long_prompt(llama_url: str) -> None:
    # With the <0xXX> pieces typed BYTE (writer version 1) salt 1 streamed 0 of 32
    # tokens: random weights emitted invalid UTF-8 and llama-server held every later
    # token back until the end of the stream, leaving nothing to time.
    from pytest_tokperf.engines.llama_server.adapter import LlamaServer
    from pytest_tokperf.results import GenerationRequest

    engine = LlamaServer(llama_url)
    try:
        chunks = [len(engine.generate(GenerationRequest(prompt_tokens=1500, generate_tokens=32,
                                                        salt=salt)).chunk_times_s)
                  for salt in range(6)]
    finally:
        engine.close()
    assert chunks == [32] * 6


def test_chat_workload_counts_the_thinking_of_a_generated_reasoning_model(
    pytester: pytest.Pytester, llama_url: str, test_model: Path
) -> None:
    # The generated model's template opens <think>; random weights never close it, so
    # llama-server streams every token as reasoning_content and no answer arrives.
    pytester.makepyfile("""
        import pytest

        @pytest.mark.tokperf(chat=True, repetitions=2, warmup=0)
        def test_think(tok_bench):
            r = tok_bench(prompt_tokens=32, generate_tokens=24)
            assert r.result.workload.chat is True
            assert [s.reasoning_tokens for s in r.result.samples] == [24, 24]
            assert r.reasoning_tokens == 24 and r.answer_ttft_s is None
            assert all(s.prompt_tokens > 32 for s in r.result.samples)  # template + text
            raw = tok_bench(prompt_tokens=32, generate_tokens=24, chat=False)
            assert raw.reasoning_tokens is None
    """)
    db = pytester.path / "r.db"
    result = pytester.runpytest("--tokperf-url", llama_url, f"--tokperf-model={test_model}",
                                "--tokperf-db", str(db))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_think*32/24 chat*"])
    notes = " ".join(result.stdout.str().split())  # notes wrap at 120 columns
    assert ("24 of 24 generated tokens were reasoning (median); no answer token arrived"
            in notes)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select r.chat, s.chat, max(m.reasoning_tokens) from results r "
                            "join series s using (series_key) join samples m on m.result_id = r.id "
                            "group by r.id order by r.id").fetchall()
    assert rows == [(1, 1, 24), (0, 0, None)]


def test_speculative_ab_on_attached_servers(
    pytester: pytest.Pytester, llama_url: str, server_binary: Path, test_model: Path,
    tmp_path: Path
) -> None:
    # A user's own drafting server (e.g. a CUDA build with its draft) beside the base.
    from pytest_tokperf.launch.process import LaunchSpec, start_llama_server

    spec = LaunchSpec(binary=server_binary, model=test_model, log_path=tmp_path / "spec.log",
                      threads=1, context_size=2048, draft_model=test_model)
    pytester.makepyfile("""
        def test_ab(tok_bench):
            ab = tok_bench.speculative("mine.gguf", prompt_tokens=16, generate_tokens=32,
                                       repetitions=2, warmup=0)
            assert ab.accelerated.result.engine.speculative
            assert dict(ab.accelerated.result.engine.settings)["draft_model"] == "mine.gguf"
            assert ab.acceptance_rate is not None and ab.acceptance_rate >= 0.9  # self-draft
            assert ab.base.ceiling is not None
    """)
    with start_llama_server(spec) as drafting:
        result = pytester.runpytest("--tokperf-url", llama_url, f"--tokperf-model={test_model}",
                                    "--tokperf-speculative-url", drafting.url, "--tokperf-db", "off")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_ab*16/32 +draft*"])


def test_a_dead_speculative_url_names_the_fix(pytester: pytest.Pytester, llama_url: str) -> None:
    pytester.makepyfile("""
        def test_ab(tok_bench):
            tok_bench.speculative(prompt_tokens=8, generate_tokens=8, repetitions=1, warmup=0)
    """)
    result = pytester.runpytest("--tokperf-url", llama_url, "--tokperf-db", "off",
                                "--tokperf-speculative-url", "http://127.0.0.1:9")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*EngineUnavailable: --tokperf-speculative-url "
                                 "'http://127.0.0.1:9' does not answer as a ready server*"])
