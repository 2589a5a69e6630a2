"""What is judged: a metric's direction and the smallest change worth flagging."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_tokperf.errors import ConfigError

DEFAULT_ALPHA = 0.005
"""One comparison, or a whole session through ``judge_family``: at most 0.5% false flags.

Once the noise is comparable to the minimum effect, the minimum effect stops filtering
and the false-alarm rate is alpha itself (both directions together); asv uses 0.002,
Otava 0.001."""


@dataclass(frozen=True, slots=True)
class Metric:
    """A measured figure: its direction and the smallest change worth flagging."""

    name: str
    higher_is_better: bool
    min_effect: float = 0.05

    def __post_init__(self) -> None:
        if not 0 < self.min_effect < 1:
            raise ConfigError(
                f"min_effect for {self.name!r} is {self.min_effect!r}: give a fraction "
                "between 0 and 1, e.g. 0.05 for 5%"
            )


DECODE = Metric("decode", higher_is_better=True)
PREFILL = Metric("prefill", higher_is_better=True)
TTFT = Metric("ttft", higher_is_better=False)
EFFICIENCY = Metric("efficiency", higher_is_better=True)
AGGREGATE = Metric("aggregate", higher_is_better=True)
"""All concurrent streams' output tokens per second of a round's wall time."""


def check_level(x: float, name: str) -> None:
    """``ConfigError`` unless ``0 < x < 1`` (NaN included)."""
    if not 0 < x < 1:
        raise ConfigError(f"{name} is {x!r}: give a probability between 0 and 1, e.g. 0.005")
