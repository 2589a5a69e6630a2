"""Start commands for engines other than llama-server, when their binary is on PATH.

Each ``*_plan`` only builds the command line and says how readiness shows; starting,
logging and stopping reuse ``launcher.start_server`` (own session, death with the
parent, stopped at exit). LM Studio's ``lms server start`` hands the server to the
LM Studio daemon and returns, so its plan carries the ``lms server stop`` that ends it.

Clean-measurement choices (shared/reference/engines.md): loopback only; vLLM without
automatic prefix caching and with cached-token details and per-request metrics where
its ``--help`` lists them (flags a build does not know are left out, not guessed);
no speculative decoding unless the caller passes the flags in ``extra_args``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from pytest_tokperf.engines.launcher import LOOPBACK, ServerProcess, log_tail, start_server
from pytest_tokperf.errors import ConfigError, EngineUnavailable

BINARIES = {"ollama": "ollama", "vllm": "vllm", "mlx": "mlx_lm.server", "lmstudio": "lms"}
"""The program each startable engine needs on PATH."""


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """How to start one engine server and how to tell it is ready."""

    engine: str
    command: tuple[str, ...]
    url: str
    ready_path: str
    """``GET url + ready_path`` answers 200 once a request can be served."""
    stop_command: tuple[str, ...] = ()
    """Only for servers that detach (``lms server start``): what stops them."""

    @property
    def detaches(self) -> bool:
        return bool(self.stop_command)


def find_binary(engine: str, explicit: str | None = None) -> Path:
    """The engine's program: ``explicit`` if given, else from PATH, else a ConfigError."""
    if engine not in BINARIES:
        raise ConfigError(
            f"--tokperf-engine {engine!r} cannot be started by this plugin (startable: "
            f"llama-server, {', '.join(BINARIES)}); start it yourself and pass --tokperf-url"
        )
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise ConfigError(f"--tokperf-server-bin {explicit!r} does not exist")
        return path
    found = shutil.which(BINARIES[engine])
    if not found:
        raise ConfigError(
            f"--tokperf-engine {engine!r}: {BINARIES[engine]!r} is not on PATH; install it, "
            f"or start the server yourself and pass --tokperf-url"
        )
    return Path(found)


def ollama_plan(binary: Path, port: int) -> LaunchPlan:
    """``ollama serve`` listens where ``OLLAMA_HOST`` says (it has no --port flag)."""
    return LaunchPlan(
        engine="ollama",
        command=("env", f"OLLAMA_HOST={LOOPBACK}:{port}", str(binary), "serve"),
        url=f"http://{LOOPBACK}:{port}",
        ready_path="/api/version",
    )


def vllm_plan(
    binary: Path, model: str, port: int, help_text: str = "", extra_args: Sequence[str] = ()
) -> LaunchPlan:
    """``vllm serve MODEL``; ``/health`` answers 200 once the model is loaded."""
    cmd = [str(binary), "serve", model, "--host", LOOPBACK, "--port", str(port)]
    for flag in ("--no-enable-prefix-caching", "--enable-prompt-tokens-details",
                 "--enable-per-request-metrics"):
        if flag in help_text:
            cmd.append(flag)
    cmd += list(extra_args)
    return LaunchPlan(engine="vllm", command=tuple(cmd), url=f"http://{LOOPBACK}:{port}",
                      ready_path="/health")


def mlx_plan(binary: Path, model: str, port: int, extra_args: Sequence[str] = ()) -> LaunchPlan:
    """``mlx_lm.server --model M``; ``/health`` answers as soon as it listens."""
    cmd = [str(binary), "--model", model, "--host", LOOPBACK, "--port", str(port), *extra_args]
    return LaunchPlan(engine="mlx", command=tuple(cmd), url=f"http://{LOOPBACK}:{port}",
                      ready_path="/health")


def lmstudio_plan(binary: Path, port: int, extra_args: Sequence[str] = ()) -> LaunchPlan:
    """``lms server start --port N`` returns once the daemon serves; ``lms server stop`` ends it."""
    return LaunchPlan(
        engine="lmstudio",
        command=(str(binary), "server", "start", "--port", str(port), *extra_args),
        url=f"http://{LOOPBACK}:{port}",
        ready_path="/v1/models",
        stop_command=(str(binary), "server", "stop"),
    )


def launch_plan(
    engine: str,
    *,
    model: str | None,
    port: int,
    binary: Path | None = None,
    extra_args: Sequence[str] = (),
    help_text: str = "",
) -> LaunchPlan:
    """The plan for ``engine``; vLLM and mlx need a model name or path."""
    binary = binary or find_binary(engine)
    if engine in ("vllm", "mlx") and not model:
        raise ConfigError(
            f"--tokperf-engine {engine!r} needs --tokperf-model (a Hugging Face id or a local "
            f"model directory) to start a server"
        )
    if engine == "ollama":
        return ollama_plan(binary, port)
    if engine == "vllm":
        return vllm_plan(binary, str(model), port, help_text, extra_args)
    if engine == "mlx":
        return mlx_plan(binary, str(model), port, extra_args)
    if engine == "lmstudio":
        return lmstudio_plan(binary, port, extra_args)
    raise ConfigError(f"--tokperf-engine {engine!r} cannot be started by this plugin")


def ready_check(plan: LaunchPlan) -> Callable[[], bool]:
    def ready() -> bool:
        try:
            return httpx.get(plan.url + plan.ready_path, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    return ready


@dataclass(slots=True)
class DetachedServer:
    """A server another process owns (the LM Studio daemon); ``stop()`` asks it to stop."""

    url: str
    command: tuple[str, ...]
    log_path: Path
    stop_command: tuple[str, ...]
    stopped: bool = field(default=False)

    def stop(self, grace_s: float = 10.0) -> int | None:
        if self.stopped:
            return 0
        self.stopped = True
        with open(self.log_path, "ab") as log:
            try:
                proc = subprocess.run(list(self.stop_command), stdout=log, stderr=subprocess.STDOUT,
                                      timeout=grace_s * 3, check=False)
            except (OSError, subprocess.TimeoutExpired):
                return None
        return proc.returncode

    def __enter__(self) -> DetachedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_planned(
    plan: LaunchPlan, log_path: Path, timeout_s: float
) -> ServerProcess | DetachedServer:
    """Start ``plan`` and wait until it is ready, or fail with the log's last lines."""
    if not plan.detaches:
        return start_server(plan.command, plan.url, log_path, ready_check(plan), timeout_s)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run(list(plan.command), stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineUnavailable(f"cannot run {' '.join(plan.command)!r}: {exc}") from exc
    server = DetachedServer(plan.url, plan.command, log_path, plan.stop_command)
    if proc.returncode != 0:
        raise EngineUnavailable(
            f"{' '.join(plan.command)!r} exited with code {proc.returncode}. Last lines of "
            f"{log_path}:\n{log_tail(log_path)}"
        )
    ready = ready_check(plan)
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            server.stop()
            raise EngineUnavailable(
                f"{plan.engine} at {plan.url} was not ready within {timeout_s:.0f} s after "
                f"{' '.join(plan.command)!r}. Last lines of {log_path}:\n{log_tail(log_path)}"
            )
        time.sleep(0.2)
    return server
