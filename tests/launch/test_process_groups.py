"""A started server is stopped with everything its process group started, on every way
out: stop(), a failed start-up, an exception, SIGTERM and SIGKILL of the process that
started it; and a failed start-up prints its log's tail without reading the log whole.

The server is a wrapper script that runs ``sleep`` as a plain child (no ``exec``), as a
wrapper around llama-server does, and writes the child's pid down. ``wait_gone`` only
gives the kernel time to deliver and reap; nothing is timed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_tokperf.errors import EngineUnavailable
from pytest_tokperf.launch import process as launch
from pytest_tokperf.launch.process import ServerProcess, log_tail, start_server


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def wrapper(folder: Path, then: str = "wait") -> tuple[Path, Path]:
    """A wrapper that starts ``sleep 300`` as its child, records its pid, then ``then``."""
    pids = folder / "pids"
    return script(folder / "wrapper.sh", f"sleep 300 &\necho $! >> {pids}\n{then}\n"), pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    """The pids still alive after up to ``within_s``."""
    end = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def wait_for(path: Path, within_s: float = 10.0) -> None:
    end = time.monotonic() + within_s
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def _stop_leftovers() -> Iterator[None]:
    before = set(launch._running)  # the session's own servers (the llama_server fixture) stay
    yield
    for pid in set(launch._running) - before:  # a failed test must not leave a server running
        launch._running[pid].stop(1.0)


def test_stop_kills_the_grandchild_and_the_watchdog(tmp_path: Path) -> None:
    binary, pids = wrapper(tmp_path)
    server = start_server([str(binary)], "http://127.0.0.1:9", tmp_path / "log",
                          lambda: bool(pids_in(pids)), 10.0)
    assert isinstance(server, ServerProcess) and server.watchdog is not None
    server.stop(grace_s=5.0)
    assert len(pids_in(pids)) == 1
    assert wait_gone(pids_in(pids)) == [], "the wrapper's child outlived stop()"
    assert server.watchdog.returncode is not None, "the watchdog outlived stop()"
    assert server.process.pid not in launch._running


def test_a_wrapper_that_exits_during_start_up_takes_its_children_along(tmp_path: Path) -> None:
    binary, pids = wrapper(tmp_path, then="exit 3")
    with pytest.raises(EngineUnavailable, match="exited with code 3 during start-up"):
        start_server([str(binary)], "http://127.0.0.1:9", tmp_path / "log",
                     lambda: False, 10.0)
    assert len(pids_in(pids)) == 1
    assert wait_gone(pids_in(pids), 5.0) == [], "the wrapper's child outlived the failed start"


@pytest.mark.parametrize("error", [RuntimeError("probe broke"), KeyboardInterrupt()])
def test_an_exception_while_waiting_stops_the_group_at_once(
        tmp_path: Path, error: BaseException) -> None:
    binary, pids = wrapper(tmp_path)

    def ready() -> bool:
        if pids.exists():
            raise error
        return False

    before = dict(launch._running)  # the session's own servers, if any, stay
    with pytest.raises(type(error)):
        start_server([str(binary)], "http://127.0.0.1:9", tmp_path / "log", ready, 10.0)
    assert len(pids_in(pids)) == 1
    # not at interpreter exit: a long session goes on after a failed start
    assert wait_gone(pids_in(pids), 5.0) == [], "the wrapper's child outlived the exception"
    assert launch._running == before


def test_the_sigterm_handler_is_there_only_while_servers_run(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    binary, pids = wrapper(tmp_path)
    server = start_server([str(binary)], "http://127.0.0.1:9", tmp_path / "log",
                          lambda: bool(pids_in(pids)), 10.0)
    try:
        assert signal.getsignal(signal.SIGTERM) is launch._on_sigterm
    finally:
        server.stop(1.0)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_server_started_from_another_thread_is_stopped_all_the_same(tmp_path: Path) -> None:
    binary, pids = wrapper(tmp_path)
    started: list[ServerProcess] = []
    thread = threading.Thread(target=lambda: started.append(start_server(
        [str(binary)], "http://127.0.0.1:9", tmp_path / "log", lambda: bool(pids_in(pids)), 10.0)))
    thread.start()
    thread.join()
    assert started, "start_server failed outside the main thread"
    started[0].stop(1.0)
    assert wait_gone(pids_in(pids), 5.0) == []


LAUNCHER = """
import signal, sys, time
from pathlib import Path
from pytest_tokperf.launch.process import start_server

folder = Path(sys.argv[1])
if sys.argv[2] == "own-handler":
    def own(signum, frame):
        (folder / "own-handler-ran").write_text("yes")
        sys.exit(7)
    signal.signal(signal.SIGTERM, own)
pids = folder / "pids"
server = start_server([str(folder / "wrapper.sh")], "http://127.0.0.1:9", folder / "log",
                      lambda: pids.exists() and bool(pids.read_text().strip()), 30.0)
(folder / "ready").write_text("yes")
time.sleep(120)
"""


def launcher(tmp_path: Path, mode: str = "plain") -> tuple[subprocess.Popen[bytes], Path]:
    """A Python process that starts the wrapper through the library, once it is running."""
    _, pids = wrapper(tmp_path)
    code = tmp_path / "launcher.py"
    code.write_text(LAUNCHER)
    errors = tmp_path / "launcher.err"
    with open(errors, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(code), str(tmp_path), mode],
                                stdout=subprocess.DEVNULL, stderr=err)
    wait_for(tmp_path / "ready", 30.0)
    if not (tmp_path / "ready").exists():
        proc.kill()
        proc.wait()
        pytest.fail(f"the launcher did not start the wrapper: {errors.read_text()}")
    assert len(pids_in(pids)) == 1
    return proc, pids


def test_sigterm_stops_the_group_and_the_launcher_still_dies_by_sigterm(tmp_path: Path) -> None:
    proc, pids = launcher(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert wait_gone(pids_in(pids)) == [], "the wrapper's child outlived SIGTERM to its launcher"


def test_sigterm_hands_on_to_the_handler_that_was_there_before(tmp_path: Path) -> None:
    proc, pids = launcher(tmp_path, "own-handler")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 7
    assert (tmp_path / "own-handler-ran").exists()
    assert wait_gone(pids_in(pids)) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and pidfd")
def test_sigkill_of_the_launcher_leaves_nothing_behind(tmp_path: Path) -> None:
    """Cannot be caught: the parent-death signal takes the wrapper, the watchdog the rest."""
    proc, pids = launcher(tmp_path)
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert wait_gone(pids_in(pids)) == [], "the wrapper's child outlived SIGKILL of its launcher"


def test_a_failed_start_prints_the_tail_of_a_huge_log_without_reading_it(tmp_path: Path) -> None:
    """A chatty server that never becomes ready: 74 MB of log (sparse here), 20 lines shown."""
    chatty = script(tmp_path / "chatty.sh",
                    'truncate -s 74M "$1"\n'
                    'for i in $(seq 1 30); do echo "line $i" >> "$1"; done\nexit 1\n')
    log = tmp_path / "server.log"
    tracemalloc.start()
    try:
        with pytest.raises(EngineUnavailable) as caught:
            start_server([str(chatty), str(log)], "http://127.0.0.1:9", log, lambda: False, 10.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert log.stat().st_size > 74_000_000
    shown = str(caught.value).split("Last lines of", 1)[1].splitlines()[1:]
    assert shown == [f"line {i}" for i in range(11, 31)]
    assert peak < 4 << 20, f"{peak / 1e6:.0f} MB allocated to show the tail of a 74 MB log"


def test_a_missing_log_says_so(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "never-written.log") == "(no log)"
