"""The bandwidth ceiling and the checks against it: pure arithmetic, no I/O.

``decode tokens/s <= memory bandwidth / bytes read per token`` (weights plus KV read so
far), per stream; prefill is bounded by ``peak FLOP/s / (2 x active parameters)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.hardware.units import format_bandwidth, format_gb
from pytest_tokperf.results import Bandwidth, BenchResult, Ceiling, Footprint

EfficiencyStatus = Literal["pass", "fail", "suspect"]
SUSPECT_ABOVE = 1.15
"""Measured above 115% of the ceiling: the ceiling is wrong, not the engine fast."""
HINTS_BELOW = 0.35
"""Measured below 35% of the ceiling: something other than tuning is off."""
MAX_MIN_FRACTION = 1.5

LOW_EFFICIENCY_HINTS = (
    "partial offload or CPU fallback: decode runs at the speed of the slowest resident part "
    "(PCIe ~10-25 GB/s, system RAM); 3-10 tok/s on GPU-class hardware is the signature, "
    "so check that every layer is on the device",
    "speculative decoding on or changed: measure the base with speculation off; a draft "
    "model with low acceptance costs memory and bandwidth",
    "KV depth: each token also reads the KV of every earlier token; the ceiling counts "
    "depth {depth}, check the request's real context is not deeper",
    "two models loaded at once, memory pressure or swap",
    "power-saving mode, thermal throttling or low clocks",
    "an engine build without this device's backend (CPU-only build, chip not yet supported)",
)


@dataclass(frozen=True, slots=True)
class EfficiencyCheck:
    """Measured decode against the ceiling: ``pass``, ``fail``, or ``suspect``. ``suspect``:
    more than ``SUSPECT_ABOVE`` over the ceiling, so the ceiling is wrong."""

    status: EfficiencyStatus
    efficiency: float
    measured_tokens_per_s: float
    ceiling: Ceiling
    min_fraction: float
    message: str
    hints: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True, slots=True)
class LimitCheck:
    """A measured figure against an absolute limit (TTFT, usable decode speed)."""

    name: Literal["ttft", "usable"]
    ok: bool
    value: float
    limit: float
    message: str


def _require_positive(what: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} {value!r} must be a number")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} {value!r} must be a positive, finite number")


def _require_measured(what: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"measured {what} {value!r} must be a number")
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"measured {what} {value!r} must be finite and >= 0")


def compute_ceiling(
    footprint: Footprint, bandwidth: Bandwidth, peak_flops: float | None = None
) -> Ceiling:
    """Decode ceiling ``bandwidth / total bytes per token``; prefill bound from ``peak_flops``."""
    _require_positive("memory bandwidth (bytes/s)", bandwidth.bytes_per_s)
    if footprint.total_bytes <= 0:
        raise ConfigError(
            f"footprint of {footprint.architecture!r} reads {footprint.total_bytes!r} bytes "
            "per token; a ceiling needs a positive byte count"
        )
    prefill: float | None = None
    if peak_flops is not None:
        _require_positive("peak FLOP/s", peak_flops)
        if footprint.active_parameters > 0:
            prefill = peak_flops / (2 * footprint.active_parameters)
    return Ceiling(
        bandwidth=bandwidth,
        footprint=footprint,
        decode_tokens_per_s=bandwidth.bytes_per_s / footprint.total_bytes,
        prefill_tokens_per_s=prefill,
    )


def describe_ceiling(ceiling: Ceiling, size: Callable[[float], str] = format_gb) -> str:
    """``1008 GB/s / 11.78 GB per token: weights 11.50 GB + KV 0.28 GB at depth 4096``;
    ``size`` writes the bytes (``format_size``: in the unit that shows them)."""
    fp = ceiling.footprint
    text = (
        f"{format_bandwidth(ceiling.bandwidth.bytes_per_s)} / {size(fp.total_bytes)} "
        f"per token: weights {size(fp.weights_bytes)} + KV {size(fp.kv_bytes)} "
        f"at depth {fp.depth_tokens}"
    )
    if ceiling.bandwidth.source in ("split", "measured") and ceiling.bandwidth.detail:
        text += f"; {ceiling.bandwidth.detail}"
    return text


def efficiency(measured_tokens_per_s: float, ceiling: Ceiling) -> float:
    """Measured decode as a fraction of the ceiling (0.48 = 48%)."""
    _require_measured("decode tokens/s", measured_tokens_per_s)
    return measured_tokens_per_s / ceiling.decode_tokens_per_s


def decode_efficiency(result: BenchResult, ceiling: Ceiling | None) -> float | None:
    """A result's median judged decode over the ceiling; None when either is unknown."""
    decode = result.judged_decode_tokens_per_s
    if ceiling is None or decode is None:
        return None
    return efficiency(decode.median, ceiling)


def check_efficiency(
    measured_tokens_per_s: float,
    ceiling: Ceiling,
    min_fraction: float,
    *,
    suspect_above: float = SUSPECT_ABOVE,
    hints_below: float = HINTS_BELOW,
) -> EfficiencyCheck:
    """Does measured decode reach ``min_fraction`` of the ceiling, and is the ceiling sane?"""
    _require_positive("minimum fraction of the ceiling", min_fraction)
    if min_fraction > MAX_MIN_FRACTION:
        raise ConfigError(
            f"minimum fraction of the ceiling {min_fraction!r} is above {MAX_MIN_FRACTION}; "
            "use a fraction such as 0.6 for 60%"
        )
    eff = efficiency(measured_tokens_per_s, ceiling)
    message = (
        f"decode {measured_tokens_per_s:.1f} tok/s is {eff:.0%} of the "
        f"{ceiling.decode_tokens_per_s:.1f} tok/s ceiling ({describe_ceiling(ceiling)}); "
        f"required >= {min_fraction:.0%}"
    )
    hints: tuple[str, ...] = ()
    status: EfficiencyStatus
    if eff > suspect_above:
        status = "suspect"
        bw = ceiling.bandwidth
        message += (
            f"; above {suspect_above:.0%} of the ceiling the ceiling itself looks wrong: "
            f"the bandwidth figure ({format_bandwidth(bw.bytes_per_s)}, {bw.source}) is too "
            "low, or the bytes per token are over-counted (MoE active experts, tied "
            "embeddings, KV depth); speculative decoding also lifts decode past it"
        )
    elif eff >= min_fraction:
        status = "pass"
    else:
        status = "fail"
        if eff < hints_below:
            depth = ceiling.footprint.depth_tokens
            hints = tuple(h.format(depth=depth) for h in LOW_EFFICIENCY_HINTS)
            message += f"\nbelow {hints_below:.0%} of the ceiling, look for:" + "".join(
                f"\n  - {hint}" for hint in hints
            )
    return EfficiencyCheck(
        status=status,
        efficiency=eff,
        measured_tokens_per_s=measured_tokens_per_s,
        ceiling=ceiling,
        min_fraction=min_fraction,
        message=message,
        hints=hints,
    )


def check_ttft(ttft_s: float, max_s: float, prompt_tokens: int | None = None) -> LimitCheck:
    """Time to first token against a limit in seconds."""
    _require_positive("TTFT limit (s)", max_s)
    _require_measured("TTFT (s)", ttft_s)
    ok = ttft_s <= max_s
    what = f"TTFT {ttft_s:.2f} s"
    if prompt_tokens:
        rate = f" ({prompt_tokens / ttft_s:.0f} prompt tok/s)" if ttft_s > 0 else ""
        what += f" for a {prompt_tokens}-token prompt{rate}"
    if ok:
        message = f"{what} is within the {max_s:.2f} s limit"
    else:
        message = (
            f"{what} exceeds the {max_s:.2f} s limit; prefill is compute-bound "
            "(~2 x parameters FLOPs per prompt token): a cached prompt prefix or a shorter "
            "prompt cuts it, more bandwidth does not"
        )
    return LimitCheck(name="ttft", ok=ok, value=ttft_s, limit=max_s, message=message)


def check_usable(decode_tokens_per_s: float, min_tokens_per_s: float) -> LimitCheck:
    """Decode speed against the minimum a person can use."""
    _require_positive("usable decode minimum (tok/s)", min_tokens_per_s)
    _require_measured("decode tokens/s", decode_tokens_per_s)
    ok = decode_tokens_per_s >= min_tokens_per_s
    what = f"decode {decode_tokens_per_s:.1f} tok/s"
    if ok:
        message = f"{what} meets the {min_tokens_per_s:.1f} tok/s usable minimum"
    else:
        message = (
            f"{what} is below the {min_tokens_per_s:.1f} tok/s usable minimum (people read "
            "~5-10 tok/s; below ~2-3 tok/s streaming feels broken)"
        )
    return LimitCheck(
        name="usable", ok=ok, value=decode_tokens_per_s, limit=min_tokens_per_s, message=message
    )
