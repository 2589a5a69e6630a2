"""One expected band for predict, the llama-bench import and outliers."""

from __future__ import annotations

from pathlib import Path

from pytest_tokperf.expected.bands import band_for
from pytest_tokperf.expected.band_choice import FITTED_SOURCE, expected_band

RTX_4090_STREAM_S = 4.84e9 / 1008e9  # an 8B Q4_K_M on 1008 GB/s


def test_a_class_with_public_rows_gets_the_fitted_band() -> None:
    got = expected_band("consumer-gpu", "q4", RTX_4090_STREAM_S)
    assert got.origin == "fitted" and got.band.sources == (FITTED_SOURCE,)
    assert got.detail.startswith("fitted model of db/public (")
    assert 0 < got.band.low < got.band.typical <= got.band.high <= 1.0
    deeper = expected_band("consumer-gpu", "q4", RTX_4090_STREAM_S, depth_tokens=65536)
    assert deeper.band.typical < got.band.typical


def test_the_fixed_band_elsewhere_says_why() -> None:
    apple = expected_band("apple", "q4", RTX_4090_STREAM_S)
    assert apple.origin == "fixed" and apple.band == band_for("q4", "apple")
    assert apple.detail.endswith("Apple Silicon (Metal) has 7)")
    no_ceiling = expected_band("consumer-gpu", "q4", None)
    assert no_ceiling.band == band_for("q4", "consumer-gpu")
    assert no_ceiling.detail.endswith("(no ceiling to scale the fitted model by)")
    asked = expected_band("consumer-gpu", "q4", RTX_4090_STREAM_S, band_source="fixed")
    assert asked.origin == "fixed" and asked.band == band_for("q4", "consumer-gpu")


def test_import_and_outliers_judge_by_the_same_band(tmp_path: Path) -> None:
    from pytest_tokperf.expected.outliers import find_outliers
    from pytest_tokperf.expected.llama_bench_import import import_llama_bench

    public = Path(__file__).resolve().parents[2] / "db" / "public"
    db = tmp_path / "p.db"
    _, rows = import_llama_bench(db, [public / "geerlingguy-ai-benchmarks-43.md",
                                      public / "geerlingguy-ai-benchmarks-48.md"])
    decode = {r.hardware.name: r for r in rows
              if r.efficiency is not None and r.hardware is not None}
    rtx, m1 = decode["NVIDIA GeForce RTX 4090"], decode["Apple M1 Ultra"]
    assert rtx.ceiling is not None and rtx.band is not None
    fitted = expected_band("consumer-gpu", "q4", 1 / rtx.ceiling.decode_tokens_per_s)
    assert rtx.band == fitted.band and fitted.origin == "fitted"
    assert m1.band == band_for("q4", "apple")
    # 762 tok/s from a 0.67 GB model is inside the fitted band (its overhead is modelled);
    # the M1 Ultra's 20% is under the fixed Apple band
    assert rtx.verdict == "pass" and m1.verdict == "fail"
    flagged = {o.hardware for o in find_outliers(db)}
    assert flagged == {m1.hardware.name}
