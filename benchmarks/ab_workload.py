"""The workload `tokperf compare-builds`, `bisect` and `watch` measure by default.

    tokperf compare-builds 11292 11434     # runs this file (not collected by `pytest benchmarks`)

A same-run A/B resolves a step by how many pairs a minute it measures and how much one
pair wanders, not by how long each request is: on this project's 2-core VM the test
model's decode read 10.5% a pair at 8 generated tokens (0.14 s a pair), 15% at 32 (0.41 s)
and 11% at 128 (1.37 s, serially correlated), so 16 tokens resolve about 2-4x more per
minute than the main job's 128 (lab/2026-12-07-ab-starts.md). The prompt is short for the
same reason; TTFT is still judged.
"""

from __future__ import annotations


def test_decode_ab(tok_bench):
    tok_bench(prompt_tokens=16, generate_tokens=16)
