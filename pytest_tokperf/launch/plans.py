"""Start commands for engines other than llama-server, when their program is on PATH.

Clean-measurement flags are added only where the engine's help lists them and the user
does not set them (docs/engines.md).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from pytest_tokperf.errors import ConfigError, EngineUnavailable
from pytest_tokperf.helper_runs import run_helper
from pytest_tokperf.launch.process import (LOOPBACK, ServerProcess, http_ready, log_tail,
                                           start_server)

BINARIES = {"ollama": "ollama", "vllm": "vllm", "mlx": "mlx_lm.server", "lmstudio": "lms",
            "sglang": "sglang"}
"""The program each startable engine needs on PATH."""

HELP_ARGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "ollama": (("serve", "--help"),),
    "vllm": (("serve", "--help=all"), ("serve", "--help")),
    "sglang": (("serve", "--help"),),
    "mlx": (("--help",),),
}
"""How each program prints its flags; the first answer naming the port option counts."""

HELP_TIMEOUT_S = 180.0
"""vLLM and SGLang import torch to print their help: tens of seconds on a cold cache."""

MODEL_ENGINES = ("vllm", "mlx", "sglang")
"""Engines that load one model given at start."""

VENV_PROGRAMS = {"mlx": "mlx_lm.server", "vllm": "python"}
"""What each engine from ``.ci/install-engines`` runs from its venv."""

VLLM_MODULE = "vllm.entrypoints.openai.api_server"

VLLM_CPU_ENV = (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                ("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1"))
"""vLLM without a GPU: the CPU platform, a 1 GiB KV cache, no hub, no telemetry."""


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
    env: tuple[tuple[str, str], ...] = ()
    """Variables set for the server on top of the caller's environment."""
    clean: tuple[str, ...] = ()
    """What tokperf added for a clean measurement (flags, ``NAME=value``), as recorded."""
    applied: tuple[tuple[str, str], ...] = ()
    """tokperf's settings this engine really received (and so stored)."""

    @property
    def detaches(self) -> bool:
        return bool(self.stop_command)

    @property
    def shown(self) -> str:
        """The command as a shell would take it, environment first."""
        return " ".join((*(f"{k}={v}" for k, v in self.env), *self.command))


def find_binary(engine: str, explicit: str | None = None) -> Path:
    """The engine's program: ``explicit``, PATH, the engines venv, else a ConfigError."""
    if engine not in BINARIES:
        raise ConfigError(
            f"--tokperf-engine {engine!r} cannot be started by this plugin (startable: "
            f"llama-server, {', '.join(BINARIES)}); start it yourself and pass --tokperf-url"
        )
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise ConfigError(f"--tokperf-server-bin {explicit!r} does not exist")
        return path.absolute()  # "./x.sh" is that file, never a PATH lookup
    found = shutil.which(BINARIES[engine])
    if found:
        return Path(found)
    venv = venv_program(engine)
    if venv is not None:
        return venv
    where = (f" nor in {venv_dir(engine)} (.ci/install-engines {engine} puts it there)"
             if engine in VENV_PROGRAMS else "")
    raise ConfigError(
        f"--tokperf-engine {engine!r}: {BINARIES[engine]!r} is not on PATH{where}; install "
        f"it, or start the server yourself and pass --tokperf-url"
    )


def venv_dir(engine: str) -> Path:
    """Where ``.ci/install-engines`` puts ``engine``'s venv."""
    from pytest_tokperf.paths import engine_venvs_dir

    return engine_venvs_dir() / engine


def venv_program(engine: str) -> Path | None:
    """The engine's program in the venv ``.ci/install-engines`` made, if it is there."""
    if engine not in VENV_PROGRAMS:
        return None
    path = venv_dir(engine) / "bin" / VENV_PROGRAMS[engine]
    return path if path.exists() else None


def runs_module(binary: Path) -> bool:
    """Is ``binary`` a Python interpreter (so the engine is started as ``-m MODULE``)?"""
    return binary.name.startswith("python")


def read_help(engine: str, binary: Path, timeout_s: float = HELP_TIMEOUT_S) -> str:
    """What ``binary`` prints for its help (see ``HELP_ARGS``); "" when it prints none."""
    text = ""
    asks = HELP_ARGS.get(engine, ())
    if engine == "vllm" and runs_module(binary):  # vLLM's module through Python
        asks = (("-m", VLLM_MODULE, "--help=all"), ("-m", VLLM_MODULE, "--help"))
    for args in asks:
        proc = run_helper([str(binary), *args], timeout_s)
        if proc is None:
            continue
        text = proc.text
        if listed(text, "--port") or "OLLAMA_HOST" in text:
            return text
    return text if text.strip() else ""


def listed(help_text: str, flag: str) -> bool:
    """``flag`` appears in ``help_text`` as a whole option."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


def _clean_flags(help_text: str, extra_args: Sequence[str],
                 *wanted: tuple[str, ...]) -> list[str]:
    """Each flag (and value) the help lists and the user sets in neither of its forms."""
    given = {arg.split("=", 1)[0] for arg in extra_args}
    out: list[str] = []
    for flag in wanted:
        if listed(help_text, flag[0]) and not given & {flag[0], _OTHER_FORM.get(flag[0])}:
            out += flag
    return out


_OTHER_FORM = {"--no-enable-prefix-caching": "--enable-prefix-caching"}


def ollama_plan(binary: Path, port: int, help_text: str = "", extra_args: Sequence[str] = (),
                parallel: int = 1, context_size: int | None = None) -> LaunchPlan:
    """``ollama serve``: no flags, only environment (``OLLAMA_HOST`` sets the port)."""
    env: dict[str, str] = {"OLLAMA_HOST": f"{LOOPBACK}:{port}"}
    wanted = {"OLLAMA_NUM_PARALLEL": str(parallel), "OLLAMA_MAX_LOADED_MODELS": "1",
              "OLLAMA_KEEP_ALIVE": "30m"}
    if context_size:
        wanted["OLLAMA_CONTEXT_LENGTH"] = str(context_size)
    clean = {k: v for k, v in wanted.items() if listed(help_text, k)}
    env.update(clean)
    for arg in extra_args:
        name, eq, value = arg.partition("=")
        if not eq or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
            raise ConfigError(
                f"--tokperf-server-arg {arg!r}: `ollama serve` takes no options, only "
                f"environment variables; pass them as NAME=value (e.g. OLLAMA_FLASH_ATTENTION=1)"
            )
        env[name] = value
        clean.pop(name, None)
    names = {"OLLAMA_NUM_PARALLEL": "parallel", "OLLAMA_CONTEXT_LENGTH": "ctx_size"}
    return LaunchPlan(
        engine="ollama", command=(str(binary), "serve"), url=f"http://{LOOPBACK}:{port}",
        ready_path="/api/version", env=tuple(env.items()),
        clean=tuple(f"{k}={v}" for k, v in clean.items()),
        applied=tuple(sorted((names[k], v) for k, v in env.items() if k in names)),
    )


def vllm_plan(
    binary: Path, model: str, port: int, help_text: str = "", extra_args: Sequence[str] = (),
    *, cpu: bool = False, context_size: int | None = None,
) -> LaunchPlan:
    """``vllm serve MODEL`` (or its module, for vllm-cpu); ``cpu``: eager float32 on CPU."""
    wanted: list[tuple[str, ...]] = [("--no-enable-prefix-caching",),
                                     ("--enable-prompt-tokens-details",),
                                     ("--enable-per-request-metrics",)]
    if context_size:
        wanted.append(("--max-model-len", str(context_size)))
    if cpu:
        wanted += [("--enforce-eager",), ("--dtype", "float32")]
    clean = _clean_flags(help_text, extra_args, *wanted)
    head = ([str(binary), "-m", VLLM_MODULE, "--model", model] if runs_module(binary)
            else [str(binary), "serve", model])
    cmd = [*head, "--host", LOOPBACK, "--port", str(port), *clean, *extra_args]
    env = VLLM_CPU_ENV if cpu else ()
    applied = dict(_applied([*clean, *extra_args],
                            {"--max-model-len": "ctx_size", "--dtype": "dtype"}))
    if cpu:
        applied["vllm_target_device"] = "cpu"
    return LaunchPlan(engine="vllm", command=tuple(cmd), url=f"http://{LOOPBACK}:{port}",
                      ready_path="/health", env=env, clean=tuple(clean),
                      applied=tuple(sorted(applied.items())))


def _applied(args: Sequence[str], names: dict[str, str]) -> list[tuple[str, str]]:
    """(setting, value) for each flag of ``names`` in ``args`` (``--flag v``, ``--flag=v``)."""
    out: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in names:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
            out.append((names[flag], value))
    return out


def sglang_plan(binary: Path, model: str, port: int, help_text: str = "",
                extra_args: Sequence[str] = ()) -> LaunchPlan:
    """``sglang serve --model-path MODEL``; it listens once the model is loaded."""
    clean = _clean_flags(help_text, extra_args, ("--disable-radix-cache",))
    cmd = [str(binary), "serve", "--model-path", model, "--host", LOOPBACK, "--port", str(port),
           *clean, *extra_args]
    return LaunchPlan(engine="sglang", command=tuple(cmd), url=f"http://{LOOPBACK}:{port}",
                      ready_path="/get_model_info", clean=tuple(clean))


def mlx_plan(binary: Path, model: str, port: int, help_text: str = "",
             extra_args: Sequence[str] = ()) -> LaunchPlan:
    """``mlx_lm.server --model M``; ``/health`` answers as soon as it listens."""
    clean = _clean_flags(help_text, extra_args, ("--prompt-cache-size", "0"),
                         ("--log-level", "DEBUG"))
    cmd = [str(binary), "--model", model, "--host", LOOPBACK, "--port", str(port), *clean,
           *extra_args]
    return LaunchPlan(engine="mlx", command=tuple(cmd), url=f"http://{LOOPBACK}:{port}",
                      ready_path="/health", clean=tuple(clean))


def lmstudio_plan(binary: Path, port: int, extra_args: Sequence[str] = ()) -> LaunchPlan:
    """``lms server start --port N`` returns once the daemon serves; ``lms server stop`` ends it."""
    return LaunchPlan(
        engine="lmstudio",
        command=(str(binary), "server", "start", "--port", str(port), *extra_args),
        url=f"http://{LOOPBACK}:{port}", ready_path="/v1/models",
        stop_command=(str(binary), "server", "stop"),
    )


def launch_plan(
    engine: str, *, model: str | None, port: int, binary: Path | None = None,
    extra_args: Sequence[str] = (), help_text: str = "", parallel: int = 1,
    context_size: int | None = None, cpu: bool = False,
) -> LaunchPlan:
    """The plan for ``engine``; vLLM, SGLang and mlx need a model; ``cpu``: no GPU here."""
    binary = binary or find_binary(engine)
    if engine in MODEL_ENGINES and not model:
        raise ConfigError(
            f"--tokperf-engine {engine!r} needs --tokperf-model (a Hugging Face id or a local "
            f"model directory) to start a server"
        )
    if engine == "ollama":
        return ollama_plan(binary, port, help_text, extra_args, parallel, context_size)
    if engine == "vllm":
        return vllm_plan(binary, str(model), port, help_text, extra_args, cpu=cpu,
                         context_size=context_size)
    if engine == "sglang":
        return sglang_plan(binary, str(model), port, help_text, extra_args)
    if engine == "mlx":
        return mlx_plan(binary, str(model), port, help_text, extra_args)
    if engine == "lmstudio":
        return lmstudio_plan(binary, port, extra_args)
    raise ConfigError(f"--tokperf-engine {engine!r} cannot be started by this plugin")


@dataclass(slots=True)
class DetachedServer:
    """A server another process owns (the LM Studio daemon); ``stop()`` asks it to stop."""

    url: str
    command: tuple[str, ...]
    log_path: Path
    stop_command: tuple[str, ...]
    stopped: bool = False

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_planned(plan: LaunchPlan, log_path: Path,
                  timeout_s: float) -> ServerProcess | DetachedServer:
    """Start ``plan`` and wait until it is ready, or fail with the log's last lines."""
    env = {**os.environ, **dict(plan.env)} if plan.env else None
    if not plan.detaches:
        return start_server(plan.command, plan.url, log_path,
                            http_ready(plan.url + plan.ready_path), timeout_s, env=env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run(list(plan.command), stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=timeout_s, check=False,
                                  env=env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineUnavailable(f"cannot run {' '.join(plan.command)!r}: {exc}") from exc
    server = DetachedServer(plan.url, plan.command, log_path, plan.stop_command)
    if proc.returncode != 0:
        raise EngineUnavailable(
            f"{' '.join(plan.command)!r} exited with code {proc.returncode}. Last lines of "
            f"{log_path}:\n{log_tail(log_path)}"
        )
    ready = http_ready(plan.url + plan.ready_path)
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
