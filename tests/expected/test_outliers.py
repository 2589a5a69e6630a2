"""tokperf outliers: rows far below the band of their class, and builds that fell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tokperf.cli.main import main
from pytest_tokperf.expected.outliers import find_outliers
from pytest_tokperf.expected.llama_bench_import import import_llama_bench

FIXTURES = Path(__file__).parent / "llama_bench"


def _slower_build(tmp_path: Path, scale: float, build: int) -> Path:
    rows = json.loads((FIXTURES / "readme.json").read_text(encoding="utf-8"))
    for row in rows:
        row.update(build_commit=f"{build:08x}", build_number=build,
                   test_time=row["test_time"].replace("2025-04-24", "2025-06-01"),
                   samples_ts=[t * scale for t in row["samples_ts"]],
                   avg_ts=row["avg_ts"] * scale)
    path = tmp_path / f"b{build}.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_a_healthy_row_is_no_outlier(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _, rows = import_llama_bench(db, [FIXTURES / "readme.json"])
    tg = next(r for r in rows if r.record.test_name == "tg128")
    assert tg.band is not None and tg.efficiency is not None
    assert tg.efficiency >= tg.band.low  # the README's RTX 4080 row sits inside its band
    assert find_outliers(db) == []


def test_slow_build_is_below_band_and_a_regression(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _, before = import_llama_bench(db, [FIXTURES / "readme.json"])
    _, after = import_llama_bench(db, [_slower_build(tmp_path, 0.5, 5300)])
    tg = next(r for r in after if r.record.test_name == "tg128")
    assert tg.ceiling is not None and tg.band is not None and tg.efficiency is not None
    listed = find_outliers(db)
    assert len({o.result_id for o in listed}) == len(listed), "a result listed twice"
    found = {o.kind: o for o in listed}
    low = found["below-band"]
    assert low.build == "b5300 (000014b4)" and low.efficiency == pytest.approx(tg.efficiency)
    assert low.should_reach_tokens_per_s == pytest.approx(
        tg.ceiling.decode_tokens_per_s * tg.band.low)
    assert low.typical_tokens_per_s == pytest.approx(
        tg.ceiling.decode_tokens_per_s * tg.band.typical)
    assert low.reasons
    # the same tg128 result also fell from the earlier build: one entry, both reasons
    old = next(r for r in before if r.record.test_name == "tg128")
    assert old.efficiency is not None
    assert low.earlier_best_tokens_per_s == pytest.approx(
        tg.ceiling.decode_tokens_per_s * old.efficiency)
    assert any("-50% against" in r and "b5163" in r for r in low.reasons)


def test_a_small_drop_is_not_a_regression(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    import_llama_bench(db, [FIXTURES / "readme.json", _slower_build(tmp_path, 0.95, 5300)])
    assert not [o for o in find_outliers(db) if o.kind == "build-regression"]
    assert [o.kind for o in find_outliers(db, drop=0.03)] == ["build-regression"]


def test_cli_outliers_on_the_public_dataset_names_rows_and_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "p.db"
    public = Path(__file__).resolve().parents[2] / "db" / "public"
    assert main(["import-llama-bench", str(public), "--db", str(db), "--json"]) == 0
    capsys.readouterr()
    assert main(["outliers", "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data and all(o["reasons"] and o["source"].startswith("https://") for o in data)
    assert all(o["tokens_per_s"] < o["should_reach_tokens_per_s"] for o in data)
    pi = next(o for o in data if "RX 7900 XT]" in o["test_id"])
    assert any("Raspberry Pi 5" in reason for reason in pi["reasons"])
    assert main(["outliers", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"{len(data)} outlier(s) in ")


def test_cli_outliers_without_a_db_says_how_to_fill_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["outliers", "--db", str(tmp_path / "none.db")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "import-llama-bench" in err
    assert not (tmp_path / "none.db").exists()
