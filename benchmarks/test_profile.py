"""How speed changes with prompt length on the default model: the physics in one sweep.

Each prompt length is also the KV depth decode reads at, so this gives TTFT against
prompt length (compute-bound prefill) and decode efficiency against KV depth (the
ceiling is recomputed at each depth). `tokperf plot` draws both.
"""

from __future__ import annotations

import pytest


@pytest.mark.tokperf(repetitions=3, warmup=1)
@pytest.mark.parametrize("prompt_tokens", [64, 512, 1024, 2048])
def test_prompt_length_profile(tok_bench, prompt_tokens):
    result = tok_bench(prompt_tokens=prompt_tokens, generate_tokens=64)
    assert result.ceiling is None or result.ceiling.footprint.depth_tokens >= prompt_tokens
