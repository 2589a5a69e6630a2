"""The release watch on fakes: builds are files, an A/B session writes a synthetic A/B
document with the levels below, the bisect's sessions come from a fake lab. The judge, the
journal, the bisect and the summary are the real ones."""

from __future__ import annotations

import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.builds.specs import Build, BuildSpec, BuildTimedOut, parse_spec
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.cli.main import main
from pytest_tokperf.errors import ConfigError, EngineError, InstallError
from pytest_tokperf.report.watch import (
    format_markdown,
    format_summary,
    headline,
)
from pytest_tokperf.versions.sessions import Groups, Target
from pytest_tokperf.stats.metric import WINDOW_SD
from pytest_tokperf.stats.shifts import Shift
from pytest_tokperf.versions.windows import HostWindows
from pytest_tokperf.versions.watch import Watch
from pytest_tokperf.versions.watch_journal import WatchJournal, WatchResult
from tests.builds.test_first_minute import cache  # noqa: F401 (a fixture)

REGISTRY = list(range(100, 109))  # b100..b108
WATCHED = [100, 102, 104, 106, 108]  # 5 of them: the bisect has a release between each
SLOW = range(103, 107)  # b103 made decode 30% slower; b107 undid it
WORKLOAD = {"prompt_tokens": 64, "generate_tokens": 24, "depth_tokens": 0, "concurrency": 1,
            "repetitions": 40, "warmup": 1, "cached_prefix_tokens": 0, "chat": False}
DECODE_T = Target("s1", "t.py::test_decode", "decode")


def level(number: int | None) -> float:
    return 0.7 if number in SLOW else 1.0


class Killed(Exception):
    """A kill, raised inside a fake session."""


class Fakes:
    """Builds, A/B sessions and bisect sessions, counted; ``kill_at``: the session
    (1-based, A/B and bisect alike) that raises instead of finishing; ``busy``: the
    (control, candidate) A/Bs measured with a neighbour that slowed the candidate 10%."""

    def __init__(self, root: Path, *, kill_at: int | None = None, fail: tuple[int, ...] = (),
                 busy: tuple[tuple[int, int], ...] = ()) -> None:
        self.root, self.kill_at, self.fail, self.busy = root, kill_at, fail, busy
        self.bin = root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.docs = root / "docs"
        self.docs.mkdir(exist_ok=True)
        self.started = 0
        self.abs: list[tuple[int | None, int | None, int]] = []
        self.lab_sessions: dict[int, int] = {}
        self.builds: list[str] = []

    def _session(self) -> None:
        self.started += 1
        if self.kill_at is not None and self.started == self.kill_at:
            raise Killed(f"killed in session {self.started}")

    def provide(self, spec: BuildSpec) -> Build:
        self.builds.append(spec.key)
        if spec.number in self.fail:
            raise InstallError(f"llama-server {spec.key}: build failed (exit 2): error: "
                               f"'ggml_foo' was not declared; full log: /tmp/{spec.key}.log")
        path = self.bin / f"llama-server-{spec.key}"
        if not path.exists():
            path.write_text(f"#!/bin/sh\n# fake llama-server {spec.key}\n")
            path.chmod(0o755)
        return Build(spec.key, path, spec.number)

    def measure(self, a: Build, b: Build, attempt: int) -> Path:
        self._session()
        busy = (a.number, b.number) in self.busy
        rng = random.Random(f"{a.number}-{b.number}-{attempt}")
        rounds = []
        for _ in range(40):
            phase = math.exp(rng.gauss(0, 0.05))  # the machine's level, the same for both
            base = 30 * level(a.number) * phase * math.exp(rng.gauss(0, 0.01))
            cand = (30 * level(b.number) * phase * math.exp(rng.gauss(0, 0.01))
                    * (0.9 if busy else 1.0))
            rounds.append({"control": [base, 500.0 * phase, 0.2 / phase],
                           "candidate": [cand, 500.0 * phase * math.exp(rng.gauss(0, 0.01)),
                                         0.2 / phase * math.exp(rng.gauss(0, 0.01))]})
        doc = {"ab": [{"test_id": "t.py::test_decode", "workload": WORKLOAD,
                       "metrics": ["decode", "prefill", "ttft"], "rounds": rounds,
                       "busy": busy, "load": "machine: others 1.7 of 2 CPUs, busy" if busy else "",
                       "sequential": 0}]}
        path = self.docs / f"ab-b{a.number}-vs-b{b.number}-{attempt}-{len(self.abs)}.json"
        path.write_text(json.dumps(doc))
        self.abs.append((a.number, b.number, attempt))
        return path

    def lab(self) -> FakeLab:
        return FakeLab(self)

    def between(self, low: int, high: int) -> list[int]:
        return [n for n in REGISTRY if low < n < high]


class FakeLab:
    """The bisect's sessions: decode at each release's level, a little noise; sessions
    persist in ``fakes.lab_sessions`` as the DB and its journal keep them."""

    def __init__(self, fakes: Fakes) -> None:
        self.fakes = fakes

    def groups(self, number: int, sessions: int) -> Groups:
        while self.fakes.lab_sessions.get(number, 0) < sessions:
            self.fakes._session()
            self.fakes.lab_sessions[number] = self.fakes.lab_sessions.get(number, 0) + 1
        out: Groups = {DECODE_T: []}
        for s in range(sessions):
            rng = random.Random(f"lab-{number}-{s}")
            drift = math.exp(rng.gauss(0, 0.01))
            out[DECODE_T].append([30 * level(number) * drift * math.exp(rng.gauss(0, 0.02))
                                  for _ in range(5)])
        return out


def watch(fakes: Fakes, tmp_path: Path, numbers: list[int] = WATCHED, **kw: Any) -> WatchResult:
    w = Watch(WatchJournal(tmp_path / "r.db.watch.jsonl"), tmp_path / "runs" / "watch",
              "sel", provide=fakes.provide, measure=fakes.measure, lab=fakes.lab,
              between=fakes.between, progress=lambda _: None, **{"sleep": lambda _: None, **kw})
    specs = [BuildSpec(f"b{n}", "release", n) for n in numbers]
    return w.run(specs, specs[0])


def verdicts(result: WatchResult) -> list[tuple[str, str, str, bool, str, str]]:
    return [(f.kind, f.before, f.after, f.confirmed, f.last_good, f.first_bad)
            for f in result.flags]


def rows(result: WatchResult) -> list[tuple[str, str, str]]:
    return [(r.label, ab.role, row.verdict) for r in result.releases for ab in r.abs
            for row in ab.rows if row.metric == "decode"]


def test_a_regression_and_its_recovery_are_flagged_confirmed_and_bisected(tmp_path: Path) -> None:
    fakes = Fakes(tmp_path)
    result = watch(fakes, tmp_path)
    assert verdicts(result) == [
        ("regression", "b102", "b104", True, "b102", "b103"),
        ("improvement", "b106", "b108", True, "b106", "b107"),
    ]
    regression, improvement = result.flags
    assert regression.second is not None and regression.second.attempt == 2
    assert regression.upstream == (103, 103)
    assert regression.compare_url == "https://github.com/ggml-org/llama.cpp/compare/b102...b103"
    assert improvement.compare_url.endswith("/compare/b106...b107")
    assert "bisected over 1 release(s) between" in regression.note
    # against the reference: b104 and b106 slower; b102 and b108 not flagged (one server
    # start a side is never called "unchanged" at 2%: a start may carry 1% of its own)
    ref = {r.label: r.vs_reference.rows[0].verdict for r in result.releases if r.vs_reference}
    assert ref == {"b102": "inconclusive", "b104": "regression", "b106": "regression",
                   "b108": "inconclusive"}
    # 4 against the reference, 2 more against a predecessor (b102's is the reference
    # A/B), 2 confirmations; the bisect: both endpoints and the midpoint, 3 sessions each
    assert len(fakes.abs) == len(set(fakes.abs)) == 4 + 3 + 2
    assert fakes.lab_sessions == {102: 3, 103: 3, 104: 3, 106: 3, 107: 3, 108: 3}
    assert result.measured == 9 and result.reused == 0
    text = "\n".join(format_summary(result))
    assert text.splitlines()[0].startswith(
        "watch of 5 builds against b100: 2 step(s) flagged and named (regression at b103, "
        "improvement at b107), 0 skipped, no A/B measured busy;")
    assert "REGRESSION: b102 -> b104: decode regression −30.0%" in text
    assert ("first bad release: b103 (last good: b102); llama.cpp builds b103: "
            "https://github.com/ggml-org/llama.cpp/compare/b102...b103") in text
    assert "first improved release: b107 (last unimproved: b106)" in text
    assert "| b104 |" in format_markdown(result)
    summary = json.loads((tmp_path / "runs" / "watch" / "summary.json").read_text())
    assert [f["first_bad"] for f in summary["named"]] == ["b103", "b107"]
    # the same watch again: everything from the journal, nothing measured
    again = Fakes(tmp_path)
    replay = watch(again, tmp_path)
    assert (again.abs, again.builds, again.lab_sessions) == ([], [], {})
    assert verdicts(replay) == verdicts(result) and rows(replay) == rows(result)
    assert replay.measured == 0 and replay.reused == 9


def test_a_killed_watch_resumes_with_the_same_verdicts_measuring_nothing_twice(
        tmp_path: Path) -> None:
    whole = Fakes(tmp_path / "whole")
    expected = watch(whole, tmp_path / "whole")
    sessions = whole.started
    assert sessions == 9 + 18  # the A/Bs and the bisects' sessions
    for kill_at in range(1, sessions + 1):  # a kill inside each session in turn
        here = tmp_path / f"kill-{kill_at}"
        fakes = Fakes(here, kill_at=kill_at)
        with pytest.raises(Killed):
            watch(fakes, here)
        assert fakes.started == kill_at
        fakes.kill_at = None  # the same command again, the DB and journal as they were
        done_before = list(fakes.abs)
        result = watch(fakes, here)
        assert verdicts(result) == verdicts(expected), kill_at
        assert rows(result) == rows(expected), kill_at
        assert sorted(fakes.abs) == sorted(whole.abs), kill_at  # every A/B once
        assert fakes.lab_sessions == whole.lab_sessions, kill_at
        assert fakes.started == sessions + 1, kill_at  # only the killed one ran twice
        assert result.reused == len(done_before)


def test_a_build_that_fails_is_skipped_and_said_so(tmp_path: Path) -> None:
    fakes = Fakes(tmp_path, fail=(104,))
    result = watch(fakes, tmp_path)
    skipped = {r.label: r.skipped for r in result.releases if r.skipped}
    assert list(skipped) == ["b104"]
    assert skipped["b104"].startswith("build failed: llama-server b104: build failed (exit 2)")
    b106 = next(r for r in result.releases if r.label == "b106")
    assert b106.predecessor == "b102"  # the last build that built
    assert verdicts(result)[0][:3] == ("regression", "b102", "b106")
    text = "\n".join(format_summary(result))
    assert "1 skipped" in text.splitlines()[0]
    assert "skipped: b104 (build failed: llama-server b104: build failed" in text
    # again: the failure is journalled, not built again unless asked
    again = Fakes(tmp_path, fail=(104,))
    watch(again, tmp_path)
    assert again.builds == []
    watch(again, tmp_path, retry_failed=True)
    assert again.builds == ["b104"]


def test_a_timed_out_build_is_skipped_as_such(tmp_path: Path) -> None:
    fakes = Fakes(tmp_path)

    def slow(spec: BuildSpec) -> Build:
        if spec.number == 106:
            raise BuildTimedOut("building b106 took longer than 60 s and was stopped; give "
                                "more with --build-timeout")
        return fakes.provide(spec)

    w = Watch(WatchJournal(tmp_path / "j.jsonl"), tmp_path / "w", "sel", provide=slow,
              measure=fakes.measure, progress=lambda _: None, sleep=lambda _: None)
    specs = [BuildSpec(f"b{n}", "release", n) for n in (100, 102, 106)]
    result = w.run(specs, specs[0])
    assert [r.skipped for r in result.releases] == [
        "", "", "build timed out: building b106 took longer than 60 s and was stopped; give "
        "more with --build-timeout"]
    assert "b106 (build timed out" in "\n".join(format_summary(result))


def test_a_busy_ab_is_reported_not_flagged(tmp_path: Path) -> None:
    # b104 -> b106 is measured with a neighbour that slows b106 by 10%: busy, not a flag
    fakes = Fakes(tmp_path, busy=((104, 106),))
    result = watch(fakes, tmp_path)
    assert [(f.before, f.after) for f in result.flags] == [("b102", "b104"), ("b106", "b108")]
    step = next(r for r in result.releases if r.label == "b106").vs_predecessor
    assert step is not None and step.busy.startswith("session 1: machine: others 1.7")
    assert step.rows[0].verdict == "regression"  # the figures are the figures
    assert len(result.busy) == 1
    assert result.busy[0].startswith("b106 vs b104 (predecessor): decode regression −")
    assert result.busy[0].endswith("measured busy (session 1: machine: others 1.7 of 2 CPUs, "
                                   "busy): not a flag")
    text = "\n".join(format_summary(result))
    assert "busy, not a flag: b106 vs b104 (predecessor)" in text
    assert ", 1 of 9 A/Bs measured busy, 1 change(s) not a flag;" in text.splitlines()[0]
    assert "decode regression" in text and "(busy)" in text
    # --busy judge: its figures flag it
    judged = watch(Fakes(tmp_path / "judge", busy=((104, 106),)), tmp_path / "judge",
                   busy=BusyPolicy("judge"))
    assert ("b104", "b106") in [(f.before, f.after) for f in judged.flags]


class BusyOnce(Fakes):
    """The first A/B of each ``busy`` pair ran beside a neighbour; later ones are quiet."""

    def measure(self, a: Build, b: Build, attempt: int) -> Path:
        pair = (a.number, b.number)
        first = pair in self.busy and not any((x, y) == pair for x, y, _ in self.abs)
        busy, self.busy = self.busy, ((pair,) if first else ())
        try:
            return super().measure(a, b, attempt)
        finally:
            self.busy = busy


def test_a_busy_ab_is_measured_again_after_a_quiet_window(tmp_path: Path) -> None:
    waits: list[float] = []
    fakes = BusyOnce(tmp_path, busy=((104, 106),))
    lines: list[str] = []
    w = Watch(WatchJournal(tmp_path / "r.db.watch.jsonl"), tmp_path / "runs" / "watch", "sel",
              provide=fakes.provide, measure=fakes.measure, lab=fakes.lab,
              between=fakes.between, progress=lines.append, busy=BusyPolicy("skip", 90.0),
              wait_quiet=lambda budget: waits.append(budget) or 12.0, sleep=lambda _: None)
    specs = [BuildSpec(f"b{n}", "release", n) for n in WATCHED]
    result = w.run(specs, specs[0])
    # measured twice, the quiet one stands: the busy slowdown is gone, so no flag and
    # nothing reported busy
    assert fakes.abs.count((104, 106, 1)) == 2 and waits == [90.0]
    step = next(r for r in result.releases if r.label == "b106").vs_predecessor
    assert step is not None and not step.busy and step.busy_first != step.document
    assert json.loads(Path(step.busy_first).read_text())["ab"][0]["busy"] is True
    assert [(f.before, f.after) for f in result.flags] == [("b102", "b104"), ("b106", "b108")]
    assert result.busy == () and result.measured_again == 1
    assert "no A/B measured busy (1 measured again after a quiet window)" in headline(result)
    assert ("A/B b104 -> b106 measured busy (machine: others 1.7 of 2 CPUs, busy): waiting "
            "up to 90 s for a quiet window to measure it again (--busy-wait)") in lines
    assert "quiet after 12 s: measuring A/B b104 -> b106 again" in lines
    # the journal keeps the one that stands, and where the busy one is
    replay = watch(fakes, tmp_path)
    again = next(r for r in replay.releases if r.label == "b106").vs_predecessor
    assert again is not None and not again.measured and again.busy_first == step.busy_first
    assert fakes.abs.count((104, 106, 1)) == 2


def test_a_busy_ab_stands_when_no_quiet_window_comes(tmp_path: Path) -> None:
    fakes = Fakes(tmp_path, busy=((104, 106),))
    result = watch(fakes, tmp_path, busy=BusyPolicy("skip", 30.0), wait_quiet=lambda budget: None)
    assert fakes.abs.count((104, 106, 1)) == 1 and result.measured_again == 0
    assert len(result.busy) == 1 and result.busy[0].startswith("b106 vs b104 (predecessor)")
    # --busy judge: its figures count, so it is never measured again
    judged = Fakes(tmp_path / "judge", busy=((104, 106),))
    watch(judged, tmp_path / "judge", busy=BusyPolicy("judge", 30.0),
          wait_quiet=lambda budget: pytest.fail("--busy judge waited"))
    assert judged.abs.count((104, 106, 1)) == 1


def test_an_unconfirmed_flag_is_not_named(tmp_path: Path) -> None:
    # the first A/B of b102 -> b104 ran beside a neighbour it did not see; the second is clean
    class Flaky(Fakes):
        def measure(self, a: Build, b: Build, attempt: int) -> Path:
            path = super().measure(a, b, attempt)
            if (a.number, b.number, attempt) == (102, 104, 1):
                doc = json.loads(path.read_text())
                for row in doc["ab"][0]["rounds"]:
                    row["candidate"][0] *= 0.9
                path.write_text(json.dumps(doc))
            return path

    global SLOW
    saved, SLOW = SLOW, range(0)
    try:
        result = watch(Flaky(tmp_path), tmp_path)
    finally:
        SLOW = saved
    assert verdicts(result) == [("regression", "b102", "b104", False, "b102", "b104")]
    assert result.named == ()
    # -10% in the first window, none in the second: pooled, each window allowed 2.5%
    assert result.flags[0].note == (
        "not confirmed: both windows pooled read no change: decode inconclusive −5.1% over "
        "both, a window allowed the default 2.5%")
    assert "regression (not confirmed): b102 -> b104" in "\n".join(format_summary(result))


def test_build_specs_are_one_code_path(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    tree = tmp_path / "llama.cpp"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text("project(\"llama.cpp\" C CXX)\n")
    assert parse_spec("b10429").key == parse_spec("10429.0.0").key == "b10429"
    assert parse_spec(str(binary)).kind == "binary"
    assert parse_spec(str(tree)) == BuildSpec(str(tree), "tree", path=tree.resolve())
    (tmp_path / "other").mkdir()
    with pytest.raises(ConfigError, match="is a folder but not a llama.cpp source tree"):
        parse_spec(str(tmp_path / "other"))
    with pytest.raises(ConfigError, match="is neither a llama-server binary, a llama.cpp "
                       "source tree nor a release number"):
        parse_spec("./nope/llama-server")
    binary.chmod(0o644)
    with pytest.raises(ConfigError, match="is not executable"):
        parse_spec(str(binary))


def _fake_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fakes:
    """The CLI's A/B sessions replaced by the fake's (binaries named b<N> by file name)."""
    import re

    from pytest_tokperf.versions import paired
    from pytest_tokperf.versions import watch as watch_module

    fakes = Fakes(tmp_path / "fake")

    def number(build: Build) -> int:
        if build.number is not None:
            return build.number
        found = re.search(r"b(\d+)", build.binary.name)
        return int(found.group(1)) if found else 100

    def session(runner: Any, a: Build, b: Build, attempt: int) -> Path:
        return fakes.measure(Build(a.label, a.binary, number(a)), Build(b.label, b.binary, number(b)),
                             attempt)

    monkeypatch.setattr(watch_module, "run_paired_session", session)
    monkeypatch.setattr(paired, "run_paired_session", session)
    return fakes


def test_the_verb_watches_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    fakes = _fake_session(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    bins = []
    for n in (100, 104, 108):
        path = tmp_path / "builds" / f"llama-server-b{n}"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"#!/bin/sh\n# {n}\n")
        path.chmod(0o755)
        bins.append(str(path))
    summary = tmp_path / "summary.md"
    args = ["watch", *bins, "--db", str(tmp_path / "w.db"), "--markdown", str(summary),
            "--progress", "lines", "--confirm-gap", "0"]
    assert main([*args, "--fail", "--", "t.py"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("watch of 3 builds against ")
    assert f"REGRESSION: {bins[0]} -> {bins[1]}" in out
    assert "IMPROVEMENT" in out and "compare/" not in out  # binaries name no release span
    assert "tokperf: watch: 1 of 3 builds" in err  # progress with the time left
    assert "about" in err and "left" in err
    assert "### tokperf watch:" in summary.read_text()
    assert (tmp_path / "w.db.watch.jsonl").is_file()
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("watch-llama-server-b100-llama-server-b108-")
    # again, as JSON: nothing measured
    measured = len(fakes.abs)
    assert main([*args, "--json", "--", "t.py"]) == 0
    replayed = capsys.readouterr()
    data = json.loads(replayed.out)
    assert (data["measured"], data["reused"]) == (0, measured)
    assert [f["kind"] for f in data["named"]] == ["regression", "improvement"]
    # a replay tells no pace: no "N of 3 builds, 0 s elapsed" line per replayed build
    assert "tokperf: watch: 1 of 3 builds" not in replayed.err
    assert "from the journal" in replayed.err


def test_the_verb_goes_on_since_the_last_release_watched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.builds.releases import Release, ReleaseIndex
    from pytest_tokperf.builds.specs import Builder

    fakes = _fake_session(tmp_path, monkeypatch)
    registry = ReleaseIndex(tuple(Release(n, f"{n}.0.0") for n in REGISTRY), "test")
    monkeypatch.setattr(Builder, "index", lambda self: registry)
    monkeypatch.setattr(Builder, "release",
                        lambda self, n: fakes.provide(BuildSpec(f"b{n}", "release", n)))
    monkeypatch.chdir(tmp_path)
    db = ["--db", str(tmp_path / "w.db"), "--json", "--confirm-gap", "0", "--", "t.py"]
    assert main(["watch", "--since-last", *db]) == 2
    assert "give --from N (the first release to watch): " in capsys.readouterr().err
    assert main(["watch", "--since-last", "--from", "100", "--to", "103", *db]) == 0
    first = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in first["releases"]] == ["b100", "b101", "b102", "b103"]
    assert [(f["kind"], f["first_bad"]) for f in first["named"]] == [("regression", "b103")]
    before = list(fakes.abs)
    assert main(["watch", "--since-last", *db]) == 0
    then = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in then["releases"]] == [f"b{n}" for n in range(103, 109)]
    assert then["reference"] == "b100"
    assert [(f["kind"], f["first_bad"]) for f in then["named"]] == [("improvement", "b107")]
    new = fakes.abs[len(before):]
    assert (100, 103, 1) not in new and len(new) == len(set(new))  # b103's A/Bs: reused
    assert main(["watch", "--since-last", *db]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "nothing-new"


def test_bad_watch_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = ["--db", str(tmp_path / "w.db")]
    assert main(["watch", *db, "--", "t.py"]) == 2
    assert "nothing to watch: give builds" in capsys.readouterr().err
    assert main(["watch", "100", "--from", "100", *db, "--", "t.py"]) == 2
    assert "beside --from/--to/--since-last: give the builds one way" in capsys.readouterr().err
    assert main(["watch", "100", "101", "--build-timeout", "0", *db, "--", "t.py"]) == 2
    assert "--build-timeout 0.0: give seconds above 0" in capsys.readouterr().err
    for wait in ("-1", "nan"):
        assert main(["watch", "100", "101", "--busy-wait", wait, *db, "--", "t.py"]) == 2
        assert f"--busy-wait {float(wait)!r}: give seconds, 0 or more" in capsys.readouterr().err
    assert not (tmp_path / "w.db").exists()


FAKE_CMAKE = """#!/bin/sh
# configure: make the build folder; build: leave a llama-server that names the folder it
# really builds in, behind the fixed path (so each build differs), or with that folder
# matching $FAKE_CMAKE_HANG, hang
if [ "$1" = "--build" ]; then
  echo "[ 10%] Building C object ggml/src/ggml.c.o"
  real=$(cd "$2" && pwd -P)
  case "$real" in *"${FAKE_CMAKE_HANG:-no hang}"*)
    echo $$ > "$FAKE_CMAKE_PID"; while true; do sleep 0.1; done;;
  esac
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\n# %s\\necho "version: 0.5.0-dev (build 1, commit pypi-sdist)"\\n' "$real" \\
    > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
  echo "[100%] Built target llama-server"
else
  for a in "$@"; do case "$a" in -B) next=1;; *) [ -n "$next" ] && mkdir -p "$a" && next=;; esac; done
fi
exit 0
"""


@pytest.fixture
def fake_cmake(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Path:
    """test_first_minute's cache (sdists of b11269, b11292, b11434, a fresh registry list),
    with a cmake whose builds differ and one of which can hang."""
    request.getfixturevalue("cache")
    cmake = Path(os.environ["PATH"].split(os.pathsep)[0]) / "cmake"
    cmake.write_text(FAKE_CMAKE)
    monkeypatch.setenv("FAKE_CMAKE_PID", str(tmp_path / "cmake.pid"))
    return cmake


def _pid_gone(pid: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def test_the_watch_builds_releases_in_a_child_and_stops_one_at_its_time_limit(
        fake_cmake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fakes = _fake_session(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_CMAKE_HANG", "b11434")
    monkeypatch.chdir(tmp_path)
    assert main(["watch", "11269", "11292", "11434", "--build-timeout", "5", "--no-ccache",
                 "--db", str(tmp_path / "w.db"), "--json", "--progress", "lines",
                 "--", "t.py"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [(r["label"], r["build"]["outcome"]) for r in data["releases"]] == [
        ("b11269", "built"), ("b11292", "built"), ("b11434", "timed-out")]
    assert data["releases"][2]["skipped"] == (
        "build timed out: building b11434 took longer than 5 s and was stopped; give more "
        "with --build-timeout")
    assert "llama-server b11292: build" in err  # the child's progress, passed on
    assert fakes.abs == [(11269, 11292, 1)]
    assert _pid_gone(int((tmp_path / "cmake.pid").read_text())), "the hung cmake was left running"


def test_a_source_tree_is_a_build_for_compare_builds_and_the_watch(
        fake_cmake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.builds.specs import Builder, BuildOptions

    tree = tmp_path / "llama.cpp"
    (tree / "tools" / "server").mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text('project("llama.cpp" C CXX)\n')
    built = Builder(BuildOptions(use_ccache=False), progress=lambda _: None)(str(tree))
    assert built.label.startswith("llama.cpp@files-") and built.binary.name == "llama-server"
    assert tree not in built.binary.parents  # built in the cache, never inside the tree
    in_child = Builder(BuildOptions(use_ccache=False, timeout_s=60), progress=lambda _: None)
    assert in_child(str(tree)) == built  # the same folder, built again incrementally

    _fake_session(tmp_path, monkeypatch)
    other = tmp_path / "llama-server-b100"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert main(["compare-builds", str(other), str(tree), "--no-ccache", "--json",
                 "--db", str(tmp_path / "c.db"), "--", "t.py"]) == 0
    assert json.loads(capsys.readouterr().out)["b"] == built.label


def test_a_flag_is_confirmed_in_another_window(tmp_path: Path) -> None:
    # b104's flag is measured again only after b106's A/B (other work); b108's, the last,
    # after waiting for the gap, then pooled with the first window and learnt by the host
    fakes = Fakes(tmp_path)
    waits: list[float] = []
    host = HostWindows(tmp_path / "windows.jsonl", "here")
    result = watch(fakes, tmp_path, sleep=waits.append, confirm_gap=300.0, windows=host)
    order = [(a, b, n) for a, b, n in fakes.abs if a != 100]
    assert order.index((102, 104, 2)) > order.index((104, 106, 1))
    assert order[-1] == (106, 108, 2) and len(waits) == 1 and 0 < waits[0] <= 300.0
    assert [f.note.split(":")[0] for f in result.flags] == ["confirmed in a second window"] * 2
    assert "decode regression" in result.flags[0].note and "the default 2.5%" in result.flags[0].note
    assert len(host.records()) == 2


def test_the_hosts_window_level_is_learnt_from_pairs_measured_twice(tmp_path: Path) -> None:
    host = HostWindows(tmp_path / "w.jsonl", "here")
    assert host.level()[0] == WINDOW_SD  # nothing learnt yet: the default
    rng = random.Random(3)
    for i in range(40):  # windows 3% apart (SD), each estimate known to 0.5%
        level = 0.03 / math.sqrt(2)
        one, two = (Shift(rng.gauss(0, level) + rng.gauss(0, 0.005), 0.005, 20, 40, 40,
                          "pooled", 0.05) for _ in range(2))
        host.add(f"pair {i}", one, two)
    HostWindows(tmp_path / "w.jsonl", "elsewhere").add("x", one, two)  # another host's
    level, how = host.level()
    assert 0.015 < level < 0.03 and "from 40 pairs measured in two windows" in how
    assert len(host.records()) == 40


def test_a_confirmation_that_fails_leaves_the_flag_unconfirmed(tmp_path: Path) -> None:
    class Dies(Fakes):
        def measure(self, a: Build, b: Build, attempt: int) -> Path:
            if attempt == 2:
                raise EngineError("llama-server did not come up")
            return super().measure(a, b, attempt)

    result = watch(Dies(tmp_path), tmp_path)
    assert result.flags and not any(f.confirmed for f in result.flags)
    assert result.named == ()
    assert result.flags[0].note == ("not confirmed: the second A/B failed: llama-server did "
                                    "not come up")
