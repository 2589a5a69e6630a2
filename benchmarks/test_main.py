"""The main job: what a user runs first against the default engine and model.

    pytest benchmarks --tokperf-engine llama-server

Decode on a short prompt (the figure every benchmark prints), and time to first
token on a longer prompt. The summary table at the end shows both, client and
engine side, and every result lands in the results database.
"""

from __future__ import annotations


import pytest


@pytest.mark.tokperf(min_efficiency=0.25)
def test_decode_short_prompt(tok_bench):
    # The floor is loose on purpose: healthy CPU runs reach about 50-65% of the probed
    # ceiling (README); below 25% the build, the threads or the machine is wrong.
    result = tok_bench(prompt_tokens=64, generate_tokens=128)
    result.assert_usable(min_tokens_per_s=2.0)


def test_ttft_prompt_512(tok_bench):
    result = tok_bench(prompt_tokens=512, generate_tokens=16)
    assert result.ttft_s > 0
