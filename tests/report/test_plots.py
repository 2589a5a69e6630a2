"""PNG figures from a fixture database: drawn, not blank, with the right marks in them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from tests.support.report_fixture import build_db

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.plots import (
    LINE,
    VERDICT_COLOURS,
    Plot,
    plot_all,
    plot_concurrency,
    plot_efficiency_vs_depth,
    plot_history,
    plot_ttft_vs_prompt,
    build_positions,
    history_file_names,
    family_of,
    ttft_curves,
)
from pytest_tokperf.stats.changepoints import Point
from pytest_tokperf.report.report_data import (
    ResultFigures,
    SeriesHistory,
    load_histories,
    store_figures,
)
from pytest_tokperf.stats.comparing import TTFT
from pytest_tokperf.storage.store import ResultStore

try:
    from matplotlib.image import imread
except ImportError:  # pragma: no cover - the test extra installs it
    pytest.fail("matplotlib is missing: pip install -e '.[test]' (it pulls in the plot extra)",
                pytrace=False)

Data = tuple[list[ResultFigures], list[SeriesHistory]]


def pixels(path: Path) -> np.ndarray:
    image = imread(str(path))
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 600
    return np.asarray(image[..., :3], dtype=float)


def share_of(image: np.ndarray, colour: str) -> float:
    """Fraction of pixels within a small distance of ``colour`` (``#rrggbb``)."""
    rgb = np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return float((np.abs(image - rgb).max(axis=-1) < 0.08).mean())


def assert_drawn(plot: Plot, *colours: str) -> np.ndarray:
    assert plot.path is not None and plot.path.stat().st_size > 10_000, plot.note
    image = pixels(plot.path)
    assert image.std() > 0.05, "the figure is blank"
    for colour in colours:
        assert share_of(image, colour) > 0.0005, f"no {colour} in {plot.path.name}"
    return image


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    path = build_db(tmp_path_factory.mktemp("plots") / "results.db", concurrency=True)
    with ResultStore.open(path) as store:
        return store_figures(store), load_histories(store)


def history_of(data: Data, test_id: str) -> SeriesHistory:
    return next(h for h in data[1] if h.test_id == test_id)


def test_history_marks_the_change_point_with_its_step(data: Data, tmp_path: Path) -> None:
    plot = plot_history(history_of(data, "test_decode[short]"), tmp_path / "h.png")
    assert plot.kind == "history"
    assert plot.title == "test_decode[short]\ndecode across engine builds · prompt 512, gen 128"
    assert plot.note == "regression −12.0% at b6006 (c0ffee6)"
    assert_drawn(plot, LINE, VERDICT_COLOURS["regression"])


def test_history_without_a_step_has_no_red_mark(data: Data, tmp_path: Path) -> None:
    plot = plot_history(history_of(data, "test_decode[long]"), tmp_path / "h.png")
    assert plot.note == "no change point"
    image = assert_drawn(plot, LINE)
    assert share_of(image, VERDICT_COLOURS["regression"]) == 0


def test_ttft_history_is_in_milliseconds(data: Data, tmp_path: Path) -> None:
    short = history_of(data, "test_decode[short]")
    ttft = SeriesHistory(short.series_key, short.test_id, short.title, TTFT, short.points,
                         (), None)
    plot = plot_history(ttft, tmp_path / "ttft.png")
    assert plot.title.split("\n")[1].startswith("ttft across engine builds")
    assert_drawn(plot, LINE)


def test_a_single_build_is_skipped_with_a_note(data: Data, tmp_path: Path) -> None:
    plot = plot_history(history_of(data, "test_batch"), tmp_path / "one.png")
    assert plot.skipped and not (tmp_path / "one.png").exists()
    assert plot.note.endswith("1 run(s) with samples, a history needs 2")


def test_efficiency_vs_depth_and_ttft_vs_prompt(data: Data, tmp_path: Path) -> None:
    figures = data[0]
    efficiency = plot_efficiency_vs_depth(figures, tmp_path / "eff.png")
    assert efficiency.title == "Decode efficiency vs depth"
    image = assert_drawn(efficiency)
    assert share_of(image, LINE) + share_of(image, "#ff7f0e") > 0.0005  # one colour per test
    ttft = plot_ttft_vs_prompt(figures, tmp_path / "ttft.png")
    assert ttft.title == "TTFT vs prompt length"
    assert_drawn(ttft, LINE)


def test_ttft_curve_holds_only_cold_raw_single_requests(data: Data) -> None:
    import dataclasses

    figures = [f for f in data[0] if f.concurrency == 1]
    base = ttft_curves(figures)
    fig = figures[0]
    others = [dataclasses.replace(fig, ttft_s=fig.ttft_s / 20, cached_prefix_tokens=8),
              dataclasses.replace(fig, ttft_s=fig.ttft_s * 5, chat=True),
              dataclasses.replace(fig, ttft_s=fig.ttft_s * 3, draft_model="d.gguf")] * 3
    assert ttft_curves(figures + others) == base
    deep = dataclasses.replace(fig, depth_tokens=4096)
    (xs, _), = [c for label, c in ttft_curves([deep]).items() if label == fig.setup_label]
    assert xs == [4096 + fig.prompt_tokens]


def test_curves_need_two_depths_or_prompt_lengths(data: Data, tmp_path: Path) -> None:
    one = [f for f in data[0] if f.test_id == "test_decode[short]"]
    assert plot_efficiency_vs_depth(one, tmp_path / "e.png").note.startswith(
        "efficiency vs depth needs results with a ceiling at two or more decode depths")
    assert plot_ttft_vs_prompt(one, tmp_path / "t.png").skipped
    assert not list(tmp_path.iterdir())


def test_concurrency_curve_only_with_a_sweep(data: Data, tmp_path: Path) -> None:
    figures = data[0]
    curve = plot_concurrency(figures, tmp_path / "c.png")
    assert curve.note == "1 workload(s)"
    assert_drawn(curve, LINE)
    # drawn as measured (all streams' output / round wall time), not per-stream x N
    batch = sorted((f.concurrency, f.aggregate_tokens_per_s) for f in figures
                   if f.test_id == "test_batch")
    assert batch == [(1, 80.0), (2, 140.0), (4, 200.0)]
    single = [f for f in figures if f.concurrency == 1]
    skipped = plot_concurrency(single, tmp_path / "none.png")
    assert skipped.skipped
    assert skipped.note == ("no results with concurrency > 1: "
                            "nothing to draw a concurrency curve from")


def test_plot_all_writes_one_file_per_drawn_figure(data: Data, tmp_path: Path) -> None:
    figures, histories = data
    long_only = [h for h in histories if h.test_id == "test_decode[long]"]
    plots = plot_all(figures, long_only, tmp_path / "out")
    assert [p.kind for p in plots] == ["history", "efficiency-depth", "ttft-prompt", "concurrency",
                                       "repetitions"]
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == sorted(p.path.name for p in plots if p.path is not None)
    assert len(written) == 5


def test_missing_matplotlib_says_what_to_install(
    data: Data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ConfigError, match=r"pip install 'pytest-tokperf\[plot\]'"):
        plot_ttft_vs_prompt(data[0], tmp_path / "t.png")


def test_history_has_one_tick_per_build_with_its_runs_around_it() -> None:
    points = [Point(v, (1.0, 2.0)) for v in ("b1", "b1", "b2", "b1", "b2", "b2", "b3")]
    builds, xs = build_positions(points)
    assert builds == ["b1", "b2", "b3"]
    for point, x in zip(points, xs, strict=True):
        assert abs(x - builds.index(point.version)) <= 0.3
    b1 = [x for p, x in zip(points, xs, strict=True) if p.version == "b1"]
    assert b1 == sorted(b1) and len(set(b1)) == 3  # side by side, oldest on the left
    assert xs[-1] == 2.0  # a build with one run sits on its tick


def test_history_titles_wrap_instead_of_clipping(data: Data, tmp_path: Path) -> None:
    import dataclasses

    long_id = "benchmarks/test_a_rather_long_module_name.py::test_with_a_long_name[param-1024]"
    history = dataclasses.replace(history_of(data, "test_decode[short]"), test_id=long_id)
    plot = plot_history(history, tmp_path / "long.png")
    assert all(len(line) <= 78 for line in plot.title.split("\n"))
    assert plot.title.replace("\n", "").startswith(long_id)


def test_plot_files_are_named_by_test_id(data: Data, tmp_path: Path) -> None:
    import dataclasses

    plots = plot_all(*data, tmp_path)
    names = sorted(p.path.name for p in plots if p.kind == "history" and p.path)
    assert "history-test_decode-short-decode.png" in names
    assert not any(h.series_key in n for h in data[1] for n in names)
    first = data[1][0]
    twin = dataclasses.replace(first, series_key="f" * 16)  # the same test, another series
    named = history_file_names([first, twin])
    assert named[first.series_key].endswith(f"-{first.series_key[:8]}-decode.png")
    assert named[twin.series_key].endswith("-ffffffff-decode.png")


def test_efficiency_vs_depth_draws_one_line_per_test(data: Data, tmp_path: Path) -> None:
    """The parameters of one test are one line; two tests are never joined."""
    assert family_of("b/t.py::test_profile[512]") == "b/t.py::test_profile"
    assert family_of("b/t.py::test_plain") == "b/t.py::test_plain"
    plot = plot_efficiency_vs_depth(data[0], tmp_path / "e.png")
    families = {family_of(f.test_id) for f in data[0]
                if f.concurrency == 1 and f.draft_model is None and f.efficiency is not None}
    assert plot.note.startswith(f"{len(families)} test(s), one line each")
