"""Each test's repetitions as a box plot: ``--tokperf-report reps.svg`` (or ``.png``), as
pytest-benchmark's ``--benchmark-histogram``; matplotlib loads only to draw it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.support.fake_faults import FakeFaultyLlama
from tests.support.report_fixture import build_db

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.plots import LINE, plot_repetitions
from pytest_tokperf.report.report_data import ResultFigures, store_figures
from pytest_tokperf.settings import resolve
from pytest_tokperf.storage.store import ResultStore

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ResultFigures]]:
    path = build_db(tmp_path_factory.mktemp("histogram") / "results.db", concurrency=True)
    with ResultStore.open(path) as store:
        yield store_figures(store)


def test_svg_is_written_and_is_an_svg_document(figures: list[ResultFigures],
                                               tmp_path: Path) -> None:
    plot = plot_repetitions(figures, tmp_path / "deep" / "reps.svg")
    assert plot.kind == "repetitions" and plot.path == tmp_path / "deep" / "reps.svg"
    data = plot.path.read_bytes()
    assert data.startswith(b"<?xml") and b"<svg" in data[:400]
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert data.count(b"<!-- test_decode[short] -->") == 1  # one labelled row per result


def test_png_is_written_with_a_box_and_dots_per_result(figures: list[ResultFigures],
                                                       tmp_path: Path) -> None:
    from matplotlib.image import imread

    plot = plot_repetitions(figures, tmp_path / "reps.png")
    assert plot.path is not None and plot.path.read_bytes().startswith(PNG)
    image = np.asarray(imread(str(plot.path))[..., :3], dtype=float)
    assert image.std() > 0.05, "the figure is blank"
    rgb = np.array([int(LINE[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    assert float((np.abs(image - rgb).max(axis=-1) < 0.08).mean()) > 0.0005, "no repetitions"


def test_results_without_repetitions_draw_nothing_and_say_why(
        figures: list[ResultFigures], tmp_path: Path) -> None:
    empty = [dataclasses.replace(f, samples=()) for f in figures]
    plot = plot_repetitions(empty, tmp_path / "none.svg")
    assert plot.skipped and "no result has repetitions" in plot.note
    assert not (tmp_path / "none.svg").exists()


def _resolve(report: str) -> object:
    return resolve(cli=lambda n: [report] if n == "report" else None, ini=lambda k: None,
                   env={}, rootdir=Path("/proj"))


def test_the_report_suffix_picks_the_histogram() -> None:
    for name in ("reps.svg", "out/reps.PNG"):
        settings = _resolve(name)
        assert getattr(settings, "report_histogram") == name
        assert getattr(settings, "report_md") is None


def test_without_matplotlib_the_histogram_is_refused_before_anything_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError) as caught:
        _resolve("reps.svg")
    assert str(caught.value) == (
        "--tokperf-report 'reps.svg' from option --tokperf-report: the box plot of the "
        "repetitions needs matplotlib, which is not installed here; pip install "
        "'pytest-tokperf[plot]', or name a .md, .json or .html report")
    assert _resolve("r.json") is not None  # the other reports need no matplotlib


TWO = """
def test_one(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)

def test_two(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=3, warmup=0)
"""


def test_a_session_writes_the_box_plot_it_was_asked_for(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TWO)
    with FakeFaultyLlama("ok") as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s",
                                    "--tokperf-db", "r.db", "--tokperf-report", "out/reps.svg",
                                    "--tokperf-report", "reps.png")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["report: reps.png"])  # one histogram: the last one named
    assert (pytester.path / "reps.png").read_bytes().startswith(PNG)
    assert not (pytester.path / "out" / "reps.svg").exists()


def test_asking_for_a_histogram_imports_no_matplotlib_until_it_is_drawn(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
import json, sys
def pytest_sessionfinish(session):
    print("HEAVY", json.dumps([m for m in ("matplotlib", "scipy", "numpy") if m in sys.modules]))
""")
    pytester.makepyfile("def test_plain():\n    assert True\n")
    pytester.makeini("[pytest]\ntokperf_report = reps.svg\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*HEAVY []"])
    assert not (pytester.path / "reps.svg").exists()  # no engine: nothing measured, no plot


def test_importing_the_report_modules_loads_no_matplotlib() -> None:
    probe = ("import sys, pytest_tokperf.report.plots, pytest_tokperf.report.formats; "
             "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
