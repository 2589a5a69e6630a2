"""Processes: stop() kills the server's whole group, helper runs are bounded and leave
nothing, and a relative --tokperf-server-bin is the file named, not a PATH lookup.

Stand-in binaries are shell scripts that start a child of their own (as a wrapper
script around llama-server does) and write its pid down, so a test can see whether it
survived. Nothing is timed: ``wait_gone`` only gives the kernel time to reap.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pytest_tokperf.errors import EngineUnavailable
from pytest_tokperf import helper_runs as helpers
from pytest_tokperf.helper_runs import run_helper
from pytest_tokperf.launch.process import (
    LaunchSpec,
    resolve_server_binary,
    start_llama_server,
    start_server,
)


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int]) -> list[int]:
    """The pids still alive after up to 5 s (a SIGKILLed orphan waits to be reaped)."""
    end = time.monotonic() + 5.0
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "_silent", set())


def test_stop_kills_a_wrapper_scripts_child(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    wrapper = script(tmp_path / "wrapper.sh", f"sleep 300 &\necho $! >> {pids}\nwait\n")
    server = start_server([str(wrapper)], "http://127.0.0.1:9", tmp_path / "log",
                          lambda: bool(pids_in(pids)), 10.0)  # written, not only created
    server.stop(grace_s=5.0)
    children = pids_in(pids)
    assert len(children) == 1
    assert wait_gone(children) == [], "the wrapper's child outlived stop()"


def test_a_helper_that_never_answers_is_killed_with_its_children_and_not_asked_again(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    never = script(tmp_path / "never.sh", f"sleep 300 &\necho $! >> {pids}\nsleep 300\n")
    assert run_helper([str(never), "--help"], 0.5) is None  # too short to call it silent
    assert run_helper([str(never), "--help"], helpers.SILENT_AFTER_S) is None
    assert run_helper([str(never), "--version"], 30.0) is None  # not asked again
    children = pids_in(pids)
    assert len(children) == 2, "the binary was asked again after it did not answer"
    assert wait_gone(children) == [], "the helper's grandchild outlived its timeout"


def test_a_helper_that_exits_leaves_no_stragglers_and_its_output_is_capped(
        tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    loud = script(tmp_path / "loud.sh",
                  f"sleep 300 &\necho $! >> {pids}\nhead -c 3000000 /dev/zero\necho done\n")
    done = run_helper([str(loud), "--help"], 30.0)
    assert done is not None and done.returncode == 0
    assert len(done.text) == helpers.MAX_OUTPUT_BYTES
    assert wait_gone(pids_in(pids)) == []


def test_the_startup_timeout_covers_the_help_check(tmp_path: Path) -> None:
    never = script(tmp_path / "never.sh", "sleep 300\n")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    spec = LaunchSpec(binary=never, model=model, log_path=tmp_path / "log", threads=1,
                      startup_timeout_s=helpers.SILENT_AFTER_S)
    with pytest.raises(EngineUnavailable) as caught:
        start_llama_server(spec)
    assert f"was not ready within {helpers.SILENT_AFTER_S:g} s (--tokperf-startup-timeout, " \
           "which also covers its --help and --version checks" in str(caught.value)


def test_a_relative_server_bin_is_the_file_named(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    script(tmp_path / "crash-server.sh", "exit 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    binary = resolve_server_binary("./crash-server.sh")
    assert binary == tmp_path / "crash-server.sh" and binary.is_absolute()
    assert os.access(binary, os.X_OK)
