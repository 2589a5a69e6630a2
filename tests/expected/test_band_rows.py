"""db/public as the efficiency model's observations, and the model predict ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tokperf.expected.band_fit import fit, leave_one_source_out, load_fitted
from pytest_tokperf.expected.band_rows import band_observations
from pytest_tokperf.expected.llama_bench_import import import_llama_bench

PUBLIC = Path(__file__).resolve().parents[2] / "db" / "public"


@pytest.fixture(scope="module")
def public_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("public") / "public.db"
    import_llama_bench(db, [PUBLIC])
    return db


def test_observations_leave_out_hosts_nkvo_and_moe(public_db: Path) -> None:
    obs = band_observations(public_db)
    sources = {o.source for o in obs}
    # a GPU behind a Raspberry Pi or a RISC-V board: the host is the bottleneck
    for issue in (20, 23, 40):
        assert f"https://github.com/geerlingguy/ai-benchmarks/issues/{issue}" not in sources
    # #4812 has two RTX 3090 Ti Q4_0 rows; the -nkvo 1 one (KV in system RAM) is left out
    assert sum(o.source.endswith("/pull/4812") for o in obs) == 1
    assert all(o.family in {"f16", "q8", "q5-q6", "q4"} for o in obs)
    assert all(0 < o.efficiency <= 1 for o in obs)
    assert any(o.depth_tokens == 32768 for o in obs)


def test_the_shipped_model_is_the_fit_of_db_public(public_db: Path) -> None:
    """band_fit.json must be regenerated (lab/drivers/fit_bands.py --write) when db/public
    changes."""
    obs = band_observations(public_db)
    shipped = load_fitted()
    assert shipped is not None
    model = fit(obs)
    assert shipped.model.cost_per_family == pytest.approx(model.cost_per_family, rel=1e-5)
    assert shipped.model.overhead_per_class == pytest.approx(model.overhead_per_class,
                                                             rel=1e-5)
    assert shipped.model.depth_cost == pytest.approx(model.depth_cost, rel=1e-5)
    assert shipped.model.rows_per_class == model.rows_per_class
    for cls, cal in model.calibration.items():
        assert shipped.model.calibration[cls].low == pytest.approx(cal.low, rel=1e-5)
        assert shipped.model.calibration[cls].high == pytest.approx(cal.high, rel=1e-5)
    held = leave_one_source_out(obs)
    assert shipped.loso_inside == {c: (h.inside, h.checked) for c, h in held.items()}
