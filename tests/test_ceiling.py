"""The ceiling arithmetic and the checks' messages."""

from __future__ import annotations

import math

import pytest

from pytest_tokperf.ceiling import (
    check_efficiency,
    check_ttft,
    check_usable,
    compute_ceiling,
    describe_ceiling,
    efficiency,
)
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.results import Bandwidth, Ceiling, Footprint

RTX_4090 = Bandwidth(1008e9, "nvml", "max memory clock 10501 MHz x 2 x 384-bit / 8")


def footprint(
    weights_bytes: int = 11_500_000_000,
    kv_bytes_per_position: int = 68_359,
    depth_tokens: int = 4096,
    active_parameters: int = 14_000_000_000,
) -> Footprint:
    return Footprint(
        architecture="qwen2",
        weights_bytes=weights_bytes,
        kv_bytes_per_position=kv_bytes_per_position,
        depth_tokens=depth_tokens,
        kv_type="f16",
        resident_bytes=weights_bytes + 600_000_000,
        active_parameters=active_parameters,
        total_parameters=active_parameters,
    )


@pytest.fixture
def ceiling() -> Ceiling:
    return compute_ceiling(footprint(), RTX_4090)


def test_decode_ceiling_is_bandwidth_over_bytes(ceiling: Ceiling) -> None:
    total = 11_500_000_000 + 68_359 * 4096
    assert ceiling.decode_tokens_per_s == pytest.approx(1008e9 / total)
    assert ceiling.decode_tokens_per_s == pytest.approx(85.57, abs=0.01)
    assert ceiling.prefill_tokens_per_s is None
    assert ceiling.bandwidth is RTX_4090


def test_prefill_bound_from_peak_flops() -> None:
    result = compute_ceiling(footprint(active_parameters=8_000_000_000), RTX_4090, 330.3e12)
    assert result.prefill_tokens_per_s == pytest.approx(330.3e12 / 16e9)


def test_describe_ceiling(ceiling: Ceiling) -> None:
    assert describe_ceiling(ceiling) == (
        "1008 GB/s / 11.78 GB per token: weights 11.50 GB + KV 0.28 GB at depth 4096"
    )


def test_efficiency(ceiling: Ceiling) -> None:
    assert efficiency(41.2, ceiling) == pytest.approx(41.2 / ceiling.decode_tokens_per_s)


def test_check_efficiency_fail_message_exact(ceiling: Ceiling) -> None:
    check = check_efficiency(41.2, ceiling, 0.6)
    assert check.status == "fail"
    assert not check.ok
    assert check.hints == ()
    assert check.message == (
        "decode 41.2 tok/s is 48% of the 85.6 tok/s ceiling "
        "(1008 GB/s / 11.78 GB per token: weights 11.50 GB + KV 0.28 GB at depth 4096); "
        "required >= 60%"
    )


def test_check_efficiency_pass(ceiling: Ceiling) -> None:
    check = check_efficiency(60.0, ceiling, 0.6)
    assert check.status == "pass" and check.ok
    assert check.efficiency == pytest.approx(0.701, abs=0.001)
    assert check.message.startswith("decode 60.0 tok/s is 70% of the 85.6 tok/s ceiling")


def test_check_efficiency_low_gives_hints(ceiling: Ceiling) -> None:
    check = check_efficiency(8.0, ceiling, 0.6)
    assert check.status == "fail"
    first, _, rest = check.message.partition("\n")
    assert first.endswith("required >= 60%")
    assert rest.startswith("below 35% of the ceiling, look for:\n  - partial offload")
    joined = " ".join(check.hints)
    for phrase in (
        "partial offload or CPU fallback",
        "speculative decoding",
        "depth 4096",
        "two models loaded",
        "power-saving",
    ):
        assert phrase in joined
    assert len(check.hints) == rest.count("\n  - ")


def test_check_efficiency_above_ceiling_is_suspect(ceiling: Ceiling) -> None:
    check = check_efficiency(100.0, ceiling, 0.6)
    assert check.status == "suspect"
    assert not check.ok
    assert "is 117% of the 85.6 tok/s ceiling" in check.message
    assert "the ceiling itself looks wrong" in check.message
    assert "bandwidth figure (1008 GB/s, nvml) is too low" in check.message
    assert "over-counted" in check.message


def test_check_efficiency_just_above_ceiling_still_passes(ceiling: Ceiling) -> None:
    assert check_efficiency(ceiling.decode_tokens_per_s * 1.10, ceiling, 0.6).status == "pass"


@pytest.mark.parametrize("bad", [0, -0.5, 1.6, math.nan, math.inf])
def test_check_efficiency_validates_min_fraction(ceiling: Ceiling, bad: float) -> None:
    with pytest.raises(ConfigError, match="minimum fraction of the ceiling"):
        check_efficiency(40.0, ceiling, bad)


def test_check_efficiency_validates_measured(ceiling: Ceiling) -> None:
    with pytest.raises(ConfigError, match=r"measured decode tokens/s -1.0 must be finite and >= 0"):
        check_efficiency(-1.0, ceiling, 0.6)


def test_compute_ceiling_validates_inputs() -> None:
    with pytest.raises(ConfigError, match=r"memory bandwidth \(bytes/s\) 0.0 must be a positive"):
        compute_ceiling(footprint(), Bandwidth(0.0, "explicit"))
    with pytest.raises(ConfigError, match="reads 0 bytes per token"):
        compute_ceiling(footprint(weights_bytes=0, depth_tokens=0), RTX_4090)
    with pytest.raises(ConfigError, match="peak FLOP/s -1.0 must be a positive, finite number"):
        compute_ceiling(footprint(), RTX_4090, -1.0)


def test_check_ttft() -> None:
    ok = check_ttft(1.2, 2.0)
    assert ok.ok and ok.name == "ttft"
    assert ok.message == "TTFT 1.20 s is within the 2.00 s limit"
    slow = check_ttft(3.5, 2.0, prompt_tokens=12000)
    assert not slow.ok
    assert slow.message.startswith(
        "TTFT 3.50 s for a 12000-token prompt (3429 prompt tok/s) exceeds the 2.00 s limit; "
        "prefill is compute-bound"
    )
    with pytest.raises(ConfigError, match=r"TTFT limit \(s\) 0 must be a positive, finite number"):
        check_ttft(1.0, 0)


def test_check_usable() -> None:
    ok = check_usable(12.34, 5)
    assert ok.ok and ok.name == "usable"
    assert ok.message == "decode 12.3 tok/s meets the 5.0 tok/s usable minimum"
    slow = check_usable(3.1, 5)
    assert not slow.ok
    assert slow.message == (
        "decode 3.1 tok/s is below the 5.0 tok/s usable minimum (people read ~5-10 tok/s; "
        "below ~2-3 tok/s streaming feels broken)"
    )
    with pytest.raises(ConfigError, match=r"usable decode minimum \(tok/s\) -2 must be a positive"):
        check_usable(3.0, -2)
