"""Which layers attend through a sliding window, decided the way llama.cpp decides it (a
windowed layer is charged ``min(depth, window)`` KV positions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SWA_PERIODS: dict[str, int] = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}
"""llama.cpp's ``set_swa_pattern(N)`` per architecture when the file states no pattern."""
DEFAULT_WINDOWS: dict[str, int] = {"gemma2": 4096}
"""Windows llama.cpp assumes when ``sliding_window`` is missing."""


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """The window (tokens), one flag per layer, and where the pattern came from."""

    window: int | None
    layers: tuple[bool, ...]
    source: str
    notes: tuple[str, ...] = ()
    """Assumptions made on the way; they matter only once the depth exceeds the window."""

def period_pattern(period: int, n_layer: int) -> tuple[bool, ...]:
    """llama.cpp's ``set_swa_pattern(period)`` (dense layer last in each period)."""
    return tuple(period == 0 or il % period < period - 1 for il in range(n_layer))


def _from_key(pattern: int | Sequence[int | bool], n_layer: int, key: str
              ) -> tuple[tuple[bool, ...], str, tuple[str, ...]]:
    if isinstance(pattern, int):
        return period_pattern(pattern, n_layer), f"{key} = {pattern} (period)", ()
    flags = tuple(bool(v) for v in pattern)
    if len(flags) == n_layer:
        return flags, f"{key} (per layer)", ()
    if not flags:
        return (False,) * n_layer, f"{key} (empty)", (
            f"{key} is an empty array; every layer was charged the full depth",)
    tiled = tuple(flags[il % len(flags)] for il in range(n_layer))
    return tiled, f"{key} (repeated)", (
        f"{key} has {len(flags)} entries for {n_layer} layers; the pattern was repeated",)


def resolve(arch: str, n_layer: int, window_key: int | None,
            pattern: int | Sequence[int | bool] | None, pattern_key: str,
            window_key_name: str) -> SlidingWindow:
    """The sliding-window layout of a file, from its keys and its architecture."""
    window = window_key if window_key is not None and window_key > 0 else None
    notes: list[str] = []
    if window is None and arch in DEFAULT_WINDOWS and window_key is None:
        window = DEFAULT_WINDOWS[arch]
        notes.append(f"no {window_key_name} key; assumed llama.cpp's default window of "
                     f"{window} tokens for {arch}")
    if window is None:
        return SlidingWindow(None, (False,) * n_layer, "no sliding window")
    if pattern is not None:
        layers, source, extra = _from_key(pattern, n_layer, pattern_key)
        return SlidingWindow(window, layers, source, tuple(notes) + extra)
    if arch in SWA_PERIODS:
        period = SWA_PERIODS[arch]
        return SlidingWindow(window, period_pattern(period, n_layer),
                             f"llama.cpp's pattern for {arch} (1 full-attention layer in {period})",
                             tuple(notes))
    notes.append(f"{arch} has a {window}-token sliding window but no "
                 f"{pattern_key} key and no pattern tokperf knows; every layer was charged "
                 f"the full depth, so the KV bytes are an upper bound")
    return SlidingWindow(window, (False,) * n_layer, "unknown pattern", tuple(notes))
