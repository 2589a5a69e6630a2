"""Speculative decoding as the engine itself shows it, whatever the configuration said:
a figure measured while the engine drafts must not join the base series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_tokperf.results import EngineInfo, Sample

OBSERVED = "speculative_observed"
"""The settings pair that says drafting was seen on responses, not configured."""


def with_observed_speculation(info: EngineInfo, samples: Sequence[Sample]) -> EngineInfo:
    """``info`` marked speculative when any sample's response carried draft counts."""
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
