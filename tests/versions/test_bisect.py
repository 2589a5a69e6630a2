"""Bisect: pure logic against fake measurements whose first bad release is known, and the
real ``tokperf bisect`` over 32 fake "releases" (wrapper scripts around the real
llama-server, the later ones with a slowdown switched on)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pytest_tokperf.cli.main import main
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.report.builds import format_result
from pytest_tokperf.versions.bisect import bisect_releases
from pytest_tokperf.versions.sessions import Groups, Target

DECODE_T = Target("s1", "test_decode", "decode")
TTFT_T = Target("s2", "test_ttft", "ttft")
RELEASES = list(range(100, 132))  # 32 releases


class FakeLab:
    """Decode 30 tok/s times a per-session drift (log-normal, ``drift``) times per-sample
    noise (``cv``); from ``step`` on, ``effect`` slower (and ``partial``: from
    ``partial[0]`` on only ``partial[1]`` slower). TTFT never changes. Deterministic."""

    def __init__(self, step: int, effect: float = 0.2, cv: float = 0.03, drift: float = 0.02,
                 seed: int = 0, partial: tuple[int, float] | None = None) -> None:
        self.step, self.effect, self.cv, self.drift, self.seed = step, effect, cv, drift, seed
        self.partial = partial
        self.sessions: dict[int, int] = {}

    def level(self, number: int) -> float:
        if number >= self.step:
            return 1 - self.effect
        if self.partial and number >= self.partial[0]:
            return 1 - self.partial[1]
        return 1.0

    def groups(self, number: int, sessions: int) -> Groups:
        self.sessions[number] = max(self.sessions.get(number, 0), sessions)
        out: Groups = {DECODE_T: [], TTFT_T: []}
        for s in range(sessions):
            rng = random.Random(f"{self.seed}-{number}-{s}")
            drift = math.exp(rng.gauss(0, self.drift))
            out[DECODE_T].append([30 * self.level(number) * drift * math.exp(rng.gauss(0, self.cv))
                                  for _ in range(5)])
            out[TTFT_T].append([0.3 / drift * math.exp(rng.gauss(0, self.cv)) for _ in range(5)])
        return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_step_position_found_within_five_builds(seed: int) -> None:
    for step in RELEASES[1:]:
        lab = FakeLab(step, seed=seed)
        result = bisect_releases(RELEASES, RELEASES[0], RELEASES[-1], lab, progress=lambda _: None)
        assert (result.status, result.first_bad, result.last_good) == (
            "found", step, RELEASES[RELEASES.index(step) - 1]), (seed, step)
        assert result.target == DECODE_T
        builds = len(lab.sessions)
        assert builds - 2 == result.midpoints <= 5, (seed, step, builds)
        assert result.upstream_builds == (result.last_good + 1, step)


def test_no_step_means_nothing_to_bisect() -> None:
    result = bisect_releases(RELEASES, 100, 131, FakeLab(10**6), progress=lambda _: None)
    assert result.status == "no-regression" and result.first_bad is None
    assert format_result(result)[0] == "no regression from b100 to b131: nothing to bisect"


def test_endpoints_a_busy_machine_cannot_tell_apart_are_inconclusive_not_clean() -> None:
    # sessions drifting 30% (a neighbour on the cores): a real 20% step stays unresolved,
    # which once read "no regression ...: nothing to bisect", exit status 0
    lab = FakeLab(116, drift=0.3, seed=4)
    result = bisect_releases(RELEASES, 100, 131, lab, sessions=2, max_sessions=3,
                             progress=lambda _: None)
    assert result.status == "inconclusive" and result.first_bad is None
    assert format_result(result)[0].startswith("inconclusive from b100 to b131: the endpoints "
                                               "were not told apart at the session limit")


def test_a_release_between_both_levels_gets_more_sessions_not_a_guess() -> None:
    # 110..119 are 10% slower, 120 on 20%: the first midpoint (115) sits between the
    # known good and the known bad level, so no verdict can place it.
    lab = FakeLab(120, partial=(110, 0.10), drift=0.005, cv=0.01)
    result = bisect_releases(RELEASES, 100, 131, lab, sessions=3, max_sessions=6,
                             progress=lambda _: None)
    assert result.status == "undecided"
    assert [s.sessions for s in result.steps] == [3, 4, 5, 6]
    assert {s.number for s in result.steps} == {115}
    assert result.remaining == tuple(RELEASES)
    assert lab.sessions[100] > 3 and lab.sessions[131] > 3  # the references got more too
    assert "undecided" in "\n".join(format_result(result))


class Interrupted(Exception):
    pass


class StoredLab(FakeLab):
    """Sessions persist in ``store`` (like the DB); ``budget`` new ones, then interrupt."""

    def __init__(self, store: dict[int, int], budget: int | None, **kw: object) -> None:
        super().__init__(117, **kw)  # type: ignore[arg-type]
        self.store, self.budget, self.new = store, budget, 0

    def groups(self, number: int, sessions: int) -> Groups:
        while self.store.get(number, 0) < sessions:  # one session at a time, like pytest
            if self.budget is not None and self.new == self.budget:
                raise Interrupted
            self.store[number] = self.store.get(number, 0) + 1
            self.new += 1
        return super().groups(number, sessions)


def test_an_interrupted_bisect_resumes_where_it_stopped() -> None:
    whole = StoredLab({}, None)
    expected = bisect_releases(RELEASES, 100, 131, whole, progress=lambda _: None)
    store: dict[int, int] = {}
    with pytest.raises(Interrupted):
        bisect_releases(RELEASES, 100, 131, StoredLab(store, 10), progress=lambda _: None)
    resumed = StoredLab(store, None)
    result = bisect_releases(RELEASES, 100, 131, resumed, progress=lambda _: None)
    assert result == expected
    assert resumed.new == whole.new - 10


def test_bad_endpoints_are_refused() -> None:
    with pytest.raises(ConfigError, match="--good b131 must be an older release than --bad b100"):
        bisect_releases(RELEASES, 131, 100, FakeLab(110))
    with pytest.raises(ConfigError, match="--good b99 is not among the releases to search"):
        bisect_releases(RELEASES, 99, 131, FakeLab(110))


SELECTION = """
def test_short_prompt(tok_bench):
    tok_bench(prompt_tokens=64, generate_tokens=4)
"""
SESSION_ARGS = ["--tokperf-model", "test", "--tokperf-threads", "1", "--tokperf-repetitions",
                "3", "--tokperf-warmup", "1", "--tokperf-bandwidth", "30GB/s"]


def fake_releases(folder: Path, binary: Path, count: int, slow_from: int) -> Path:
    """``count`` wrapper "releases" around one real llama-server; from ``slow_from`` on
    they force a micro-batch of 1, so the prompt is read a token at a time (TTFT)."""
    folder.mkdir()
    for n in range(1, count + 1):
        extra = " -ub 1" if n >= slow_from else ""
        path = folder / f"llama-server-b{n}"
        path.write_text(f'#!/bin/sh\nexec "{binary}" "$@"{extra}\n')
        path.chmod(0o755)
    return folder


def two_builds(tmp_path: Path, binary: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A session folder in ``tmp_path`` (cwd, with the selection written) and two wrapper
    builds of ``binary``, the second with the slow TTFT of ``fake_releases``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_selection.py").write_text(SELECTION)
    folder = fake_releases(tmp_path / "builds", binary, 2, slow_from=2)
    return str(folder / "llama-server-b1"), str(folder / "llama-server-b2")


PAIRED_ARGS = [*(x if x != "3" else "6" for x in SESSION_ARGS), "--tokperf-ab-budget", "0"]
"""SESSION_ARGS for a paired A/B of 6 pairs from one start (no budget)."""


@pytest.mark.engine
def test_bisect_over_32_fake_releases_finds_the_slowdown(
    server_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_selection.py").write_text(SELECTION)
    folder = fake_releases(tmp_path / "releases", server_binary, 32, slow_from=21)
    db, journal_path = tmp_path / "bisect.db", tmp_path / "bisect.db.builds.jsonl"
    # how a user gets here: compare-builds showed the regression between two releases
    endpoints = [str(folder / "llama-server-b1"), str(folder / "llama-server-b32")]
    assert main(["compare-builds", *endpoints, "--mode", "sessions", "--rounds", "3", "--metric", "ttft", "--db",
                 str(db), "--", "test_selection.py", *SESSION_ARGS]) == 0
    assert "regression" in capsys.readouterr().out
    compared = journal_path.read_text().splitlines()
    args = ["bisect", "--good", "1", "--bad", "32", "--binaries", str(folder), "--metric",
            "ttft", "--db", str(db), "--json", "--", "test_selection.py", *SESSION_ARGS]
    assert main(args) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert (result["status"], result["last_good"], result["first_bad"]) == ("found", 20, 21)
    journal = journal_path.read_text().splitlines()
    # the endpoints' sessions came from compare-builds: the bisect's first session is the
    # first midpoint's (an endpoint is measured again only in a step's rounds)
    new = [json.loads(line)["binary"] for line in journal[len(compared):]]
    ends = {str(Path(e).resolve()) for e in endpoints}
    assert new[0] == str((folder / "llama-server-b16").resolve())
    assert len(set(new) - ends) == result["midpoints"] <= 5
    assert "step: b16" in err  # progress on the terminal throughout
    # the same command again replays from the DB and the journal: nothing new to measure
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == result
    assert journal_path.read_text().splitlines() == journal


class PhaseLab(FakeLab):
    """A ``FakeLab`` on a shared machine: the sessions of ``number`` measured before it
    was consulted ``after`` times more sit in a slow phase (``factor`` on the level), as
    three sessions run back to back can on a runner whose neighbours come and go."""

    def __init__(self, step: int, slow: int, factor: float, sessions: int = 3, **kw: object) -> None:
        super().__init__(step, **kw)  # type: ignore[arg-type]
        self.slow, self.factor, self.slow_sessions = slow, factor, sessions

    def groups(self, number: int, sessions: int) -> Groups:
        out = super().groups(number, sessions)
        if number == self.slow:
            out[DECODE_T] = [[v * self.factor for v in g] if i < self.slow_sessions else g
                             for i, g in enumerate(out[DECODE_T])]
        return out


@pytest.mark.parametrize("factor", [0.9, 0.6])
def test_a_slow_phase_over_a_good_midpoint_is_measured_out_in_rounds(factor: float) -> None:
    # the first midpoint (115) is good, but its three sessions ran in a slow phase: 10%
    # slower reads between both levels, 40% slower reads worse than the bad release
    lab = PhaseLab(120, slow=115, factor=factor, drift=0.005, cv=0.01)
    result = bisect_releases(RELEASES, 100, 131, lab, progress=lambda _: None)
    assert (result.status, result.last_good, result.first_bad) == ("found", 119, 120)
    first = [s for s in result.steps if s.number == 115]
    assert first[0].outcome == "undecided" and first[-1].outcome == "good"
    assert len(first) >= 4  # decided by its rounds: three with both neighbours at least
    assert "paired over 3 ABBA pairs" in first[-1].vs_bad.reason
