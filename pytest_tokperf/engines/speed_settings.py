"""The speed settings of any engine server, typed: what was asked for and what it did.

*Requested* fields make the series key (defaults as None); *observed* fields fill the
stored environment and tell the ceiling where the weights are (``placement_of``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal, cast

from pytest_tokperf.engines.values import MAX_TOKENS, count_or_none
from pytest_tokperf.hardware.placement import Device, Placement, backend_of_device_name
from pytest_tokperf.results import EngineInfo

Backend = Literal[
    "cpu", "cuda", "rocm", "metal", "vulkan", "sycl", "opencl", "cann", "musa", "rpc"
]
FlashAttn = Literal["on", "off", "auto"]

LLAMA_SERVER_DEFAULTS: dict[str, object] = {
    "batch_size": 2048,
    "ubatch_size": 512,
    "flash_attn": "auto",
    "gpu_layers": "auto",
    "cache_type_k": "f16",
    "cache_type_v": "f16",
    "split_mode": "layer",
    "parallel": 1,
}
"""llama-server's defaults and tokperf's one slot: equal values keep the series key."""

OLLAMA_DEFAULTS: dict[str, object] = {"batch_size": 512, "gpu_layers": "auto", "parallel": 1}
"""Ollama's ``num_batch`` (512) and ``num_gpu`` (all that fit) defaults (api/types.go)."""

DEFAULTS: dict[str, dict[str, object]] = {"llama-server": LLAMA_SERVER_DEFAULTS,
                                          "ollama": OLLAMA_DEFAULTS}

_GPU_ENGINES = {"vllm": "cuda", "sglang": "cuda", "mlx": "metal"}
"""Where each engine runs when it does not say (a ``device`` setting wins)."""


@dataclass(frozen=True, slots=True)
class BackendDevice:
    """One device a llama.cpp build offers or uses: ``CUDA0`` = ``NVIDIA H200``."""

    name: str
    description: str = ""
    memory_bytes: int | None = None
    model_bytes: int | None = None
    """Model weights placed on it (the log's ``model buffer size``)."""

    @property
    def backend(self) -> str:
        return backend_of_device_name(self.name)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Requested and observed speed settings; None means not known."""

    # requested: what a comparison varies (the series key)
    flash_attn: FlashAttn | None = None
    gpu_layers: str | None = None
    """``auto``, ``all`` or a count as text, as ``-ngl`` takes it."""
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None
    threads: int | None = None
    threads_batch: int | None = None
    context_size: int | None = None
    """Per slot, as ``/props`` and ``EngineInfo.context_size`` say it."""
    parallel: int | None = None
    split_mode: str | None = None
    main_gpu: int | None = None
    tensor_split: str | None = None
    device_arg: str | None = None
    """``-dev``: the devices asked for (``none`` = no offload)."""
    # observed: what the server did
    backend: Backend | None = None
    devices: tuple[BackendDevice, ...] = ()
    offloaded_layers: int | None = None
    layer_count: int | None = None
    """``n_layer + 1`` (the output layer counts), as ``offloaded N/M layers`` says."""
    flash_attn_active: bool | None = None
    vram_fraction: float | None = None
    """Ollama: ``size_vram / size`` of the loaded model (1.0 = all on the GPU)."""
    sources: tuple[str, ...] = field(default=())

    def merged(self, later: ServerSettings) -> ServerSettings:
        """These settings with every field ``later`` knows replaced by its value."""
        changes: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(later, f.name)
            if f.name == "sources":
                changes["sources"] = tuple(dict.fromkeys((*self.sources, *later.sources)))
            elif value not in (None, ()):
                changes[f.name] = value
        return replace(self, **changes)

    @property
    def gpu_devices(self) -> tuple[BackendDevice, ...]:
        return tuple(d for d in self.devices if d.backend != "cpu")

    @property
    def effective_gpu_layers(self) -> int | None:
        """Layers on a GPU: the log's count, else the request when it is a number."""
        if self.offloaded_layers is not None:
            return self.offloaded_layers
        if self.backend == "cpu" or self.device_arg == "none":
            return 0
        return _int(self.gpu_layers)

    def to_pairs(self) -> dict[str, str]:
        """String pairs for ``EngineInfo.settings`` (only known values)."""
        pairs: dict[str, str] = {}
        for name, value in asdict(self).items():
            if value in (None, (), []) or name == "sources":
                continue
            if name == "devices":
                pairs["devices"] = ";".join(_device_text(BackendDevice(**d)) for d in value)
            elif isinstance(value, bool):
                pairs[name] = "true" if value else "false"
            else:
                pairs[name] = str(value)
        if self.sources:
            pairs["settings_sources"] = "; ".join(self.sources)
        return pairs

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, str] | Sequence[tuple[str, str]]) -> ServerSettings:
        """Settings from ``EngineInfo.settings``, including names older code wrote."""
        raw = {k.lower(): v for k, v in (pairs.items() if isinstance(pairs, Mapping) else pairs)}

        def first(*names: str) -> str | None:
            return next((raw[n] for n in names if raw.get(n) not in (None, "", "None")), None)

        k_type = first("cache_type_k", "type_k")
        v_type = first("cache_type_v", "type_v")
        combined = first("kv_type", "cache_type", "type_kv")
        if combined is not None and k_type is None and v_type is None:
            k_type, _, v_part = combined.partition("/")
            v_type = v_part or k_type
        active = first("flash_attn_active")
        fraction = first("vram_fraction")
        size, vram = _int(first("size_bytes")), _int(first("size_vram_bytes"))
        if fraction is None and size and vram is not None:  # Ollama /api/ps
            fraction = str(min(vram / size, 1.0))
        return cls(
            flash_attn=parse_flash_attn(first("flash_attn", "fa")),
            gpu_layers=_layers(first("gpu_layers", "n_gpu_layers", "ngl", "num_gpu")),
            cache_type_k=k_type.lower() if k_type else None,
            cache_type_v=v_type.lower() if v_type else None,
            batch_size=_int(first("batch_size", "batch", "n_batch", "num_batch")),
            ubatch_size=_int(first("ubatch_size", "ubatch", "n_ubatch")),
            threads=_int(first("threads", "num_thread")),
            threads_batch=_int(first("threads_batch")),
            context_size=_int(first("context_size", "num_ctx")),
            parallel=_int(first("parallel", "total_slots")),
            split_mode=first("split_mode"),
            main_gpu=_int(first("main_gpu")),
            tensor_split=first("tensor_split"),
            device_arg=first("device_arg"),
            backend=parse_backend(first("backend")),
            devices=tuple(_device_from_text(t) for t in (first("devices") or "").split(";") if t),
            offloaded_layers=_int(first("offloaded_layers")),
            layer_count=_int(first("layer_count")),
            flash_attn_active=None if active is None else active == "true",
            vram_fraction=float(fraction) if fraction else None,
            sources=tuple(p for p in (first("settings_sources") or "").split("; ") if p),
        )

    @classmethod
    def from_engine(cls, engine: EngineInfo) -> ServerSettings:
        """What an ``EngineInfo`` says, its typed fields winning over its pairs."""
        base = cls.from_pairs(engine.settings)
        server_args = dict(engine.settings).get("server_args")
        if server_args and engine.name == "llama-server":
            base = parse_llama_server_args(server_args.split()).merged(base)
        return replace(
            base,
            threads=engine.threads if engine.threads is not None else base.threads,
            backend=parse_backend(engine.backend) or base.backend,
        )

    def columns(self) -> dict[str, object]:
        """The stored environment's speed columns: what the engine ran with."""
        return {
            "batch_size": self.batch_size,
            "ubatch_size": self.ubatch_size,
            "gpu_layers": self.effective_gpu_layers,
            "flash_attn": self.flash_attn,
            "kv_type": self.cache_type_k,
            "kv_type_v": self.cache_type_v,
            "threads_batch": self.threads_batch,
            "parallel": self.parallel,
            "split_mode": self.split_mode,
            "layer_count": self.layer_count,
            "flash_attn_active": self.flash_attn_active,
            "vram_fraction": self.vram_fraction,
            "devices": ";".join(_device_text(d) for d in self.devices) or None,
        }

    def series_fields(self, engine: str) -> dict[str, object]:
        """The requested settings as the series key holds them: defaults and equal-speed
        spellings (``-ngl all``/``999`` -> ``-1``) normalised."""
        defaults = DEFAULTS.get(engine, {})

        def keep(name: str, value: object) -> object:
            return None if value is None or defaults.get(name) == value else value

        k_type = self.cache_type_k or cast("str | None", defaults.get("cache_type_k"))
        v_type = self.cache_type_v or cast("str | None", defaults.get("cache_type_v"))
        return {
            "batch_size": keep("batch_size", self.batch_size),
            "ubatch_size": keep("ubatch_size", self.ubatch_size),
            "gpu_layers": self._gpu_layers_key(defaults),
            "flash_attn": keep("flash_attn", self.flash_attn),
            "kv_type": keep("cache_type_k", k_type),
            "kv_type_v": None if v_type == k_type else v_type,
            "threads_batch": None if self.threads_batch == self.threads else self.threads_batch,
            "parallel": keep("parallel", self.parallel),
            "split_mode": keep("split_mode", self.split_mode) if len(self.gpu_devices) > 1 else None,
            "backend": None if self.backend == "cpu" else self.backend,
        }

    def _gpu_layers_key(self, defaults: Mapping[str, object]) -> int | None:
        if self.backend == "cpu" or self.gpu_layers in (None, defaults.get("gpu_layers")):
            return None
        if self.gpu_layers in ("all", "-1"):
            return -1
        count = _int(self.gpu_layers)
        if count is not None and self.layer_count is not None and count >= self.layer_count:
            return -1
        return count


def placement_of(engine: EngineInfo, override: Device | None = None) -> Placement:
    """Where ``engine`` runs its model and how the weights are split: ``override`` wins,
    then what the engine said, then the engine's usual device."""
    if override is not None:
        return Placement(device=override, source="--tokperf-device")
    settings = ServerSettings.from_engine(engine)
    reported = dict(engine.settings).get("device")
    if reported:
        source = dict(engine.settings).get("device_source") or f"{engine.name} says so"
        return Placement(device=Device.parse(reported, f"{engine.name}'s device"),
                         source=source)
    if engine.name in _GPU_ENGINES:
        kind = _GPU_ENGINES[engine.name]
        return Placement(device=Device(kind, 0 if kind == "cuda" else None),
                         source=f"{engine.name} runs on the GPU")
    if settings.vram_fraction is not None:  # Ollama
        on_gpu = settings.vram_fraction > 0
        return Placement(
            device=Device("gpu" if on_gpu else "cpu", 0 if on_gpu else None),
            gpu_fraction=settings.vram_fraction if on_gpu else None,
            source=f"ollama /api/ps: {settings.vram_fraction:.0%} of the model in GPU memory",
        )
    return _llama_placement(settings)


def _llama_placement(settings: ServerSettings) -> Placement:
    gpus = settings.gpu_devices
    backend = settings.backend
    if backend is None and not gpus:
        return Placement(device=None, source="the engine did not say where it runs")
    offloaded = settings.effective_gpu_layers
    if backend == "cpu" or settings.device_arg == "none" or offloaded == 0:
        why = "CPU backend" if backend == "cpu" else "no layer offloaded"
        return Placement(device=Device("cpu"), source=f"llama-server: {why}")
    first = gpus[0] if gpus else None
    kind = first.backend if first else cast(str, backend)
    device = Device(kind, _index(first.name) if first else settings.main_gpu or 0,
                    first.description if first else None)
    fraction: float | None = None
    how = f"llama-server: {kind} backend"
    if offloaded is not None and settings.layer_count:
        fraction = min(offloaded, settings.layer_count) / settings.layer_count
        how = f"llama-server log: offloaded {offloaded}/{settings.layer_count} layers"
    elif settings.gpu_layers in (None, "auto", "all", "-1"):
        fraction = 1.0 if settings.gpu_layers in ("all", "-1") else None
    return Placement(device=device, gpu_fraction=fraction, gpu_count=max(len(gpus), 1),
                     source=how)


def _index(name: str) -> int | None:
    match = re.search(r"(\d+)$", name)
    return int(match.group(1)) if match else None


_FLAGS: dict[str, str] = {
    "-fa": "flash_attn", "--flash-attn": "flash_attn",
    "-ngl": "gpu_layers", "--gpu-layers": "gpu_layers", "--n-gpu-layers": "gpu_layers",
    "-ctk": "cache_type_k", "--cache-type-k": "cache_type_k",
    "-ctv": "cache_type_v", "--cache-type-v": "cache_type_v",
    "-b": "batch_size", "--batch-size": "batch_size",
    "-ub": "ubatch_size", "--ubatch-size": "ubatch_size",
    "-t": "threads", "--threads": "threads",
    "-tb": "threads_batch", "--threads-batch": "threads_batch",
    "-c": "context_size", "--ctx-size": "context_size",
    "-np": "parallel", "--parallel": "parallel",
    "-sm": "split_mode", "--split-mode": "split_mode",
    "-mg": "main_gpu", "--main-gpu": "main_gpu",
    "-ts": "tensor_split", "--tensor-split": "tensor_split",
    "-dev": "device_arg", "--device": "device_arg",
}
_ENV: dict[str, str] = {
    "LLAMA_ARG_FLASH_ATTN": "flash_attn", "LLAMA_ARG_N_GPU_LAYERS": "gpu_layers",
    "LLAMA_ARG_CACHE_TYPE_K": "cache_type_k", "LLAMA_ARG_CACHE_TYPE_V": "cache_type_v",
    "LLAMA_ARG_BATCH": "batch_size", "LLAMA_ARG_UBATCH": "ubatch_size",
    "LLAMA_ARG_THREADS": "threads", "LLAMA_ARG_CTX_SIZE": "context_size",
    "LLAMA_ARG_N_PARALLEL": "parallel", "LLAMA_ARG_SPLIT_MODE": "split_mode",
    "LLAMA_ARG_MAIN_GPU": "main_gpu", "LLAMA_ARG_TENSOR_SPLIT": "tensor_split",
    "LLAMA_ARG_DEVICE": "device_arg",
}
_FA_WORDS = {"on", "off", "auto", "1", "0", "true", "false", "enabled", "disabled"}


def parse_llama_server_args(args: Sequence[str],
                            env: Mapping[str, str] | None = None) -> ServerSettings:
    """Speed settings a llama-server command line (over ``LLAMA_ARG_*``) asks for."""
    raw: dict[str, str] = {}
    for name, attr in _ENV.items():
        if env and env.get(name):
            raw[attr] = env[name]
    items = list(args)
    i = 0
    while i < len(items):
        flag, eq, inline = items[i].partition("=")
        target = _FLAGS.get(flag)
        if target is None:
            i += 1
            continue
        if eq:
            raw[target] = inline
        elif target == "flash_attn" and (
            i + 1 >= len(items) or items[i + 1].lower() not in _FA_WORDS
        ):
            raw[target] = "on"
        elif i + 1 < len(items):
            raw[target] = items[i + 1]
            i += 1
        i += 1
    settings = ServerSettings.from_pairs(raw)
    if settings.context_size and settings.parallel and settings.parallel > 1:
        settings = replace(settings, context_size=settings.context_size // settings.parallel)
    return replace(settings, sources=("command line",) if raw else ())


def parse_props(props: Mapping[str, Any]) -> ServerSettings:
    """What ``GET /props`` says: context per slot and the number of slots."""
    defaults = props.get("default_generation_settings")
    n_ctx = defaults.get("n_ctx") if isinstance(defaults, Mapping) else None
    return ServerSettings(  # the adapter notes values that cannot be used
        context_size=count_or_none(n_ctx, MAX_TOKENS),
        parallel=count_or_none(props.get("total_slots"), MAX_TOKENS),
        sources=("/props",),
    )


def _device_text(device: BackendDevice) -> str:
    parts = [device.name, device.description, str(device.memory_bytes or ""),
             str(device.model_bytes or "")]
    return "|".join(p.replace("|", "/").replace(";", ",") for p in parts)


def _device_from_text(text: str) -> BackendDevice:
    name, description, memory, model = (text.split("|") + ["", "", ""])[:4]
    return BackendDevice(name, description, _int(memory), _int(model))


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text)) if re.fullmatch(r"-?\d+(\.0+)?", str(text).strip()) else None
    except ValueError:
        return None


def parse_flash_attn(text: str | None) -> FlashAttn | None:
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("1", "true", "on", "yes", "enabled"):
        return "on"
    if word in ("0", "false", "off", "no", "disabled"):
        return "off"
    return "auto" if word == "auto" else None


def _layers(text: str | None) -> str | None:
    if text is None:
        return None
    word = text.strip().lower()
    if word in ("auto", "all"):
        return word
    count = _int(word)
    return None if count is None else str(count)


_BACKENDS = set(Backend.__args__)  # type: ignore[attr-defined]


def parse_backend(text: str | None) -> Backend | None:
    if not text:
        return None
    word = text.strip().lower()
    word = {"hip": "rocm", "mtl": "metal", "blas": "cpu"}.get(word, word)
    return cast(Backend, word) if word in _BACKENDS else None
