"""compare-builds: sessions as the unit, the judge's verdict beside the ratio of means,
the journal, and a real interleaved comparison of two wrapper builds of llama-server."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_tokperf.builds.specs import Build
from pytest_tokperf.cli.main import main
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.errors import ConfigError, EngineError
from pytest_tokperf.versions.sessions import (
    BuildRunner,
    Journal,
    Session,
    Target,
    compare_groups,
    selection_key,
    session_medians,
)
from tests.versions.test_bisect import SESSION_ARGS, two_builds

DECODE_T = Target("s1", "test_decode", "decode")
TTFT_T = Target("s1", "test_decode", "ttft")


def test_each_session_counts_once_by_its_median() -> None:
    assert session_medians([[1.0, 2.0, 9.0], [4.0], []]) == [2.0, 4.0]


def test_verdict_beside_a_robust_ratio() -> None:
    a = {DECODE_T: [[30.0, 30.3, 29.8], [30.5, 30.1, 30.2], [29.9, 30.0, 30.4]],
         TTFT_T: [[0.30, 0.31, 0.301], [0.29, 0.299, 0.31], [0.30, 0.302, 0.29]]}
    b = {DECODE_T: [[24.0, 24.2, 23.9], [24.4, 24.1, 24.0], [23.8, 24.1, 24.3]],
         TTFT_T: [[0.30, 0.302, 0.31], [0.31, 0.29, 0.298], [0.30, 0.31, 0.301]]}
    # (session medians that differ a little: identical ones carry no spread, and a judge
    # that cannot see the noise says inconclusive)
    found = {f.target: f for f in compare_groups(a, b)}
    decode, ttft = found[DECODE_T], found[TTFT_T]
    assert decode.comparison.verdict == "regression"
    assert decode.ratio == pytest.approx(24.1 / 30.0, rel=1e-9)  # medians of session medians
    assert decode.mean_b / decode.mean_a == pytest.approx(24.089 / 30.133, rel=1e-3)
    assert (decode.sessions_a, decode.n_a, decode.comparison.n_baseline) == (3, 9, 9)
    assert decode.comparison.shift is not None and decode.comparison.shift.versions == 3
    assert ttft.comparison.verdict == "unchanged" and ttft.ratio == pytest.approx(1.0, abs=0.02)


def test_two_sessions_a_side_are_too_few_to_judge() -> None:
    found = compare_groups({DECODE_T: [[30.0], [30.1]]}, {DECODE_T: [[20.0], [20.1]]})
    assert found[0].comparison.verdict == "inconclusive"


def test_no_common_test_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no test has results on both builds"):
        compare_groups({DECODE_T: [[1.0]]}, {TTFT_T: [[1.0]]})


def test_runner_chooses_build_db_and_engine_itself(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'--tokperf-db=x.db' in the pytest arguments: the "
                       r"build, the results DB and the engine are chosen per session here"):
        BuildRunner(tmp_path / "r.db", ["tests", "--tokperf-db=x.db"])
    with pytest.raises(ConfigError, match="--tokperf-server-bin"):
        BuildRunner(tmp_path / "r.db", ["--tokperf-server-bin", "x"])
    runner = BuildRunner(tmp_path / "r.db", ["t.py"], python="py")
    cmd = runner.command(Build("b1", Path("/x/llama-server")))
    assert cmd[:4] == ["py", "-m", "pytest", "t.py"]
    assert "--tokperf-server-bin=/x/llama-server" in cmd and f"--tokperf-db={tmp_path / 'r.db'}" in cmd


def test_journal_matches_build_binary_and_selection(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "r.db")
    build = Build("b1", Path("/x/a"))
    key = selection_key(["t.py"], ["decode"])
    assert key != selection_key(["t.py", "-k", "x"], ["decode"])
    journal.add(Session("b1", key, ("run-1",), "/x/a", 0, 1.0, "t"))
    journal.add(Session("b1", key, ("run-2",), "/x/other", 0, 1.0, "t"))
    with open(journal.path, "a") as out:
        out.write('{"build": "b1", "selec')  # cut short by an interruption
    assert [s.run_ids for s in journal.sessions(build, key)] == [("run-1",)]
    assert journal.sessions(build, selection_key(["t.py"], ["ttft"])) == []


def test_journal_knows_a_binary_by_its_content(tmp_path: Path) -> None:
    """compare-builds (label: the path given) and bisect (label: b<N>) share the sessions
    of one file; the same path rebuilt is a new binary with no sessions yet."""
    binary = tmp_path / "llama-server-b7"
    binary.write_bytes(b"build one")
    journal = Journal(tmp_path / "r.db")
    key = selection_key(["t.py"], ["decode"])
    journal.add(Session(str(binary), key, ("run-1",), str(binary), 0, 1.0, "t",
                        journal.digest(binary)))
    assert [s.run_ids for s in journal.sessions(Build("b7", binary, 7), key)] == [("run-1",)]
    binary.write_bytes(b"build two, rebuilt in place")
    assert Journal(tmp_path / "r.db").sessions(Build("b7", binary, 7), key) == []
    with pytest.raises(ConfigError, match="cannot be read"):
        journal.digest(tmp_path / "gone")


@pytest.mark.engine
def test_compare_two_builds_interleaved(server_binary: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_builds(tmp_path, server_binary, monkeypatch)
    args = ["compare-builds", a, b, "--mode", "sessions", "--db", str(tmp_path / "c.db"), "--",
            "test_selection.py", *SESSION_ARGS]
    assert main([*args[:7], "--json", *args[7:]]) == 0
    found = {(f["target"]["metric"]): f for f in json.loads(capsys.readouterr().out)}
    assert found["ttft"]["comparison"]["verdict"] == "regression"
    assert found["ttft"]["ratio"] > 1.3  # a micro-batch of 1 reads the prompt token by token
    assert (found["ttft"]["sessions_a"], found["ttft"]["sessions_b"]) == (5, 5)
    journal = (tmp_path / "c.db.builds.jsonl").read_text().splitlines()
    assert [json.loads(line)["build"] for line in journal] == [a, b] * 5
    # again: the journalled sessions are reused, the table printed
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "B/A" in out and "regression" in out
    assert (tmp_path / "c.db.builds.jsonl").read_text().splitlines() == journal


class _BusyRunner(BuildRunner):
    """A runner whose sessions are made up: the first ``busy`` of them read busy."""

    def __init__(self, tmp_path: Path, policy: BusyPolicy, busy: int) -> None:
        super().__init__(tmp_path / "r.db", ["t.py"], progress=lambda _: None, busy=policy)
        self.made, self.left_busy = 0, busy

    def _session(self, build: Build, number: int, expected_s: float | None) -> Session:
        self.made += 1
        return Session(build.label, self.selection, (f"run-{self.made}",), str(build.binary),
                       0, 1.0, "2026-01-01T00:00:00Z", self.journal.digest(build.binary))

    def _busy_in(self, run_ids: Sequence[str]) -> str:
        self.left_busy -= 1
        return "machine: others 1.8 of 2 CPUs, busy" if self.left_busy >= 0 else ""


@pytest.mark.parametrize(("policy", "quiet_after", "made", "busy"), [
    (BusyPolicy("skip", 60.0), 5.0, 2, ""),  # measured again in a quiet window
    (BusyPolicy("skip", 60.0), None, 1, "busy"),  # no quiet window: it stands, noted
    (BusyPolicy("skip", 0.0), 5.0, 1, "busy"),  # never waits
    (BusyPolicy("judge", 60.0), 5.0, 1, "busy"),  # its figures count: no wait
])
def test_a_session_measured_busy_follows_the_busy_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: BusyPolicy,
    quiet_after: float | None, made: int, busy: str,
) -> None:
    from pytest_tokperf.hardware import load

    waits: list[float] = []
    monkeypatch.setattr(load, "wait_for_quiet", lambda s: waits.append(s) or quiet_after)
    runner = _BusyRunner(tmp_path, policy, busy=1)
    build = Build("b1", tmp_path / "llama-server")
    build.binary.write_text("#!/bin/sh\n")
    session = runner.run_session(build, 1)
    assert runner.made == made and (busy in session.busy if busy else session.busy == "")
    assert waits == ([60.0] if policy.waits_s else [])
    assert [s.run_ids for s in runner.journal.sessions(build, runner.selection)] == \
        [session.run_ids]  # only the session that stands is journalled


def test_busy_fail_stops_at_a_session_measured_busy(tmp_path: Path) -> None:
    runner = _BusyRunner(tmp_path, BusyPolicy("fail"), busy=1)
    (tmp_path / "llama-server").write_text("#!/bin/sh\n")
    with pytest.raises(EngineError, match=r"^b1: session 1 was measured busy \(machine: "
                                          r"others 1.8 of 2 CPUs, busy\) and --busy fail"):
        runner.run_session(Build("b1", tmp_path / "llama-server"), 1)
