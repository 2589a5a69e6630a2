"""What ``tokperf`` says about itself: version, grouped help, descriptions, a closed pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import pytest_tokperf
from pytest_tokperf.cli.common import GROUPS
from pytest_tokperf.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def test_version_comes_from_the_installed_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    assert pytest_tokperf.__version__ == version("pytest-tokperf")
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"tokperf {version('pytest-tokperf')}"


def test_tokperf_alone_prints_the_grouped_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    headings = [f"{title}:" for title, _ in GROUPS]
    at = [out.index(f"\n{h}\n") for h in headings]
    assert at == sorted(at)  # models, engines and builds, measure, results, in that order
    for title, names in GROUPS:
        block = out.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0]
        assert [line.split()[0] for line in block.splitlines()] == list(names)
    assert "exit status:" in out and "\n  130  interrupted" in out and "\n  2    usage" in out


def test_every_verb_has_a_capitalised_description_and_no_doubled_percent() -> None:
    parser = build_parser()
    verbs = next(a for a in parser._actions if a.dest == "verb").choices
    assert verbs
    for name, sub in verbs.items():
        assert sub.description and sub.description[0].isupper(), name
        text = sub.format_help()
        assert "%%" not in text, name
        if any(a.dest == "metric" and a.choices for a in sub._actions):
            assert "lower is better" in text or "decode:" in text, name


def test_a_closed_pipe_ends_quietly() -> None:
    """``tokperf ... | head -1``: the reader is gone before the output is written."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest_tokperf.cli.main", "predict", "--hardware",
             "1008GB/s", "--params", "8e9"], stdout=write, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


def test_every_verb_takes_json_and_every_results_verb_takes_db() -> None:
    from pytest_tokperf.cli.builds import run_db
    from pytest_tokperf.storage.location import default_db, project_root

    parser = build_parser()
    verbs = next(a for a in parser._actions if a.dest == "verb").choices
    flags = {name: {f for a in sub._actions for f in a.option_strings}
             for name, sub in verbs.items()}
    assert all("--json" in f for f in flags.values())
    results = dict(GROUPS)["results"]
    for name in (*results, "bench", "compare-builds", "bisect"):
        assert "--db" in flags[name], name
    assert run_db(parser.parse_args(["compare-builds", "1", "2"])).resolve() == \
        default_db(project_root(Path.cwd()))
    assert run_db(parser.parse_args(["bisect", "--good", "1", "--bad", "2", "--db", "x.db"])) \
        == Path("x.db")
    for argv in (["export", "-o", "x.csv"], ["history"], ["report", "-o", "r.html"]):
        assert parser.parse_args(argv).db is None  # an unset --db, so a positional DB counts


def test_compare_builds_says_the_min_effect_each_mode_uses() -> None:
    from pytest_tokperf.stats.metric import DECODE
    from pytest_tokperf.stats.paired import PAIRED_MIN_EFFECT

    verbs = next(a for a in build_parser()._actions if a.dest == "verb").choices
    text = " ".join(verbs["compare-builds"].format_help().split())
    assert (f"(default {PAIRED_MIN_EFFECT:g} with --mode paired, as the same-run A/B's; "
            f"{DECODE.min_effect:g} with --mode sessions)") in text
    assert "VM" not in text and "2-core" not in text


def test_every_verbs_usage_and_errors_name_the_verb(capsys: pytest.CaptureFixture[str]) -> None:
    # the usage line once read "tokperf [--version] [-h] VERB [options] accept: error: ..."
    parser = build_parser()
    verbs = next(a for a in parser._actions if a.dest == "verb").choices  # type: ignore[union-attr]
    assert verbs
    for verb, sub in verbs.items():  # type: ignore[union-attr]
        assert sub.prog == f"tokperf {verb}", sub.prog
        assert sub.format_usage().startswith(f"usage: tokperf {verb} "), sub.format_usage()
    with pytest.raises(SystemExit) as exited:
        main(["accept"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "tokperf accept: error:" in err and "VERB [options] accept" not in err
