"""The main job's workloads beyond a cold short prompt: a chat turn after its history
(warm prefix vs cold), a thinking model on the chat endpoint, and a speculative A/B.

Figures are printed in the summary table and stored; nothing here asserts a speed
beyond what holds on any healthy machine.
"""

from __future__ import annotations

import pytest


@pytest.mark.tokperf(prompt_tokens=1024, generate_tokens=16, repetitions=3)
@pytest.mark.parametrize("cached", [0, 960], ids=["cold", "warm"])
def test_chat_turn_ttft(tok_bench, cached):
    # warm: the first 960 tokens (the conversation so far) were sent just before, so
    # the slot's KV serves them and only the 64-token new turn is prefilled
    result = tok_bench(cached_prefix_tokens=cached)
    if cached:
        assert all(s.cached_prompt_tokens >= 0.9 * cached for s in result.result.samples)


def test_thinking_model_chat(tok_bench):
    # generated models carry a thinking template: on the chat endpoint every token is
    # reasoning, so the answer never starts within the budget
    result = tok_bench(prompt_tokens=64, generate_tokens=64, chat=True, repetitions=3)
    assert result.reasoning_tokens == 64


def test_speculative_small_draft(tok_bench):
    # a small random-weight draft is never accepted, so speculation only costs time:
    # the A/B shows the multiplier below 1 and the acceptance near 0
    ab = tok_bench.speculative("small", prompt_tokens=16, generate_tokens=64, repetitions=3)
    assert ab.acceptance_rate is not None
    ab.base.assert_usable(min_tokens_per_s=2.0)
