"""Repetitions nested in sessions: the session as the unit, machine phases, drift against
the accepted level, sane interval text; checked on synthetic sessions and on the real
release dataset (``db/runs/releases``: 9 llama.cpp releases x 3 sessions x 5 repetitions
on this project's shared VM, whose memory bandwidth sits in phases)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest

from pytest_tokperf.bench.gate import Gate
from pytest_tokperf.builds.specs import Build
from pytest_tokperf.cli.main import main
from pytest_tokperf.settings import Baseline, parse_baseline
from pytest_tokperf.stats import DECODE, TTFT, compare, judge_history
from pytest_tokperf.stats.changepoints import Point, change_points
from pytest_tokperf.stats.comparing import measure_shift
from pytest_tokperf.stats.drift import resolution
from pytest_tokperf.stats.metric import interval_text
from pytest_tokperf.stats.shifts import Shift
from pytest_tokperf.stats.verdict import judge
from pytest_tokperf.storage.exchange import import_datasets
from pytest_tokperf.versions.sessions import BuildRunner, Target, compare_groups
from tests.support.storage_factory import fill_history, result_at

RELEASES = Path(__file__).resolve().parents[2] / "db" / "runs" / "releases"


def session(level: float, cv: float, reps: int, rng: np.random.Generator) -> list[float]:
    return list(level * np.exp(cv * rng.standard_normal(reps)))


# -- the session is the unit --------------------------------------------------------


def test_two_sessions_of_five_are_two_observations_when_sessions_differ() -> None:
    rng = np.random.default_rng(1)
    base = [session(100, 0.01, 5, rng), session(112, 0.01, 5, rng)]
    current = [session(94, 0.01, 5, rng), session(105, 0.01, 5, rng)]
    shift = measure_shift(base, current, DECODE)
    assert shift.method == "sessions" and shift.versions == 2 and shift.sessions_current == 2
    assert shift.df < 3  # 4 session levels, 2 sides: 2 df, not 18
    assert (shift.n_baseline, shift.n_current) == (10, 10)
    result = compare(base, current, DECODE)
    assert result.verdict == "inconclusive" and not result.flagged
    # pooled flat, the same samples looked like a regression of -6% on 18 df
    flat = compare([x for s in base for x in s], [x for s in current for x in s], DECODE)
    assert flat.shift is not None and flat.shift.df > 15


def test_sessions_that_agree_keep_the_power_of_their_repetitions() -> None:
    rng = np.random.default_rng(2)
    base = [session(100, 0.02, 5, rng) for _ in range(5)]
    current = [session(92, 0.02, 5, rng), session(92, 0.02, 5, rng)]
    result = compare(base, current, DECODE)
    assert result.shift is not None and result.shift.method == "pooled"
    assert result.verdict == "regression" and result.shift.df > 25


def test_other_builds_sessions_inform_the_spread_not_the_levels() -> None:
    """Both sides' sessions sit in one phase each; only the other builds show the phases."""
    rng = np.random.default_rng(3)
    high, low = 100.0, 80.0
    base = [session(high, 0.01, 5, rng) for _ in range(3)]
    current = [session(low, 0.01, 5, rng) for _ in range(3)]
    alone = compare(base, current, DECODE)
    assert alone.verdict == "regression"  # the sessions alone cannot see the phases
    others = [[session(rng.choice([high, low]), 0.01, 5, rng) for _ in range(3)]
              for _ in range(7)]
    with_history = compare(base, current, DECODE, spread=others)
    assert with_history.verdict == "inconclusive"
    assert with_history.relative_change == pytest.approx(alone.relative_change)
    assert "phase-dominated history" in with_history.reason


# -- phases ---------------------------------------------------------------------------


def test_a_phase_dominated_history_says_so_instead_of_flagging() -> None:
    rng = np.random.default_rng(4)
    phases = [100.0, 80.0, 100.0, 100.0, 80.0, 100.0, 80.0, 80.0]
    base = [session(level, 0.014, 5, rng) for level in phases]
    result = compare(base, session(80 * 0.95, 0.014, 5, rng), DECODE)
    assert result.verdict == "inconclusive"
    assert result.shift is not None and result.shift.phase_dominated
    assert "phase-dominated history: steps under " in result.reason
    assert "% cannot be seen; use the same-run A/B" in result.reason
    assert "more repetitions per session would not help" in result.reason
    head = result.reason.split("steps under ")[1].split("%")[0]
    assert float(head) > 20  # a 5% step is far below what these sessions resolve


def test_a_wide_step_is_still_seen_through_the_phases() -> None:
    rng = np.random.default_rng(5)
    base = [session(level, 0.014, 5, rng) for level in [100.0, 80.0] * 10]
    result = compare(base, session(30.0, 0.014, 5, rng), DECODE)
    assert result.verdict == "regression"
    assert "sessions, not repetitions, are the unit here" in result.reason


def test_resolution_of_a_phase_dominated_history() -> None:
    rng = np.random.default_rng(6)
    points = [Point(f"b{i // 3}", tuple(session(float(rng.choice([100, 80])), 0.014, 5, rng)))
              for i in range(27)]
    seen = resolution(points, DECODE)
    assert seen.phase_dominated and seen.smallest_step > 0.1
    assert seen.note.startswith("phase-dominated history: steps under ")
    calm = [Point(f"b{i}", tuple(session(100, 0.014, 5, rng))) for i in range(27)]
    quiet = resolution(calm, DECODE)
    assert not quiet.phase_dominated and quiet.note == "" and quiet.smallest_step < 0.05


# -- drift against the accepted level ----------------------------------------------


def slide(reps: int, seed: int, per_build: float = -0.012) -> tuple[list[Point], list[float]]:
    rng = np.random.default_rng(seed)
    points = [Point(f"v{i}", tuple(session(100 * (1 + per_build) ** i, 0.02, reps, rng)))
              for i in range(9)]
    return points, session(100 * (1 + per_build) ** 9, 0.02, reps, rng)


@pytest.mark.parametrize("seed", range(5))
def test_a_slow_slide_is_flagged_against_the_accepted_level(seed: int) -> None:
    points, current = slide(5, seed)
    judged = judge_history(points, current, DECODE, current_version="v9")
    assert judged.comparison.verdict == "regression" and judged.judged == "drift"
    assert judged.step.verdict != "regression"  # no step of its own reaches 5%
    reason = judged.comparison.reason
    assert "judged against the accepted level (v0..v2, 3 runs)" in reason
    assert "it accumulated over v3..v8, 6 runs and v9" in reason
    assert "Bonferroni over 2 comparisons" in reason
    # the gate names the level changes `tokperf changes` lists, and no others
    listed = {f"{c.version_before} -> {c.version_after}" for c in change_points(points, DECODE)}
    named = set(re.findall(r"v\d -> v\d", reason))
    assert named == listed and (named or "in steps each too small to flag" in reason)
    assert [p.version for p in judged.reference] == ["v0", "v1", "v2"]


@pytest.mark.parametrize("seed", range(5))
def test_a_level_history_is_not_flagged_by_the_second_look(seed: int) -> None:
    points, current = slide(5, 100 + seed, per_build=0.0)
    judged = judge_history(points, current, DECODE)
    assert judged.drift is not None and not judged.comparison.flagged
    assert judged.step.shift is not None and judged.step.shift.tests == 2


def test_the_gate_names_the_accepted_level_when_drift_decides(tmp_path: Path) -> None:
    levels = [(f"b{i}", 100 * 0.99**i) for i in range(9)]
    store, key = fill_history(tmp_path / "r.db", levels, seed=3)
    samples = result_at("b9", 100 * 0.99**9, random.Random(4)).samples
    findings = Gate(Baseline("history")).judge(store, test_id="t::decode", series_key=key,
                                               samples=samples, current_build="b9",
                                               run_id="current")
    decode = next(f for f in findings if f.comparison.metric == "decode")
    assert decode.comparison.verdict == "regression"
    assert decode.baseline == "accepted level b0..b2 (3 runs)"
    assert "it accumulated over b3..b8, 6 runs and b9" in decode.comparison.reason


# -- sane interval text ----------------------------------------------------------------


def test_an_interval_beyond_the_sane_bound_is_not_resolved() -> None:
    wide = Shift(-0.277, 0.9, 1.0, 10, 5, "sessions", 0.02, 2, between_cv=0.3,
                 phase_share=0.5)
    result = judge(wide, TTFT)
    assert result.verdict == "inconclusive"
    assert "ttft −24.2% not resolved:" in result.reason
    assert "resolves no change within ±1000%: not resolved" in result.reason
    assert "e+" not in result.reason and "0000000" not in result.reason
    assert interval_text(-0.02, 0.03) == "[−2.0%, +3.0%]"
    assert interval_text(-0.96, -0.94) == "[−96.0%, −94.0%]"  # precise, if extreme
    assert interval_text(-1.0, 8.5e27) == "not resolved"
    assert interval_text(math.nan, 0.1) == "-"


def test_two_earlier_runs_at_two_levels_print_no_absurd_interval() -> None:
    """The reproducer: the gate with two earlier runs at two levels once printed
    ``ttft −24.2% [−100.0%, +8585460285525979452428779520.0%]``."""
    rng = np.random.default_rng(7)
    history = [Point("b1", tuple(session(0.30, 0.01, 5, rng))),
               Point("b2", tuple(session(0.45, 0.01, 5, rng)))]
    result = judge_history(history, session(0.28, 0.01, 5, rng), TTFT).comparison
    assert result.verdict == "inconclusive"
    assert "%]" not in result.reason.split(":")[0] or "not resolved" in result.reason
    assert all(len(word) < 16 for word in result.reason.split())


# -- compare-builds ----------------------------------------------------------------------


def test_compare_builds_sessions_are_not_gated_and_its_ratio_is_robust(tmp_path: Path) -> None:
    runner = BuildRunner(tmp_path / "r.db", ["t.py"], python="py")
    assert "--tokperf-baseline=off" in runner.command(Build("b1", Path("/x/llama-server")))
    assert parse_baseline("off").kind == "off"
    store, key = fill_history(tmp_path / "g.db", [(f"b{i}", 100.0) for i in range(6)])
    samples = result_at("bnew", 80.0, random.Random(1)).samples
    assert Gate(Baseline("off")).judge(store, test_id="t", series_key=key, samples=samples,
                                       current_build="bnew", run_id="x") == []
    target = Target("s", "test_decode", "decode")
    rng = np.random.default_rng(8)
    a = [session(30, 0.01, 5, rng) for _ in range(5)]
    b = [session(30, 0.01, 5, rng) for _ in range(4)] + [session(6, 0.01, 5, rng)]  # stalled
    (found,) = compare_groups({target: a}, {target: b})
    assert found.ratio == pytest.approx(1.0, abs=0.02)
    assert found.mean_b / found.mean_a < 0.85  # the plain ratio of means reads a drop
    assert not found.comparison.flagged


# -- the real release dataset ------------------------------------------------------------


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("releases") / "r.db"
    import_datasets(db, [RELEASES])
    return db


def _compare(db: Path, baseline: str, current: str) -> dict[str, dict[str, object]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compare", "--db", str(db), "--baseline", baseline, "--current", current,
                     "--json"]) == 0
    found: dict[str, dict[str, object]] = json.loads(out.getvalue())
    return found


@pytest.mark.parametrize(("baseline", "current"), [
    ("b9093", "b10380"), ("b10054", "b10705"), ("b10054", "b11292"), ("b10054", "b11434"),
    ("b10705", "b11028"), ("b11028", "b11292"), ("b11028", "b11434"),
])
def test_release_pairs_once_flagged_are_not(releases: Path, baseline: str, current: str) -> None:
    """The 7 of 72 release-pair verdicts ``tokperf compare`` flagged on releases the README
    calls unchanged (stalls set aside across sessions, the current side pooled flat)."""
    found = _compare(releases, f"{baseline}-pypi-sdist", f"{current}-pypi-sdist")
    assert len(found) == 2
    for verdict in found.values():
        assert verdict["verdict"] == "inconclusive"
        assert "phase-dominated history: steps under " in str(verdict["reason"])


def test_a_low_phase_session_is_not_set_aside_as_stalls(releases: Path) -> None:
    """b9093's low-phase session of test_ttft_prompt_512 (29.2, 28.8, 32.3, 28.4, 30.0
    tok/s beside sessions at 36-37) once lost 3 repetitions as 'stalls'."""
    found = _compare(releases, "b9093-pypi-sdist", "b10380-pypi-sdist")
    reasons = " ".join(str(v["reason"]) for v in found.values())
    assert "29.207" not in reasons and "28.828" not in reasons and "28.442" not in reasons


def test_changes_on_the_release_dataset_names_the_phases(releases: Path) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["changes", "--db", str(releases)]) == 0
    text = out.getvalue()
    assert text.count("phase-dominated history: steps under ") == 2
    assert "use the same-run A/B" in text
