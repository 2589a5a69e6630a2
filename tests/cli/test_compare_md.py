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
    assert out.startswith("**A**: b03, **B**: b15.")
    header, rule, *rows = _table(out)
    assert header == ["Test id", "Test", "t/s A", "t/s B", "B/A", "TTFT ms A", "TTFT ms B",
                      "verdict", "change [interval]"]
    assert rule == ["---", "---", "---:", "---:", "---:", "---:", "---:", "---", "---"]
    by_test = {(r[0], r[1]): r for r in rows}
    assert set(by_test) == {("t::decode", "tg128"), ("t::decode", "pp512"),
                            ("t::steady", "tg128"), ("t::steady", "pp512")}
    decode = by_test["t::decode", "tg128"]
    assert 98 < float(decode[2]) < 102 and 86 < float(decode[3]) < 90
    assert decode[4] == f"{float(decode[3]) / float(decode[2]):.2f}" == "0.88"
    assert 45 < float(decode[5]) < 55 and 45 < float(decode[6]) < 55
    prefill = by_test["t::decode", "pp512"]
    assert prefill[2:5] == ["5002.00", "5002.00", "1.00"] and prefill[5:] == [""] * 4
    judged = {(v["verdict"], f"{pct(v['relative_change'])} "
                             f"{interval_text(v['ci_low'], v['ci_high'])}")
              for v in verdicts.values()}
    shown = {(r[7].strip("*"), r[8].split(" at ")[0]) for r in rows if r[7]}
    assert shown == judged and len(shown) == 2
    assert by_test["t::decode", "tg128"][7] == "**regression**"
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
    assert rows[0][7] == "**regression**" and rows[0][8].endswith("]")


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
        assert row[4] == "0.90" and row[5] == "**regression**", row
