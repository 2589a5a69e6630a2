"""`tokperf compare -o md`: compare-llama-bench's table, with the verdicts `compare` prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history

from pytest_tokperf.cli.main import main
from pytest_tokperf.stats.metric import interval_text, pct

STEP = [(f"b{i:02d}", 100.0) for i in range(10)] + [(f"b{i:02d}", 88.0) for i in range(10, 20)]
LLAMA_BENCH = Path(__file__).parents[1] / "expected" / "llama_bench" / "readme.json"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    fill_history(tmp_path / "r.db", STEP)[0].close()
    fill_history(tmp_path / "r.db", [(b, 100.0) for b, _ in STEP], test_id="t::steady",
                 seed=4)[0].close()
    return tmp_path / "r.db"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(out: str) -> list[list[str]]:
    return [_cells(line) for line in out.splitlines() if line.startswith("|")]


def test_md_table_has_both_sides_the_ratio_and_compares_verdict(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    versions = ["--baseline", "b03", "--current", "b15"]
    assert main(["compare", "--db", str(db), *versions, "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    assert main(["compare", "--db", str(db), *versions, "-o", "md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**A**: b03, **B**: b15. t/s mean: llama-bench's avg_ts")
    header, rule, *rows = _table(out)
    assert header == ["Test id", "Test", "t/s A mean", "t/s B mean", "B/A", "t/s A median",
                      "t/s B median", "TTFT ms A", "TTFT ms B", "verdict", "change [interval]"]
    assert rule == ["---", "---", *["---:"] * 7, "---", "---"]
    by_test = {(r[0], r[1]): r for r in rows}
    assert set(by_test) == {("t::decode", "tg128"), ("t::decode", "pp512"),
                            ("t::steady", "tg128"), ("t::steady", "pp512")}
    decode = by_test["t::decode", "tg128"]
    assert 98 < float(decode[2]) < 102 and 86 < float(decode[3]) < 90
    assert decode[4] == f"{float(decode[3]) / float(decode[2]):.2f}" == "0.88"
    assert 98 < float(decode[5]) < 102 and 86 < float(decode[6]) < 90
    assert 45 < float(decode[7]) < 55 and 45 < float(decode[8]) < 55
    prefill = by_test["t::decode", "pp512"]
    assert prefill[2:7] == ["5002.00", "5002.00", "1.00", "5002.00", "5002.00"]
    assert prefill[7:] == [""] * 4
    judged = {(v["verdict"], f"{pct(v['relative_change'])} "
                             f"{interval_text(v['ci_low'], v['ci_high'])}")
              for v in verdicts.values()}
    shown = {(r[9].strip("*"), r[10].split(" at ")[0]) for r in rows if r[9]}
    assert shown == judged and len(shown) == 2
    assert by_test["t::decode", "tg128"][9] == "**regression**"
    assert main(["compare", "--db", str(db), *versions, "-o", "md", "--fail"]) == 1
    capsys.readouterr()
    assert main(["compare", "--db", str(db), *versions, "-o", "md", "--json"]) == 2
    assert "--json and -o md" in capsys.readouterr().err


def test_md_table_of_two_dbs_names_them_and_their_builds(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_history(tmp_path / "new.db", [("b99", 80.0)])[0].close()
    assert main(["compare", "--db", str(db), str(tmp_path / "new.db"), "-o", "md"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("**A**: r.db b10..b19, **B**: new.db b99.")
    rows = _table(out)[2:]
    assert [r[:2] for r in rows] == [["t::decode", "tg128"], ["t::decode", "pp512"]]
    assert rows[0][9] == "**regression**" and rows[0][10].endswith("]")


def test_md_table_of_llama_bench_rows_judges_pp_on_prefill_and_leaves_out_ttft(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slower = json.loads(LLAMA_BENCH.read_text())
    for row in slower:
        row["build_commit"], row["build_number"] = "deadbee", row["build_number"] + 10
        row["samples_ts"] = [t * 0.9 for t in row["samples_ts"]]
        row["samples_ns"] = [round(t / 0.9) for t in row["samples_ns"]]
        row["avg_ts"], row["avg_ns"] = row["avg_ts"] * 0.9, round(row["avg_ns"] / 0.9)
    (tmp_path / "slower.json").write_text(json.dumps(slower))
    for source, target in ((LLAMA_BENCH, "a.db"), (tmp_path / "slower.json", "b.db")):
        assert main(["import-llama-bench", str(source), "--db", str(tmp_path / target)]) == 0
    capsys.readouterr()
    assert main(["compare", "--db", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "-o", "md"]) == 0
    header, _, *rows = _table(capsys.readouterr().out)
    assert "TTFT ms A" not in header
    assert [r[1] for r in rows] == ["pp512", "tg128"]
    for row in rows:
        assert row[4] == "0.90" and row[7] == "**regression**", row


def test_md_shows_llama_benchs_mean_beside_the_median(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # readme.json's pp512 row: avg_ts 7100.00 (the mean of its samples_ts), median 7136.37
    faster = json.loads(LLAMA_BENCH.read_text())
    for row in faster:
        row["build_commit"], row["build_number"] = "deadbee", row["build_number"] + 10
    (tmp_path / "b.json").write_text(json.dumps(faster))
    for source, target in ((LLAMA_BENCH, "a.db"), (tmp_path / "b.json", "b.db")):
        assert main(["import-llama-bench", str(source), "--db", str(tmp_path / target)]) == 0
    capsys.readouterr()
    assert main(["compare", "--db", str(tmp_path / "a.db"), str(tmp_path / "b.db"), "-o", "md"]) == 0
    header, _, *rows = _table(capsys.readouterr().out)
    pp = next(dict(zip(header, r)) for r in rows if r[1] == "pp512")
    assert (pp["t/s A mean"], pp["t/s A median"], pp["B/A"]) == ("7100.00", "7136.37", "1.00")


def test_compare_without_versions_picks_the_two_builds_measured_last(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--db", str(db), "-o", "md"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("**A**: b18, **B**: b19.")
    assert "baseline b18, current b19 (the two builds measured last" in err
    assert main(["compare", "--db", str(db), "--current", "b03", "--json"]) == 0
    assert "baseline b19, current b03 (the build measured last besides --current" in \
        capsys.readouterr().err
    # measured newest release first: the older release is still the baseline
    fill_history(tmp_path / "two.db", [("b11434", 100.0), ("b11292", 100.0)])[0].close()
    assert main(["compare", "--db", str(tmp_path / "two.db")]) == 0
    assert "baseline b11292, current b11434" in capsys.readouterr().err
    fill_history(tmp_path / "one.db", [("b7", 100.0)])[0].close()
    assert main(["compare", "--db", str(tmp_path / "one.db")]) == 2
    assert "compare needs two builds, and the DB holds b7" in capsys.readouterr().err
