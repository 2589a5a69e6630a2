"""What llama-server prints while it loads, read into ``ServerSettings``.

Patterns are llama.cpp's log formats, older spellings kept; recent builds print the
details only at ``-lv 4``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_tokperf.engines.speed_settings import (BackendDevice, ServerSettings, parse_backend,
                                                   parse_flash_attn)
from pytest_tokperf.hardware.placement import backend_of_device_name

MIB = 2**20
_USING = re.compile(r"using device (\S+) \((.*?)\)(?: \([^)]*\))? - (\d+) MiB free")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"(\S+) model buffer size =\s*([\d.]+) MiB")
_CUDA = re.compile(r"^\s*Device (\d+): (.+?), compute capability", re.MULTILINE)
_VULKAN = re.compile(r"ggml_vulkan: (\d+) = (.+?) \|")
_METAL = re.compile(r"(?:GPU name|found device):\s+(.+?)\s*$", re.MULTILINE)
_SETTING = re.compile(r"llama_context: (n_batch|n_ubatch|flash_attn)\s+=\s+(\S+)")
_FA_ACTIVE = re.compile(r"Flash Attention (?:was auto, set to )?(enabled|disabled)")
_KV = re.compile(r"K \((\w+)\):\s*[\d.]+ MiB, V \((\w+)\)")
_THREADS = re.compile(r"system_info: n_threads = (\d+) \(n_threads_batch = (\d+)\)")
_LISTED = re.compile(r"^\s+(\S+): (.+?) \((\d+) MiB, \d+ MiB free\)\s*$", re.MULTILINE)


def parse_llama_server_log(text: str) -> ServerSettings:
    """The settings and placement a llama-server start-up log shows (unknowns None)."""
    devices: dict[str, BackendDevice] = {}
    for name, description, free_mib in _USING.findall(text):
        devices[name] = BackendDevice(name, description.strip(), int(free_mib) * MIB)
    for index, description in _CUDA.findall(text):
        devices.setdefault(f"CUDA{index}", BackendDevice(f"CUDA{index}", description.strip()))
    for index, description in _VULKAN.findall(text):
        devices.setdefault(f"Vulkan{index}", BackendDevice(f"Vulkan{index}", description.strip()))
    for description in _METAL.findall(text):
        devices.setdefault("Metal", BackendDevice("Metal", description.strip()))
        break
    for buffer, mib in _BUFFER.findall(text):
        if buffer in devices:
            devices[buffer] = replace(devices[buffer], model_bytes=round(float(mib) * MIB))

    offloaded = _OFFLOADED.findall(text)
    settings = {key: value for key, value in _SETTING.findall(text)}
    fa_active = _FA_ACTIVE.findall(text)
    kv = _KV.findall(text)
    threads = _THREADS.findall(text)
    gpus = [d for d in devices.values() if d.backend not in ("cpu", "unknown")]
    backend = parse_backend(gpus[0].backend) if gpus else None
    if backend is None and ("no usable GPU found" in text or _cpu_only(text)):
        backend = "cpu"
    return ServerSettings(
        flash_attn=parse_flash_attn(settings.get("flash_attn")),
        cache_type_k=kv[-1][0].lower() if kv else None,
        cache_type_v=kv[-1][1].lower() if kv else None,
        batch_size=int(settings["n_batch"]) if "n_batch" in settings else None,
        ubatch_size=int(settings["n_ubatch"]) if "n_ubatch" in settings else None,
        threads=int(threads[-1][0]) if threads else None,
        threads_batch=int(threads[-1][1]) if threads else None,
        backend=backend,
        devices=tuple(gpus),
        offloaded_layers=int(offloaded[-1][0]) if offloaded else None,
        layer_count=int(offloaded[-1][1]) if offloaded else None,
        flash_attn_active=(fa_active[-1] == "enabled") if fa_active else None,
        sources=("server log",),
    )


def _cpu_only(text: str) -> bool:
    """Model buffers were printed and every one of them is host memory."""
    buffers = [name for name, _ in _BUFFER.findall(text)]
    return bool(buffers) and all(backend_of_device_name(b) == "cpu" for b in buffers)


def parse_list_devices(text: str) -> ServerSettings:
    """``llama-server --list-devices``: the build's GPU devices; ``(none)`` is a CPU build."""
    if "Available devices" not in text:
        return ServerSettings()
    devices = tuple(
        BackendDevice(name, description.strip(), int(total) * MIB)
        for name, description, total in _LISTED.findall(text)
    )
    gpus = [d for d in devices if d.backend not in ("cpu", "unknown")]
    backend = parse_backend(gpus[0].backend) if gpus else "cpu"
    return ServerSettings(backend=backend, devices=tuple(gpus), sources=("--list-devices",))


def read_log(path: Path, limit_bytes: int = 4 * MIB) -> str:
    """The start of a server log (where loading is printed); empty when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit_bytes)
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class BinaryFacts:
    """What a llama-server binary says about itself before it serves anything."""

    devices: ServerSettings
    """``--list-devices``: the build's backend and GPU devices (``backend`` None: unknown)."""
    trace_args: tuple[str, ...]
    """``("-lv", "4")`` where the build has it: recent builds log devices only at trace."""


TRACE_FLAGS = ("-lv", "--verbosity", "--log-verbosity", "-v", "--verbose", "--log-disable")


def llama_binary_facts(binary: Path, timeout_s: float = 60.0) -> BinaryFacts:
    """Run ``--help`` and ``--list-devices`` once each; never raises (unknowns: None)."""
    import time

    from pytest_tokperf.helper_runs import run_helper

    end = time.monotonic() + timeout_s

    def output(flag: str) -> str:
        done = run_helper([str(binary), flag], end - time.monotonic())
        return done.text if done is not None else ""

    help_text = output("--help")
    trace = ("-lv", "4") if re.search(r"^-lv,", help_text, re.MULTILINE) else ()
    return BinaryFacts(parse_list_devices(output("--list-devices")), trace)


def wants_own_verbosity(args: tuple[str, ...]) -> bool:
    """The user set the log verbosity: leave it alone."""
    return any(a.split("=")[0] in TRACE_FLAGS for a in args)
