"""Speculative decoding as the engine itself shows it, whatever the configuration said.

A figure measured while the engine drafts is not the base decode speed, so it must not
join the base series (whose key holds ``EngineInfo.speculative``). Two signals, both
read from the engine:

- *configured*: each adapter's ``info()`` asks what the server runs with. llama-server
  ``GET /slots`` (``"speculative": true`` per slot; b11434's ``/props`` no longer says),
  vLLM's ``vllm:spec_decode_*`` metrics, SGLang's ``speculative_algorithm``, an Ollama
  model with a ``DRAFT`` (or MTP layers and ``draft_num_predict``), LM Studio's
  ``stats.draft_model``;
- *observed*: draft counts on the responses (llama.cpp ``timings.draft_n`` and
  ``draft_n_accepted``, present only when drafting ran; vLLM
  ``metrics.speculative_decoding``; SGLang ``meta_info.spec_*``), which
  ``EngineTimings.speculative`` and ``Sample.speculative`` carry.

``with_observed_speculation`` folds the second into the ``EngineInfo`` a result is
summarised with: one call in ``bench.measure.summarize``, the one place every result
(plain, A/B side, partial) is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_tokperf.results import EngineInfo, Sample

OBSERVED = "speculative_observed"
"""The settings pair that says drafting was seen on responses, not configured."""


def with_observed_speculation(info: EngineInfo, samples: Sequence[Sample]) -> EngineInfo:
    """``info`` marked speculative when any sample's response carried draft counts.

    An engine already known to draft (the A/B's drafting side, a configured server) is
    returned as it is; otherwise the result moves to the speculative series, says why
    in ``settings`` and carries a warning with the counts.
    """
    drafted = [s for s in samples if s.speculative]
    if info.speculative or not drafted:
        return info
    tokens = sum(s.draft_tokens or 0 for s in drafted)
    accepted = [s.draft_accepted_tokens for s in drafted if s.draft_accepted_tokens is not None]
    counts = f"{tokens} drafted" + (f", {sum(accepted)} accepted" if accepted else "")
    warning = (
        f"speculative decoding: {info.name} reported draft tokens on {len(drafted)} of "
        f"{len(samples)} responses ({counts}) though it was not known to draft; this is "
        f"not the base decode speed, so the result is kept apart from the base series"
    )
    settings = dict(info.settings)
    settings[OBSERVED] = "draft counts in responses"
    return replace(info, speculative=True, settings=tuple(sorted(settings.items())),
                   warnings=(*info.warnings, warning))
