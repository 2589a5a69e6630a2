"""What every `tokperf` verb does at its edges: `-o -`, output folders, files it must not
touch, what `accept` asks for, messages in the verb's own terms, figures that show."""

from __future__ import annotations

import csv
import dataclasses
import getpass
import io
import json
import re
from pathlib import Path

import pytest
from tests.support.storage_factory import fill_history, make_ceiling, make_result

from pytest_tokperf.cli.main import build_parser, main
from pytest_tokperf.report.table import Row, summary_table
from pytest_tokperf.results import Summary

STEP = [(f"b{i:02d}", 100.0) for i in range(6)] + [(f"b{i:02d}", 88.0) for i in range(6, 12)]
LLAMA_BENCH = Path(__file__).parents[1] / "expected" / "llama_bench" / "readme.json"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    fill_history(tmp_path / "r.db", STEP)[0].close()
    fill_history(tmp_path / "r.db", STEP, test_id="t::other", seed=2)[0].close()
    return tmp_path / "r.db"


def test_dash_o_prints_the_export_and_writes_no_file_named_dash(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--db", str(db), "-o", "-"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 24 and {r["test_id"] for r in rows} == {"t::decode", "t::other"}
    assert "24 results -> stdout" in err
    assert main(["export", "--db", str(db), "-o", "-", "--format", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 24
    assert main(["report", "--db", str(db), "-o", "-", "--format", "md"]) == 0
    assert capsys.readouterr().out.startswith("### pytest-tokperf: 2 results")
    assert not (tmp_path / "-").exists()
    for argv in (["plot", "--db", str(db), "-o", "-"], ["merge", str(db), "-o", "-"],
                 ["make-model", "--preset", "engines", "-o", "-"]):
        assert main(argv) == 2, argv
        assert "'-' (stdout) cannot take" in capsys.readouterr().err
    assert not (tmp_path / "-").exists()


def test_every_verb_that_writes_a_file_makes_its_missing_folders(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "no" / "such"
    for argv, written in (
            (["make-model", "--preset", "engines", "-o", str(deep / "m" / "x.gguf")],
             deep / "m" / "x.gguf"),
            (["export", "--db", str(db), "-o", str(deep / "e" / "x.csv")], deep / "e" / "x.csv"),
            (["report", "--db", str(db), "-o", str(deep / "r" / "x.html")],
             deep / "r" / "x.html"),
            (["plot", "--db", str(db), "-o", str(deep / "p")], deep / "p"),
            (["merge", str(db), "-o", str(deep / "m" / "m.db")], deep / "m" / "m.db"),
            (["save-reference", "--db", str(db), "-d", str(deep / "s")], deep / "s")):
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        assert written.exists(), argv
    assert list((deep / "p").glob("history-*.png"))
    capsys.readouterr()
    assert main(["make-model", "--preset", "engines", "-o", str(tmp_path)]) == 2
    assert "is a folder; name the file to write in it" in capsys.readouterr().err
    verbs = next(a for a in build_parser()._actions if a.dest == "verb").choices
    for name in ("make-model", "export", "report", "plot", "merge", "save-reference"):
        assert "missing folders are made" in " ".join(verbs[name].format_help().split()), name


def test_reading_verbs_leave_an_empty_file_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "e.db"
    empty.touch()
    for argv in (["outliers", "--db", str(empty)],
                 ["import-llama-bench", str(LLAMA_BENCH), "--db", str(empty)]):
        assert main(argv) == 2, argv
        assert "is not a tokperf results DB" in capsys.readouterr().err, argv
        assert empty.stat().st_size == 0, argv
        assert sorted(p.name for p in tmp_path.iterdir()) == ["e.db"], argv
    assert main(["import-llama-bench", str(LLAMA_BENCH), "--db", str(tmp_path / "new.db")]) == 0
    capsys.readouterr()
    before = (tmp_path / "new.db").read_bytes()
    assert main(["outliers", "--db", str(tmp_path / "new.db")]) == 0
    assert (tmp_path / "new.db").read_bytes() == before  # read only (mode=ro)


def test_accept_asks_for_the_series_and_names_who_accepted(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accept", "--db", str(db), "--reason", "new kernel"]) == 2
    err = capsys.readouterr().err
    assert "name the series" in err and "--all for every one of the 2 series" in err
    assert main(["history", "--db", str(db), "t::decode"]) == 0
    assert "(accepted)" not in capsys.readouterr().out
    assert main(["accept", "--db", str(db), "t::decode", "--all", "--reason", "x"]) == 2
    assert "--all and SERIES 't::decode' both choose" in capsys.readouterr().err
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    assert main(["accept", "--db", str(db), "t::decode", "--reason", "new kernel"]) == 0
    out = capsys.readouterr().out
    assert f"by {getpass.getuser()}: new kernel" in out and "by ?" not in out

    def nobody() -> str:
        raise OSError("no user name")

    monkeypatch.setattr(getpass, "getuser", nobody)
    assert main(["accept", "--db", str(db), "--all", "--reason", "driver 570"]) == 0
    out = capsys.readouterr().out
    assert out.count("by unknown user: driver 570") == 2
    assert main(["accept", "--db", str(db), "t::other", "--reason", "x", "--by", "ana"]) == 0
    assert "by ana: x" in capsys.readouterr().out


def test_make_model_names_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["make-model", "--width", "3"]) == 2
    err = capsys.readouterr().err
    assert ("--width 3 is not a multiple of the 32 attention heads: give a multiple of 32 "
            "(e.g. 32)") in err
    assert "head_dim" not in err and "n_embd" not in err
    assert main(["make-model", "--preset", "test", "--width", "100", "--type", "Q8_0"]) == 2
    assert "give a multiple of 32 (e.g. 96 or 128)" in capsys.readouterr().err
    assert main(["make-model", "--preset", "test", "--vocab", "10"]) == 2
    assert "--vocab 10 is too small: give at least 260" in capsys.readouterr().err


def test_predict_shows_a_tiny_models_sizes_and_band(capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.model.spec import ENGINES_MODEL
    from pytest_tokperf.model.writer import cached_model

    model = cached_model(ENGINES_MODEL)
    assert main(["predict", "--model", str(model), "--hardware", "RTX 4090"]) == 0
    out = capsys.readouterr().out
    assert "0.00 GB" not in out and "0.01 GB" not in out and "0.00 B" not in out
    assert "+ KV 0 B at depth 0" in out and " MB per token: weights " in out
    band = re.search(r"efficiency band: (\S+) \((\S+)-(\S+)\)", out)
    assert band is not None and len(set(band.groups())) == 3, out
    expected = re.search(r"expected decode: .* tok/s \((.*)\)", out)
    assert expected is not None
    shares = [part.split(":")[0] for part in expected.group(1).split(", ")]
    assert len(set(shares)) == len(shares), shares


def test_a_spread_wider_than_a_quarter_of_the_rate_shows_as_a_range() -> None:
    wild = Summary(median=208.09, mean=300.0, stdev=353.31, minimum=12.4, maximum=1000.0, n=5)
    rows = [Row("t::wild", dataclasses.replace(make_result(), decode_tokens_per_s=wild),
                make_ceiling(), "unstable"),
            Row("t::calm", make_result(), make_ceiling(), "pass")]
    text = "\n".join(summary_table(rows, columns=250))
    assert "±353" not in text
    assert "208.1 (12.4-1000)!" in text and "100.0 ±2.0" in text  # as markdown and HTML write it
    assert "the range (slowest-fastest) is shown, not ±: an unstable figure" in text
    assert "unstable figure" not in "\n".join(summary_table(rows[1:], columns=250))


def test_report_writes_the_format_its_suffix_names(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.json")]) == 0
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["schema"].startswith("pytest-tokperf/report/")
    assert {r["test_id"] for r in document["results"]} == {"t::decode", "t::other"}
    assert {(c["kind"], c["verdict"]) for c in document["changes"]} == {
        ("step", "regression"), ("compare", "unchanged")}  # the step; the last two builds
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("### pytest-tokperf: 2 results")
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.htm")]) == 0
    assert (tmp_path / "r.htm").read_text().lstrip().lower().startswith("<!doctype html")
    capsys.readouterr()
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "r.txt")]) == 2
    err = capsys.readouterr().err
    assert "'.txt' is none of .md, .markdown, .json, .html, .htm" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["report", "--db", str(db), "-o", str(tmp_path / "x.json"), "--format",
                 "md"]) == 2
    assert "disagree" in capsys.readouterr().err
    assert not (tmp_path / "r.txt").exists() and not (tmp_path / "x.json").exists()
