"""The fitted efficiency model predict ships: its bands, its file, and that the file is the
fit of db/public (the fit itself is lab/drivers/band_fitting.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected.band_fit import (
    Calibration,
    Fitted,
    Model,
    describe_fitted,
    fitted_band,
    load_fitted,
)
from pytest_tokperf.expected.llama_bench_import import import_llama_bench

PUBLIC = Path(__file__).resolve().parents[2] / "db" / "public"
MODEL = Model(
    cost_per_family={"q4": 1.5, "q8": 1.2},
    overhead_per_class={"consumer-gpu": 0.001, "apple": 0.003},
    depth_cost=0.01,
    calibration={"consumer-gpu": Calibration(-0.5, 0.5, 25, False),
                 "apple": Calibration(-0.7, 0.3, 30, True)},
    rows_per_class={"consumer-gpu": 30, "apple": 7},
    sources_per_class={"consumer-gpu": 9, "apple": 3},
)


def test_the_overhead_makes_a_small_model_slow_and_depth_slows_it_more() -> None:
    # 0.5 GB reads in 0.5 ms at 1 TB/s, but costs 1.5 x 0.5 ms + the 1 ms overhead
    assert MODEL.typical_tokens_per_s("consumer-gpu", "q4", 0.5e-3) == pytest.approx(
        1 / (1.5 * 0.5e-3 + 0.001))
    shallow = MODEL.typical_tokens_per_s("apple", "q8", 4e-3, 0)
    deep = MODEL.typical_tokens_per_s("apple", "q8", 4e-3, 32768)
    assert shallow is not None and deep is not None
    assert deep / shallow == pytest.approx((1.2 * 4e-3 + 0.003) /
                                           (4e-3 * (1.2 + 0.01 * 32.768) + 0.003))


def test_unknown_class_or_family_has_no_band() -> None:
    assert MODEL.band("amd-gpu", "q4", 1e-3) is None
    assert MODEL.band("apple", "f16", 1e-3) is None


@pytest.mark.parametrize("stream_s", [1e-4, 1e-3, 4e-3, 2e-2])
def test_band_never_exceeds_the_ceiling(stream_s: float) -> None:
    band = MODEL.band("consumer-gpu", "q8", stream_s)
    assert band is not None and band[0] <= band[1] <= band[2] <= 1 / stream_s


def test_predict_uses_the_fitted_band_only_for_a_class_with_enough_rows() -> None:
    fitted = Fitted(MODEL, {"consumer-gpu": (24, 25)})
    band = fitted_band(fitted, "consumer-gpu", "q4", 2e-3)
    assert band is not None and band[0] < band[1] < band[2] <= 1.0
    assert fitted_band(fitted, "apple", "q4", 2e-3) is None  # 7 rows: the fixed band
    assert fitted_band(fitted, "consumer-gpu", None, 2e-3) is None
    assert describe_fitted(fitted, "consumer-gpu").startswith(
        "fitted model of db/public (30 rows from 9 sources; each source held out: 24/25 (96%)")


def test_a_model_file_is_read_or_refused(tmp_path: Path) -> None:
    assert load_fitted(tmp_path / "none.json") is None
    path = tmp_path / "band_fit.json"
    path.write_text('{"cost_per_family": {}}', encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot be read .*; reinstall pytest-tokperf"):
        load_fitted(path)


@pytest.fixture(scope="module")
def public_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("public") / "public.db"
    import_llama_bench(db, [PUBLIC])
    return db


def test_the_shipped_model_is_the_fit_of_db_public(public_db: Path, tmp_path: Path) -> None:
    """band_fit.json must be regenerated (lab/drivers/fit_bands.py --write) when db/public
    changes."""
    from lab.drivers.band_fitting import (
        band_observations,
        fit,
        leave_one_source_out,
        model_to_dict,
    )

    obs = band_observations(public_db)
    shipped = load_fitted()
    assert shipped is not None
    model, held = fit(obs), leave_one_source_out(obs)
    assert shipped.model.cost_per_family == pytest.approx(model.cost_per_family, rel=1e-5)
    assert shipped.model.overhead_per_class == pytest.approx(model.overhead_per_class,
                                                             rel=1e-5)
    assert shipped.model.depth_cost == pytest.approx(model.depth_cost, rel=1e-5)
    assert shipped.model.rows_per_class == model.rows_per_class
    for cls, cal in model.calibration.items():
        assert shipped.model.calibration[cls].low == pytest.approx(cal.low, rel=1e-5)
        assert shipped.model.calibration[cls].high == pytest.approx(cal.high, rel=1e-5)
    assert shipped.loso_inside == {c: (h.inside, h.checked) for c, h in held.items()}
    # what fit_bands.py --write stores is what predict reads back
    path = tmp_path / "band_fit.json"
    path.write_text(json.dumps(model_to_dict(model, held)), encoding="utf-8")
    written = load_fitted(path)
    assert written is not None and written.loso_inside == shipped.loso_inside
    assert written.model.cost_per_family == pytest.approx(model.cost_per_family, rel=1e-5)
    assert written.model.calibration.keys() == shipped.model.calibration.keys()
