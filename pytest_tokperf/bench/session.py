"""One benchmarking session's engine, started or attached, and its model.

Shared by the pytest plugin and the ``tokperf`` command; the engine starts on first use
and ``close()`` always stops it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from pytest_tokperf.bench.measure import attach_process_clock
from pytest_tokperf.engines.base import Engine
from pytest_tokperf.builds.cmake import binary_version
from pytest_tokperf.launch.process import (
    LaunchSpec,
    ServerProcess,
    resolve_server_binary,
    start_llama_server,
)
from pytest_tokperf.launch.plans import DetachedServer
from pytest_tokperf.engines.registry import EngineRegistry, create_engine
from pytest_tokperf.transport.credentials import redact_url
from pytest_tokperf.engines.wire import not_ready_error
from pytest_tokperf.errors import ConfigError, ModelFileError
from pytest_tokperf.results import Progress
from pytest_tokperf.settings import BUILTIN_MODELS, Settings

COMPUTES_IN_PROCESS = ("llama-server", "mlx")
"""Engines computing in the process tokperf starts: its clock tells their wait for a CPU."""


def resolve_model_path(model: str, progress: Progress | None = None) -> Path:
    """A GGUF path for ``--tokperf-model``: a file, or a generated builtin model."""
    if model in BUILTIN_MODELS:
        from pytest_tokperf.model.writer import MAIN_MODEL, TEST_MODEL, cached_model

        spec = MAIN_MODEL if model == "main" else TEST_MODEL
        if progress is not None:
            progress(f"model: generating or reusing the '{model}' model")
        return cached_model(spec)
    path = Path(model).expanduser()
    check_model_file(path, source=f"--tokperf-model {model!r}")
    return path


def loopback_pids(url: str) -> tuple[int, ...]:
    """The processes listening on ``url``'s port when it is this machine's loopback, else ()."""
    from urllib.parse import urlsplit

    from pytest_tokperf.hardware.load import listening_pids

    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ()
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return ()
    return listening_pids(port)


def check_model_file(path: Path, source: str) -> None:
    """Fail early, in words, when a model path is missing, not GGUF or corrupt."""
    from pytest_tokperf.model.gguf_file import check_header

    if not path.exists():
        raise ConfigError(
            f"{source}: {str(path)!r} does not exist; pass a .gguf file, or 'main'/'test' "
            f"for a generated model (`tokperf make-model` writes one)"
        )
    try:
        check_header(path)
    except ModelFileError as exc:
        raise ConfigError(f"{source}: {exc}") from exc


HF_ENGINES = ("mlx", "vllm")
"""Engines that load a Hugging Face folder: the built-in models are written as one."""


def local_model(path: Path) -> Path:
    """A local model: a GGUF file, or the Hugging Face folder that holds the path."""
    from pytest_tokperf.model.hf_file import hf_folder, is_hf_folder

    return hf_folder(path) if is_hf_folder(path) else path


def _ready(engine: Engine, name: str, *fix: str) -> Engine:
    """``engine`` once it answers ready; closed, and ``not_ready_error``, when it does not."""
    try:  # ready() itself may refuse (a dead proxy, a redirect): close either way
        ready = engine.ready()
    except BaseException:
        engine.close()
        raise
    if not ready:
        engine.close()
        raise not_ready_error(name, engine.base_url, *fix)
    return engine


def no_gpu() -> bool:
    """No NVIDIA driver here: vLLM is started on its CPU platform."""
    import shutil

    return shutil.which("nvidia-smi") is None


@dataclass
class EngineSession:
    """Owns one engine for a session: attach by URL or start llama-server."""

    settings: Settings
    log_dir: Path
    progress: Progress | None = None
    registry: EngineRegistry | None = None
    _engine: Engine | None = field(default=None, init=False)
    _server: ServerProcess | DetachedServer | None = field(default=None, init=False)
    _model_path: Path | None = field(default=None, init=False)
    _failure: Exception | None = field(default=None, init=False)
    _launch: LaunchSpec | None = field(default=None, init=False)
    _server_facts: tuple[tuple[str, str], ...] = field(default=(), init=False)
    """What the binary said about its devices (``--list-devices``), as settings pairs."""
    _drafts: dict[str, tuple[ServerProcess | None, Engine]] = field(default_factory=dict,
                                                                     init=False)
    """Drafting engines by draft path (started here) or URL (attached)."""
    _restarts: int = field(default=0, init=False)
    _attached_pids: tuple[int, ...] | None = field(default=None, init=False)
    """An attached server's processes when it listens on this machine's loopback."""

    @property
    def server(self) -> ServerProcess | DetachedServer | None:
        return self._server

    def pids(self) -> tuple[int, ...]:
        """The servers tokperf started (main and drafting), else an attached loopback one's."""
        started = [self._server, *(server for server, _ in self._drafts.values())]
        pids = tuple(s.process.pid for s in started if isinstance(s, ServerProcess))
        if not pids and self._server is None and self._engine is not None:
            if self._attached_pids is None:
                self._attached_pids = loopback_pids(self._engine.base_url)
            pids = self._attached_pids
        return pids

    @property
    def model_path(self) -> Path | None:
        return self._model_path

    @property
    def binary_path(self) -> Path | None:
        """The llama-server binary started (None: attached, another engine, not started)."""
        return self._launch.binary if self._launch is not None else None

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def engine(self) -> Engine:
        """The engine, started on first call; a start-up failure is remembered."""
        if self._failure is not None:
            raise self._failure
        if self._engine is None:
            try:
                self._engine = self._open()
            except Exception as exc:
                self._failure = exc
                raise
        return self._engine

    def _settings_pairs(self) -> tuple[tuple[str, str], ...]:
        s = self.settings
        pairs = {"threads": str(s.threads), "ctx_size": str(s.ctx_size),
                 "parallel": str(s.parallel)}
        if s.server_args:
            pairs["server_args"] = " ".join(s.server_args)
        pairs.update(self._server_facts)
        return tuple(sorted(pairs.items()))

    def _open(self) -> Engine:
        s = self.settings
        name = s.engine or "llama-server"
        if s.url is not None:
            candidate = Path(s.model).expanduser()
            if s.model not in BUILTIN_MODELS and candidate.exists():  # for the ceiling
                self._model_path = local_model(candidate)
            return _ready(self._make(name, s.url, ()), name)
        if name != "llama-server":
            return self._start_other(name)
        binary = resolve_server_binary(s.server_bin, s.engine_version)
        self._model_path = resolve_model_path(s.model, self.progress)
        from pytest_tokperf.builds.identity import build_identity
        from pytest_tokperf.engines.llama_server.log import llama_binary_facts, wants_own_verbosity

        # --tokperf-startup-timeout is total: the checks below spend from it too
        end = time.monotonic() + s.startup_timeout
        facts = llama_binary_facts(binary, end - time.monotonic())
        # A build is its binary (two builds of one release report the same build_info)
        identity = build_identity(binary)
        self._server_facts = (*facts.devices.to_pairs().items(), *identity.to_pairs().items())
        trace = () if wants_own_verbosity(s.server_args) else facts.trace_args
        spec = LaunchSpec(
            binary=binary,
            model=self._model_path,
            log_path=self.log_dir / f"llama-server-{os.getpid()}.log",
            threads=s.threads,
            context_size=s.ctx_size,
            parallel=s.parallel,
            port=s.port,
            extra_args=(*trace, *s.server_args),
            startup_timeout_s=s.startup_timeout,
            startup_deadline_s=end,
        )
        if self.progress is not None:
            version = binary_version(binary, end - time.monotonic())
            self.progress(f"starting {binary} ({version or 'unknown build'})")
        self._launch = spec
        self._server = start_llama_server(spec)
        pairs = (*self._settings_pairs(), ("log_path", str(spec.log_path)))
        return self._make(name, self._server.url, tuple(sorted(pairs)), self._server)

    def restartable(self) -> bool:
        """Whether ``restart`` can start this session's server anew (tokperf started a
        llama-server and no drafting server beside it)."""
        return isinstance(self._server, ServerProcess) and self._launch is not None \
            and not self._drafts

    def restart(self) -> Engine:
        """Stop the llama-server tokperf started and start it again with the same launch
        (a free port unless one was given); the new engine. ``ConfigError`` where it
        cannot (``restartable``)."""
        if not self.restartable():
            raise ConfigError("only a llama-server tokperf started (no drafting server "
                              "beside it) can be restarted for a server start of its own")
        assert self._launch is not None and self._server is not None
        if self._engine is not None:
            self._engine.close()
        self._engine = None
        self._server.stop()
        self._restarts += 1
        spec = replace(self._launch, startup_deadline_s=None, log_path=self._launch.log_path
                       .with_name(f"{self._launch.log_path.stem}-{self._restarts}.log"))
        self._server = start_llama_server(spec)
        pairs = (*self._settings_pairs(), ("log_path", str(self._launch.log_path)))
        self._engine = self._make("llama-server", self._server.url, tuple(sorted(pairs)),
                                  self._server)
        return self._engine

    def draft_path(self, choice: str | None = None) -> Path:
        """The draft GGUF for ``choice`` (a path, ``self`` or ``small``; default
        ``--tokperf-draft-model``), refused unless llama-server could pair it with the model."""
        from pytest_tokperf.model.vocab import check_draft_vocab

        s = self.settings
        model = self._model_path
        if model is None:
            raise ConfigError("the model file is not known yet: start the engine first")
        choice = choice or s.draft_model or ("small" if s.model in BUILTIN_MODELS else None)
        if choice is None:
            raise ConfigError(
                "speculative decoding needs a draft model: pass --tokperf-draft-model PATH (a "
                "GGUF sharing the model's vocabulary), tok_bench.speculative(draft=PATH), or "
                "'self' to let the model draft for itself"
            )
        if choice == "self":
            return model
        if choice == "small":
            if s.model not in BUILTIN_MODELS:
                raise ConfigError(
                    f"draft 'small' is generated only for the built-in models, not for "
                    f"{s.model!r}; pass a draft GGUF from the same model family, or 'self'"
                )
            from pytest_tokperf.model.writer import MAIN_MODEL, TEST_MODEL, cached_model, draft_spec_for

            draft = cached_model(draft_spec_for(MAIN_MODEL if s.model == "main" else TEST_MODEL))
        else:
            draft = Path(choice).expanduser()
            check_model_file(draft, source=f"draft model {choice!r}")
        check_draft_vocab(model, draft)
        return draft

    def speculative_engine(self, draft: str | None = None) -> tuple[Engine, str]:
        """The drafting side of an A/B and its draft's name: the server at
        ``--tokperf-speculative-url``, else a second llama-server like the session's
        drafting with ``draft``, started on first use and stopped by ``close()``."""
        self.engine()
        if self.settings.speculative_url is not None:
            return self._attached_speculative(draft)
        if self._launch is None:
            where = f"attached to {redact_url(self.settings.url)}" if self.settings.url else (
                f"{self.settings.engine} was started")
            raise ConfigError(
                f"speculative A/B needs a llama-server that tokperf starts ({where}): "
                "llama-server cannot turn drafting on or off per request, so tokperf starts a "
                "second one with the draft; use --tokperf-engine llama-server without "
                "--tokperf-url, or start a drafting server yourself and pass "
                "--tokperf-speculative-url"
            )
        path = self.draft_path(draft)
        if str(path) not in self._drafts:
            # a fresh start-up budget: the main server's deadline passed long ago
            spec = replace(self._launch, draft_model=path, port=None, startup_deadline_s=None,
                           log_path=self.log_dir / f"llama-server-draft-{os.getpid()}-{len(self._drafts)}.log")
            self._say(f"starting a second llama-server drafting with {path.name}")
            server = start_llama_server(spec)
            pairs = (*self._settings_pairs(), ("draft_model", path.name),
                     ("log_path", str(spec.log_path)))
            try:
                engine = self._make("llama-server", server.url, tuple(sorted(pairs)), server)
            except BaseException:
                server.stop()
                raise
            self._drafts[str(path)] = (server, engine)
        return self._drafts[str(path)][1], path.name

    def _attached_speculative(self, draft: str | None) -> tuple[Engine, str]:
        url = self.settings.speculative_url
        assert url is not None
        name = Path(draft).name if draft else "attached-draft"
        if url not in self._drafts:  # one attached drafting engine, whatever the draft is called
            engine = self._make(self.settings.engine or "llama-server", url,
                                (("draft_model", name),))
            self._drafts[url] = (None, _ready(
                engine, "server", "--tokperf-speculative-url", "start the drafting server "
                "(llama-server -md DRAFT --spec-type draft-simple) or fix the URL"))
        return self._drafts[url][1], name

    def _start_other(self, name: str) -> Engine:
        """Start another engine from PATH with the flags a clean measurement needs that
        its help lists, recorded as the ``clean_flags`` setting."""
        from pytest_tokperf.launch.process import free_port
        from pytest_tokperf.launch.plans import (
            HELP_ARGS,
            HELP_TIMEOUT_S,
            find_binary,
            launch_plan,
            read_help,
            start_planned,
        )

        s = self.settings
        end = time.monotonic() + s.startup_timeout
        binary = find_binary(name, s.server_bin)
        model = None if s.model in BUILTIN_MODELS else s.model
        if name in HF_ENGINES and s.model in BUILTIN_MODELS:
            from pytest_tokperf.model.hf_writer import cached_hf_model
            from pytest_tokperf.model.writer import MAIN_MODEL, TEST_MODEL

            self._say(f"model: generating or reusing the '{s.model}' model as a "
                      "Hugging Face folder")
            self._model_path = cached_hf_model(MAIN_MODEL if s.model == "main" else TEST_MODEL)
            model = str(self._model_path)
        elif model is not None and Path(model).expanduser().exists():
            self._model_path = local_model(Path(model).expanduser())
            model = str(self._model_path)
        help_text = ""
        if name in HELP_ARGS:
            self._say(f"reading {binary.name}'s help for the flags it knows")
            help_text = read_help(name, binary, min(HELP_TIMEOUT_S, s.startup_timeout))
        plan = launch_plan(name, model=model, port=s.port or free_port(), binary=binary,
                           extra_args=s.server_args, help_text=help_text,
                           parallel=s.parallel, context_size=s.ctx_size, cpu=no_gpu())
        clean = " ".join(plan.clean)
        if name in HELP_ARGS and not help_text:
            clean = f"none: {binary.name} printed no help"
            self._say(f"{binary.name} printed no help: starting it without the flags "
                      "a clean measurement needs")
        self._say(f"starting {plan.shown}")
        log_path = self.log_dir / f"{name}-{os.getpid()}.log"
        if name == "vllm":
            # vLLM's temp files and compile cache go where tokperf keeps its own
            from pytest_tokperf.paths import cache_root

            scratch = self.log_dir / f"vllm-tmp-{os.getpid()}"
            scratch.mkdir(parents=True, exist_ok=True)
            plan = replace(plan, env=(*plan.env, ("TMPDIR", str(scratch)),
                                      ("VLLM_CACHE_ROOT", str(cache_root() / "vllm"))))
        self._server = start_planned(plan, log_path, end - time.monotonic())
        # Only what the engine received (mlx_lm.server has no threads, context or parallel)
        pairs = dict(plan.applied)
        if s.server_args:
            pairs["server_args"] = " ".join(s.server_args)
        if clean:
            pairs["clean_flags"] = clean
        if not plan.detaches:
            pairs["log_path"] = str(log_path)
        return self._make(name, plan.url, tuple(sorted(pairs.items())), self._server)

    def _make(self, name: str, url: str, pairs: tuple[tuple[str, str], ...],
              server: ServerProcess | DetachedServer | None = None) -> Engine:
        """The engine at ``url``; where tokperf started ``server`` and the engine computes in
        that process, the measurement reads its clock (``attach_process_clock``)."""
        s = self.settings
        # A local path is never sent as a model name (mlx_lm would load it anew); with none
        # asked for, each engine serves (and names) the one it loaded.
        model = None if (s.model in BUILTIN_MODELS or name == "llama-server"
                         or Path(s.model).expanduser().exists()) else s.model
        engine = create_engine(name, url, timeout_s=s.request_timeout, settings=pairs,
                               model=model, registry=self.registry, idle_timeout_s=s.idle_timeout,
                               api_key=s.api_key, max_body_bytes=s.max_body)
        if name in COMPUTES_IN_PROCESS and isinstance(server, ServerProcess):
            attach_process_clock(engine, server.process.pid)
        return engine

    def close(self) -> None:
        for server, engine in self._drafts.values():
            engine.close()
            if server is not None:
                server.stop()
        self._drafts.clear()
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._server is not None:
            self._server.stop()
