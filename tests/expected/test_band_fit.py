"""The fitted efficiency model: pooled costs, per-class overheads, calibrated bands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected import band_fit
from pytest_tokperf.expected.band_fit import (
    Observation,
    calibrate,
    conformal_interval,
    fit,
    held_out_residuals,
    leave_one_source_out,
    load_fitted,
    model_to_dict,
)

BW = 1e12
COSTS = {"q4": 1.5, "q8": 1.2}
OVERHEADS = {"consumer-gpu": 0.001, "apple": 0.003}
DEPTH_COST = 0.01


def _row(source: str, family: str, gb: float, cls: str = "consumer-gpu", depth: int = 0,
         noise: float = 1.0) -> Observation:
    stream = gb * 1e9 / BW
    t = stream * (COSTS[family] + DEPTH_COST * depth / 1000) + OVERHEADS[cls]
    return Observation(source, cls, family, gb * 1e9, BW, noise / t, depth)


def _exact_rows() -> list[Observation]:
    return [_row(f"s{i}", family, gb, cls, depth)
            for i, (family, cls) in enumerate(
                [("q4", "consumer-gpu"), ("q8", "consumer-gpu"), ("q4", "apple"),
                 ("q8", "apple")] * 2)
            for gb, depth in ((0.5, 0), (2.0, 4096), (8.0, 0), (4.0, 32768))]


def test_fit_recovers_costs_overheads_and_depth_cost() -> None:
    model = fit(_exact_rows())
    assert model.cost_per_family == pytest.approx(COSTS, rel=1e-6)
    assert model.overhead_per_class == pytest.approx(OVERHEADS, rel=1e-6, abs=1e-9)
    assert model.depth_cost == pytest.approx(DEPTH_COST, rel=1e-6)
    assert model.rows_per_class == {"apple": 16, "consumer-gpu": 16}
    assert model.sources_per_class == {"apple": 4, "consumer-gpu": 4}
    # the overhead is what makes a small model slow: 0.5 GB reads in 0.5 ms, costs 1.75 ms
    assert model.typical_tokens_per_s("consumer-gpu", "q4", 0.5e-3) == pytest.approx(
        1 / (1.5 * 0.5e-3 + 0.001))
    # exact rows: every held-out residual is zero, so the band is a point
    assert model.calibration["apple"].low == pytest.approx(0, abs=1e-6)
    assert model.calibration["apple"].high == pytest.approx(0, abs=1e-6)


def test_depth_slows_the_typical_value() -> None:
    model = fit(_exact_rows())
    shallow = model.typical_tokens_per_s("apple", "q8", 4e-3, 0)
    deep = model.typical_tokens_per_s("apple", "q8", 4e-3, 32768)
    assert shallow is not None and deep is not None
    assert deep / shallow == pytest.approx((1.2 * 4e-3 + 0.003) /
                                           (4e-3 * (1.2 + 0.01 * 32.768) + 0.003))


def test_unknown_class_or_family_has_no_band() -> None:
    model = fit(_exact_rows())
    assert model.band("amd-gpu", "q4", 1e-3) is None
    assert model.band("apple", "f16", 1e-3) is None


def test_band_never_exceeds_the_ceiling() -> None:
    rows = [_row(f"s{i}", "q8", gb, noise=noise) for i, (gb, noise) in
            enumerate(((1, 1.0), (2, 0.8), (4, 1.3), (8, 0.95), (3, 1.1)))]
    model = fit(rows)
    for o in rows:
        band = model.band(o.device_class, o.family, o.stream_s)
        assert band is not None and band[2] <= 1 / o.stream_s and band[0] <= band[1]


def test_conformal_interval_takes_the_kth_extremes() -> None:
    nineteen = [float(i) for i in range(19)]
    assert conformal_interval(nineteen) == (0.0, 18.0)  # k = floor(20 x 0.05) = 1
    thirty_nine = [float(i) for i in range(39)]
    assert conformal_interval(thirty_nine) == (1.0, 37.0)  # k = 2
    assert conformal_interval([0.3]) == (0.3, 0.3)
    with pytest.raises(ConfigError, match="at least one held-out residual"):
        conformal_interval([])


def test_a_class_with_few_residuals_takes_the_pooled_band() -> None:
    many = [(_row(f"c{i}", "q4", 2.0), 0.01 * i) for i in range(band_fit.CLASS_RESIDUALS)]
    few = [(_row("a", "q4", 2.0, "apple"), -0.9)]
    cal = calibrate(many + few, ["consumer-gpu", "apple"])
    assert not cal["consumer-gpu"].pooled and cal["consumer-gpu"].low == 0.0
    assert cal["apple"].pooled and cal["apple"].low == -0.9
    assert cal["apple"].residuals == band_fit.CLASS_RESIDUALS + 1


def test_residuals_are_held_out_by_source() -> None:
    rows = [_row(f"s{i}", "q4", gb) for i in range(3) for gb in (1.0, 4.0)]
    rows.append(_row("slow", "q4", 2.0, noise=0.5))
    residuals = dict((o.source, r) for o, r in held_out_residuals(rows))
    # the slow source is predicted by a model that never saw it: half its speed
    assert residuals["slow"] == pytest.approx(math.log(0.5), abs=1e-6)


def test_leave_one_source_out_judges_each_source_by_the_others() -> None:
    good = [_row(f"s{i}", "q4", gb, noise=noise) for i in range(4)
            for gb, noise in ((2, 1.0), (4, 0.97), (8, 1.02))]
    bad = [_row("slow", "q4", gb, noise=0.4) for gb in (2, 4)]
    held = leave_one_source_out(good + bad)["consumer-gpu"]
    assert held.rows == 14 and held.sources == 5 and held.checked == 14
    assert held.above_ceiling == 0
    # a band calibrated without the slow source cannot contain its rows at 40%, while the
    # good sources' bands are widened by the slow one's residuals and contain them
    assert held.inside == 12
    assert held.median_ratio is not None and held.median_ratio > 1
    eff = held.median_efficiency_band
    assert eff is not None and eff[0] < eff[1] <= 1


def test_stored_model_round_trips(tmp_path: Path) -> None:
    rows = _exact_rows()
    model = fit(rows)
    held = leave_one_source_out(rows)
    path = tmp_path / "band_fit.json"
    path.write_text(json.dumps(model_to_dict(model, held)), encoding="utf-8")
    loaded = load_fitted(path)
    assert loaded is not None
    assert loaded.model.cost_per_family == pytest.approx(model.cost_per_family, rel=1e-5)
    assert loaded.loso_inside["apple"] == (held["apple"].inside, held["apple"].checked)
    assert load_fitted(tmp_path / "none.json") is None
    path.write_text('{"cost_per_family": {}}', encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot be read .*; reinstall pytest-tokperf"):
        load_fitted(path)


def test_fit_needs_rows() -> None:
    with pytest.raises(ConfigError, match="at least one observation"):
        fit([])
