"""Figures from plain report values, drawn with matplotlib (the ``plot`` extra): PNG, or
SVG where the file name asks for it.

A figure the data cannot support comes back with no path and a note saying why.
"""

from __future__ import annotations

import inspect
import re
import statistics
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.report_data import (
    ResultFigures,
    SeriesHistory,
    workload_label,
)
from pytest_tokperf.safe_files import safe_name
from pytest_tokperf.stats.comparing import TTFT
from pytest_tokperf.stats.metric import pct

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from pytest_tokperf.stats.changepoints import Point

INSTALL_HINT = "pip install 'pytest-tokperf[plot]'"
PlotKind = Literal["history", "efficiency-depth", "ttft-prompt", "concurrency",
                   "repetitions"]
LINE = "#1f77b4"
"""The colour of every measured line (tests look for it in rendered pages)."""
VERDICT_COLOURS = {"regression": "#d62728", "improvement": "#2ca02c"}
_DPI = 100


@dataclass(frozen=True, slots=True)
class Plot:
    """One figure: written to ``path``, or skipped (``path`` is None) for ``note``."""

    kind: PlotKind
    title: str
    path: Path | None
    note: str = ""

    @property
    def skipped(self) -> bool:
        return self.path is None


def _blank_figure(width_in: float, height_in: float) -> Figure:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError(
            f"plots need matplotlib, which is not installed here: {INSTALL_HINT}"
        ) from exc
    fig = Figure(figsize=(width_in, height_in), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _new_figure(width_in: float = 9.0, height_in: float = 4.8) -> tuple[Figure, Axes]:
    fig = _blank_figure(width_in, height_in)
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format=path.suffix.lstrip(".") or "png")
    except OSError as exc:
        raise ConfigError(f"cannot write the plot {str(path)!r}: {exc}; choose another "
                          "output folder") from exc
    return path


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize="small", loc="best")


def _title(*lines: str, width: int = 78) -> str:
    """Lines wrapped to fit the figure's width (a long test id is not clipped)."""
    return "\n".join(textwrap.fill(line, width, break_long_words=True, break_on_hyphens=False)
                     for line in lines if line)


def build_positions(points: Sequence[Point]) -> tuple[list[str], list[float]]:
    """One tick per build in first-seen order; each run at a small offset, oldest left."""
    builds: list[str] = []
    for p in points:
        if p.version not in builds:
            builds.append(p.version)
    runs = {b: [i for i, p in enumerate(points) if p.version == b] for b in builds}
    xs = [0.0] * len(points)
    for n, build in enumerate(builds):
        members = runs[build]
        step = min(0.15, 0.6 / len(members))
        for k, i in enumerate(members):
            xs[i] = n + (k - (len(members) - 1) / 2) * step
    return builds, xs


def plot_history(history: SeriesHistory, path: Path) -> Plot:
    """The metric per engine build, runs and repetitions as points, change points marked."""
    points = history.points
    title = _title(history.test_id, f"{history.metric.name} across engine builds · "
                   f"{history.title.split(' — ', 1)[-1]}")
    if len(points) < 2:
        return Plot("history", title, None,
                    f"{history.title}: {len(points)} run(s) with samples, a history needs 2")
    ms = history.metric is TTFT
    scale = 1e3 if ms else 1.0
    builds, xs = build_positions(points)
    fig, ax = _new_figure(max(7.0, min(14.0, 0.8 * len(builds) + 5)), 5.2)
    for x, point in zip(xs, points, strict=True):
        ax.plot([x] * len(point.samples), [v * scale for v in point.samples], ".",
                color=LINE, alpha=0.35, markersize=4)
    ax.plot(xs, [statistics.median(p.samples) * scale for p in points], "o", color=LINE,
            markerfacecolor="white", markersize=5, label="run median (dots: repetitions)")
    build_medians = [statistics.median([v for p in points if p.version == b for v in p.samples])
                     * scale for b in builds]
    ax.plot(range(len(builds)), build_medians, "-", color=LINE, linewidth=2, marker="_",
            markersize=22, markeredgewidth=2, label=f"build median {history.metric.name}")
    bounds = [0, *(c.index for c in history.changes), len(points)]
    for n, change in enumerate(history.changes):
        colour = VERDICT_COLOURS[change.verdict]
        x = (xs[change.index - 1] + xs[change.index]) / 2
        ax.axvline(x, color=colour, linestyle="--", linewidth=1.5)
        ax.text(x + 0.08, 0.97 - 0.07 * (n % 2), f"{pct(change.relative_change)} {change.verdict}",
                transform=ax.get_xaxis_transform(), color=colour, va="top", ha="left",
                fontsize="small", fontweight="bold",
                bbox={"facecolor": "white", "edgecolor": colour, "alpha": 0.9, "pad": 2})
        ax.hlines(change.level_before * scale, xs[bounds[n]] - 0.2, x, colors=colour, alpha=0.6)
        ax.hlines(change.level_after * scale, x, xs[bounds[n + 2] - 1] + 0.2, colors=colour,
                  alpha=0.6)
    top = max(v * scale for p in points for v in p.samples)
    ceiling = history.ceiling_decode_tokens_per_s
    if ceiling and history.metric.name == "decode":
        if ceiling <= 3 * top:
            ax.axhline(ceiling, color="grey", linestyle=":",
                       label=f"bandwidth ceiling {ceiling:.1f} tok/s")
            top = max(top, ceiling)
        else:
            ax.text(0.01, 0.02, f"ceiling {ceiling:.0f} tok/s: off scale", fontsize="small",
                    color="grey", transform=ax.transAxes, va="bottom")
    ax.set_ylim(bottom=0, top=top * 1.15)
    ax.set_xlim(-0.6, len(builds) - 0.4)
    ax.set_xticks(list(range(len(builds))))
    ax.set_xticklabels(builds, rotation=30 if len(builds) > 6 else 0,
                       ha="right" if len(builds) > 6 else "center", fontsize="small")
    ax.set_xlabel(f"engine build, oldest first ({len(points)} runs of {len(builds)} "
                  f"build{'s' if len(builds) > 1 else ''})")
    ax.set_ylabel("TTFT ms" if ms else f"{history.metric.name} tok/s")
    ax.set_title(title, fontsize="medium")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize="small", loc="lower right")
    steps = ", ".join([*(f"{c.verdict} {pct(c.relative_change)} at {c.version_after}"
                         for c in history.changes),
                       *(f"{c.verdict} {pct(c.relative_change)} drift {c.version_before}.."
                         f"{c.version_after}" for c in history.drifts)]) or "no change point"
    return Plot("history", title, _save(fig, path), steps)


Curves = dict[str, tuple[list[float], list[float]]]


def _curves(
    figures: Sequence[ResultFigures],
    x_of: Callable[[ResultFigures], float],
    y_of: Callable[[ResultFigures], float | None],
    group_of: Callable[[ResultFigures], str],
) -> Curves:
    """Per group, x ascending with the median y of the results at each x."""
    grouped: dict[str, dict[float, list[float]]] = {}
    for fig in figures:
        y = y_of(fig)
        if y is not None:
            grouped.setdefault(group_of(fig), {}).setdefault(x_of(fig), []).append(y)
    curves: Curves = {}
    for label in sorted(grouped):
        xs = sorted(grouped[label])
        curves[label] = (xs, [statistics.median(grouped[label][x]) for x in xs])
    return curves


def _draw_curves(curves: Curves, path: Path, title: str, xlabel: str, ylabel: str,
                 kind: PlotKind, note: str, integer_x: bool = False) -> Plot:
    fig, ax = _new_figure()
    colours = [LINE, "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
    for n, (label, (xs, ys)) in enumerate(curves.items()):
        ax.plot(xs, ys, "o-", color=colours[n % len(colours)], label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    top = max((y for _, ys in curves.values() for y in ys), default=1.0)
    ax.set_ylim(bottom=0, top=top * 1.15)  # headroom so the highest point and the legend fit
    if integer_x:
        ax.set_xticks(sorted({x for xs, _ in curves.values() for x in xs}))
    _legend(ax)
    return Plot(kind, title, _save(fig, path), note)


def _distinct_x(curves: Curves) -> int:
    return len({x for xs, _ in curves.values() for x in xs})


def family_of(test_id: str) -> str:
    """A test id without its parameters: ``f.py::test_x[512]`` -> ``f.py::test_x``."""
    return re.sub(r"\[.*\]$", "", test_id)


def plot_efficiency_vs_depth(figures: Sequence[ResultFigures], path: Path) -> Plot:
    """Decode efficiency against the mean KV depth during decode (single requests only)."""
    title = "Decode efficiency vs depth"
    single = [f for f in figures if f.concurrency == 1 and f.draft_model is None]
    setups = {f.setup_label for f in single}
    curves = _curves(
        single, lambda f: f.mean_decode_depth_tokens,
        lambda f: None if f.efficiency is None else f.efficiency * 100,
        lambda f: family_of(f.test_id) + (f" · {f.setup_label}" if len(setups) > 1 else ""),
    )
    if _distinct_x(curves) < 2:
        return Plot("efficiency-depth", title, None,
                    "efficiency vs depth needs results with a ceiling at two or more "
                    "decode depths (vary depth_tokens or prompt_tokens)")
    return _draw_curves(curves, path, title,
                        "mean decode depth (KV tokens read per generated token)",
                        "efficiency (% of the bandwidth ceiling)", "efficiency-depth",
                        f"{len(curves)} test(s), one line each"
                        + (f"; setup: {next(iter(setups))}" if len(setups) == 1 else ""))


def ttft_curves(figures: Sequence[ResultFigures]) -> Curves:
    """TTFT ms against tokens prefilled, per setup (cold, raw, single, no draft only)."""
    cold = [f for f in figures if f.concurrency == 1 and not f.cached_prefix_tokens
            and not f.chat and f.draft_model is None]
    return _curves(cold, lambda f: f.depth_tokens + f.prompt_tokens,
                   lambda f: None if f.ttft_s is None else f.ttft_s * 1e3,
                   lambda f: f.setup_label)


def plot_ttft_vs_prompt(figures: Sequence[ResultFigures], path: Path) -> Plot:
    """Time to first token against prompt length, one line per setup (cold single requests)."""
    title = "TTFT vs prompt length"
    curves = ttft_curves(figures)
    if _distinct_x(curves) < 2:
        return Plot("ttft-prompt", title, None,
                    "TTFT vs prompt length needs results at two or more prompt lengths")
    return _draw_curves(curves, path, title, "prompt tokens (depth + prompt, cold)", "TTFT ms",
                        "ttft-prompt",
                        f"{len(curves)} setup(s)")


def plot_concurrency(figures: Sequence[ResultFigures], path: Path) -> Plot:
    """All streams' output tok/s against concurrency, as measured (prefill included)."""
    title = "Aggregate output vs concurrency"
    swept = {_workload_group(f) for f in figures if f.concurrency > 1}
    if not swept:
        return Plot("concurrency", title, None,
                    "no results with concurrency > 1: nothing to draw a concurrency curve from")
    curves = _curves(
        [f for f in figures if _workload_group(f) in swept], lambda f: f.concurrency,
        lambda f: f.aggregate_tokens_per_s,
        _workload_group,
    )
    return _draw_curves(curves, path, title, "concurrent requests",
                        "all streams' output tok/s", "concurrency", f"{len(curves)} workload(s)",
                        integer_x=True)


def _workload_group(fig: ResultFigures) -> str:
    return (f"{fig.setup_label} · prompt {fig.prompt_tokens}, gen {fig.generate_tokens}"
            + (f", depth {fig.depth_tokens}" if fig.depth_tokens else ""))


def _row_labels(figures: Sequence[ResultFigures], width: int = 48) -> list[str]:
    """Each result's test id (its end kept), with its workload where a test measured more."""
    seen = Counter(f.test_id for f in figures)
    labels = []
    for fig in figures:
        label = fig.test_id if len(fig.test_id) <= width else "…" + fig.test_id[-(width - 1):]
        labels.append(label + (f"\n{workload_label(fig.workload)}" if seen[fig.test_id] > 1
                               else ""))
    return labels


def _horizontal(ax: Axes) -> dict[str, Any]:
    """Horizontal boxes in any matplotlib: ``orientation`` from 3.10, ``vert`` before it."""
    if "orientation" in inspect.signature(ax.boxplot).parameters:
        return {"orientation": "horizontal"}
    return {"vert": False}


def plot_repetitions(figures: Sequence[ResultFigures], path: Path) -> Plot:
    """Each result's repetitions as a box with every repetition a dot, one row per result:
    judged decode tok/s and TTFT ms side by side (pytest-benchmark's histogram)."""
    title = "Repetitions per test"
    panels = [
        ("decode tok/s (judged) per repetition", [f.judged_decode_samples for f in figures]),
        ("TTFT ms per repetition", [[s.ttft_s * 1e3 for s in f.samples if s.ttft_s is not None]
                                    for f in figures]),
    ]
    panels = [(label, rows) for label, rows in panels if any(rows)]
    if not panels:
        return Plot("repetitions", title, None,
                    "no result has repetitions with a decode or TTFT figure")
    labels = _row_labels(figures)
    lines = sum(label.count("\n") + 1 for label in labels)
    fig = _blank_figure(4.5 + 4.0 * len(panels), min(80.0, 1.3 + 0.3 * lines))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (xlabel, rows) in zip(axes, panels, strict=True):
        ax.grid(True, axis="x", alpha=0.3)
        drawn = [i for i, values in enumerate(rows) if values]
        ax.boxplot([rows[i] for i in drawn], positions=drawn, widths=0.6, showfliers=False,
                   manage_ticks=False, medianprops={"color": LINE, "linewidth": 2},
                   **_horizontal(ax))
        for i in drawn:
            spread = [(k % 5 - 2) * 0.06 for k in range(len(rows[i]))]
            ax.plot(rows[i], [i + d for d in spread], ".", color=LINE, alpha=0.6, markersize=5)
        ax.set_xlabel(xlabel)
    axes[0].set_yticks(list(range(len(labels))))
    axes[0].set_yticklabels(labels, fontsize="small")
    axes[0].set_ylim(len(labels) - 0.5, -0.5)  # the first result on top
    fig.suptitle(f"{title} ({sum(len(f.samples) for f in figures)} repetitions of "
                 f"{len(figures)} result{'s' * (len(figures) != 1)})", fontsize="medium")
    return Plot("repetitions", title, _save(fig, path), "box: quartiles and median; whiskers: "
                "up to 1.5 IQR; dots: every repetition")


def slug(text: str) -> str:
    """A file-name-safe test id: ``a/test_m.py::test_x[64]`` -> ``test_m.py--test_x-64``."""
    text = text.split("/")[-1].replace("::", "--")
    return safe_name(re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "test")


def history_file_names(histories: Sequence[SeriesHistory]) -> dict[str, str]:
    """Per series key, ``history-<test id>-<metric>.png`` (+ key prefix on clashes)."""
    count: dict[str, int] = {}
    for h in histories:
        count[slug(h.test_id)] = count.get(slug(h.test_id), 0) + 1
    return {h.series_key: f"history-{slug(h.test_id)}"
            + (f"-{h.series_key[:8]}" if count[slug(h.test_id)] > 1 else "")
            + f"-{h.metric.name}.png" for h in histories}


def plot_all(
    figures: Sequence[ResultFigures], histories: Sequence[SeriesHistory], out_dir: Path
) -> list[Plot]:
    """Every figure into ``out_dir``: one history per series, the three curves, then each
    result's repetitions."""
    out_dir = Path(out_dir)
    names = history_file_names(histories)
    plots = [plot_history(h, out_dir / names[h.series_key]) for h in histories]
    plots.append(plot_efficiency_vs_depth(figures, out_dir / "efficiency-vs-depth.png"))
    plots.append(plot_ttft_vs_prompt(figures, out_dir / "ttft-vs-prompt.png"))
    plots.append(plot_concurrency(figures, out_dir / "concurrency.png"))
    plots.append(plot_repetitions(figures, out_dir / "repetitions.png"))
    return plots
