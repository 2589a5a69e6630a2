"""Workloads beyond a short cold prompt, against the session's real llama-server."""

from __future__ import annotations

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
