"""The fitted efficiency model: 1/tok_s = a_q x bytes/bandwidth + o, checked per source."""

from __future__ import annotations

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.hardware.band_fit import Observation, fit, fit_class, leave_one_source_out

BW = 1e12


def _row(source: str, family: str, gb: float, cost: float, overhead: float,
         noise: float = 1.0) -> Observation:
    stream = gb * 1e9 / BW
    return Observation(source, "consumer-gpu", family, gb * 1e9, BW,
                       noise / (cost * stream + overhead))


def test_fit_recovers_overhead_and_cost_per_family() -> None:
    rows = [_row(f"s{i % 3}", family, gb, cost, 0.002)
            for i, (family, cost) in enumerate([("q4", 1.5), ("q8", 1.2)] * 4)
            for gb in (0.5, 2.0, 8.0)]
    model = fit_class(rows)
    assert model.overhead_s == pytest.approx(0.002, rel=1e-6)
    assert model.cost_per_family == pytest.approx({"q4": 1.5, "q8": 1.2}, rel=1e-6)
    assert model.ratio_low == pytest.approx(1.0) and model.ratio_high == pytest.approx(1.0)
    # the overhead is what makes a small model slow: 0.5 GB reads in 0.5 ms, costs 2.75 ms
    assert model.tokens_per_s("q4", 0.5e9 / BW) == pytest.approx(1 / (1.5 * 0.5e-3 + 0.002))


def test_band_never_exceeds_the_ceiling() -> None:
    rows = [_row("a", "f16", gb, 1.0, 0.0, noise) for gb, noise in
            ((1, 1.0), (2, 0.9), (4, 1.0), (8, 0.95))]
    model = fit(rows)["consumer-gpu"]
    for o in rows:
        band = model.band("f16", o.stream_s)
        assert band is not None and band[2] <= 1 / o.stream_s


def test_leave_one_source_out_counts_held_out_rows_inside() -> None:
    good = [_row(f"s{i}", "q4", gb, 1.4, 0.001, noise) for i in range(3)
            for gb, noise in ((2, 1.0), (4, 0.97), (8, 1.02))]
    bad = [_row("slow", "q4", gb, 1.4, 0.001, 0.4) for gb in (2, 4)]
    held = leave_one_source_out(good + bad)["consumer-gpu"]
    assert held.rows == 11 and held.checked == 11 and held.above_ceiling == 0
    # a band fitted without the slow source cannot contain its rows at 40% of the model
    assert held.inside <= 9 and held.fraction_inside is not None


def test_fit_class_needs_rows() -> None:
    with pytest.raises(ConfigError, match="at least one observation"):
        fit_class([])
