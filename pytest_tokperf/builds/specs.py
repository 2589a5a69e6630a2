"""What a build is, for every verb that takes one: a registry release, a llama-server
binary, or a local llama.cpp source tree.

``parse_spec`` reads what the user wrote; a ``Builder`` turns it into a ``Build``:
a release is built (or found) by ``install``, a tree by ``source_tree``, a binary is used
as it is. With a time limit a build runs in a child process whose whole process group is
ended when the limit passes (``BuildTimedOut``), so a compile cannot hold a watch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_tokperf.builds.releases import ReleaseIndex, release_number
from pytest_tokperf.builds.source_tree import is_source_tree
from pytest_tokperf.errors import ConfigError, InstallError
from pytest_tokperf.results import Progress

Kind = Literal["release", "binary", "tree"]


@dataclass(frozen=True, slots=True)
class Build:
    """A llama-server binary to measure and the name results are grouped under."""

    label: str
    binary: Path
    number: int | None = None
    """The release's llama.cpp build number, when it is a registry release."""


class BuildTimedOut(InstallError):
    """A build ran past its time limit and was stopped."""


@dataclass(frozen=True, slots=True)
class BuildSpec:
    """A build as the user named it."""

    text: str
    kind: Kind
    number: int | None = None
    path: Path | None = None

    @property
    def key(self) -> str:
        """The same build however it was written: ``b11292``, or the resolved path."""
        return f"b{self.number}" if self.kind == "release" else str(self.path)


def parse_spec(text: str) -> BuildSpec:
    """``11292``/``b11292``/``11292.0.0``, a llama-server binary, or a source tree."""
    path = Path(text).expanduser()
    if path.is_file():
        if not os.access(path, os.X_OK):
            raise ConfigError(f"{text!r} is not executable: chmod +x it or name a release")
        return BuildSpec(text, "binary", path=path.resolve())
    if path.is_dir():
        if not is_source_tree(path):
            raise ConfigError(f"{text!r} is a folder but not a llama.cpp source tree (no "
                              f"llama.cpp CMakeLists.txt in it): give a llama-server binary, "
                              f"a source tree or a release number")
        return BuildSpec(text, "tree", path=path.resolve())
    if re.fullmatch(r"\s*b?\d+(?:\.\d+\.\d+)?\s*", text):
        return BuildSpec(text, "release", number=release_number(text))
    raise ConfigError(f"{text!r} is neither a llama-server binary, a llama.cpp source tree "
                      f"nor a release number (11292, b11292)")


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """How releases and trees are compiled; ``timeout_s``: the most one build may take."""

    jobs: int | None = None
    use_ccache: bool = True
    nice: int = 0
    timeout_s: float | None = None


class Builder:
    """Builds for specs: releases from the registry, trees with cmake, binaries as given."""

    def __init__(self, options: BuildOptions = BuildOptions(), progress: Progress = print,
                 index: Callable[[], ReleaseIndex] | None = None) -> None:
        self.options = options
        self.progress = progress
        self._index_of = index
        self._index: ReleaseIndex | None = None

    def index(self) -> ReleaseIndex:
        if self._index is None:
            if self._index_of is not None:
                self._index = self._index_of()
            else:
                from pytest_tokperf.builds.releases import release_index
                from pytest_tokperf.paths import cache_root

                self._index = release_index(cache_root())
        return self._index

    def __call__(self, spec: str | BuildSpec) -> Build:
        parsed = parse_spec(spec) if isinstance(spec, str) else spec
        if parsed.kind == "binary":
            assert parsed.path is not None
            return Build(parsed.text, parsed.path)
        if parsed.kind == "tree":
            assert parsed.path is not None
            return self.tree(parsed.path)
        assert parsed.number is not None
        return self.release(parsed.number)

    def release(self, number: int) -> Build:
        """Release ``number``'s llama-server, built when not cached."""
        if self.options.timeout_s is not None:
            return self._in_child(["release", str(number)], f"b{number}")
        from pytest_tokperf.builds.install import install_llama_server

        o = self.options
        installed = install_llama_server(number, jobs=o.jobs, progress=self.progress,
                                         use_ccache=o.use_ccache, nice=o.nice,
                                         index=self.index())
        return Build(f"b{number}", installed.binary, number)

    def tree(self, path: Path) -> Build:
        """The source tree's llama-server, (re)built."""
        if self.options.timeout_s is not None:
            return self._in_child(["tree", str(path)], str(path))
        from pytest_tokperf.builds.source_tree import build_tree

        o = self.options
        built = build_tree(path, jobs=o.jobs, progress=self.progress, use_ccache=o.use_ccache,
                           nice=o.nice)
        return Build(built.label, built.binary)

    def _in_child(self, what: list[str], name: str) -> Build:
        """The same build in a child process, its process group ended at the time limit."""
        o = self.options
        assert o.timeout_s is not None
        if what[0] == "release":
            self.index().get(int(what[1]))  # an unknown release: refused here, not in a child
        command = [sys.executable, "-m", "pytest_tokperf.builds.specs", *what,
                   json.dumps({"jobs": o.jobs, "use_ccache": o.use_ccache, "nice": o.nice})]
        fired = threading.Event()
        result: dict[str, object] = {}
        error = ""
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", start_new_session=True) as proc:

            def stop() -> None:
                fired.set()
                _stop_group(proc)

            timer = threading.Timer(o.timeout_s, stop)
            timer.daemon = True
            timer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    line = line.rstrip("\n")
                    if line.startswith(_RESULT):
                        result = json.loads(line[len(_RESULT):])
                    elif line.startswith(_ERROR):
                        error = line[len(_ERROR):]
                    elif line:
                        self.progress(line)
                code = proc.wait()
            except BaseException:
                _stop_group(proc)
                raise
            finally:
                timer.cancel()
        if fired.is_set() and not result:
            raise BuildTimedOut(f"building {name} took longer than {o.timeout_s:g} s and was "
                                f"stopped; give more with --build-timeout")
        if code == 2:
            raise ConfigError(error or f"building {name}: exit 2")
        if code != 0 or not result:
            raise InstallError(error or f"building {name} failed (exit {code})")
        number = result.get("number")
        return Build(str(result["label"]), Path(str(result["binary"])),
                     int(number) if isinstance(number, int) else None)


_RESULT = "tokperf-build-result: "
_ERROR = "tokperf-build-error: "


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """End the child and everything it started (cmake, the compilers)."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None:
            return


def child_main(argv: Sequence[str]) -> int:
    """``python -m pytest_tokperf.builds.specs release|tree WHAT OPTIONS_JSON``."""
    kind, what, options = argv
    opts = json.loads(options)
    builder = Builder(BuildOptions(opts["jobs"], opts["use_ccache"], opts["nice"]),
                      progress=lambda line: print(line, flush=True))
    try:
        build = (builder.release(int(what)) if kind == "release" else builder.tree(Path(what)))
    except ConfigError as exc:
        print(f"{_ERROR}{exc}", flush=True)
        return 2
    except InstallError as exc:
        print(f"{_ERROR}{exc}", flush=True)
        return 3
    print(_RESULT + json.dumps({"label": build.label, "binary": str(build.binary),
                                "number": build.number}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))


def binaries_in(folder: str) -> dict[int, Build]:
    """The executables in ``folder`` named like ``llama-server-b<N>``, by release."""
    found: dict[int, Build] = {}
    for path in sorted(Path(folder).expanduser().iterdir()):
        match = re.search(r"b(\d+)", path.name)
        if match and path.is_file() and os.access(path, os.X_OK):
            number = int(match.group(1))
            found[number] = Build(f"b{number}", path.resolve(), number)
    if not found:
        raise ConfigError(f"--binaries {folder!r} holds no executable named like "
                          f"llama-server-b<N>")
    return found
