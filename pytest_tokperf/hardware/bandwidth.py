"""The bandwidth a ceiling divides by, from where the engine runs (``Placement``).

A GPU/RAM split reads ``1 / (gpu_share / gpu_bandwidth + cpu_share / cpu_bandwidth)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from pytest_tokperf.hardware.apple import detect_apple
from pytest_tokperf.hardware.commands import Runner, run_command
from pytest_tokperf.hardware.linux_cpu import detect_linux_cpu
from pytest_tokperf.hardware.nvidia import (
    NVIDIA_SMI_QUERY,
    detect_nvidia,
    nvidia_by_name,
    parse_nvidia_smi,
)
from pytest_tokperf.hardware.placement import Device, Placement
from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.results import Bandwidth, HardwareInfo


@dataclass(frozen=True, slots=True)
class BandwidthPart:
    """One resident part of the model: where it is, its share of the bytes, its bandwidth."""

    where: str
    share: float
    bandwidth: Bandwidth


@dataclass(frozen=True, slots=True)
class DeviceBandwidth:
    """The figure for the ceiling (None when unknown), its parts and the reasoning."""

    bandwidth: Bandwidth | None
    parts: tuple[BandwidthPart, ...]
    explanation: str
    hardware: HardwareInfo | None
    """The device the figure belongs to (the GPU for a split), for storage and FLOPs."""


def _figure(bw: Bandwidth) -> str:
    return f"{format_bandwidth(bw.bytes_per_s)} {bw.source}"


def _describe(info: HardwareInfo, bw: Bandwidth) -> str:
    return f"{info.name}, {_figure(bw)}"


def _named(info: HardwareInfo, label: str) -> bool:
    """``label`` (e.g. ``cuda:0 (NVIDIA H200)``) already names the device."""
    return bool(info.name) and info.name in label


def bandwidth_for(
    placement: Placement,
    *,
    gpu: HardwareInfo | None,
    cpu: HardwareInfo | None,
    explicit: float | None = None,
) -> DeviceBandwidth:
    """The bandwidth of ``placement``'s device or split; ``explicit`` wins."""
    if explicit is not None:
        bw = Bandwidth(explicit, "explicit", "given by the user")
        return DeviceBandwidth(bw, (BandwidthPart("given", 1.0, bw),),
                               f"{format_bandwidth(explicit)} given by the user", gpu or cpu)
    device = placement.device
    if device is None:
        chosen = gpu if gpu is not None and gpu.bandwidth is not None else cpu
        where = "GPU" if chosen is gpu and gpu is not None else "CPU"
        return _whole(chosen, f"the machine's {where} (the engine did not say where it runs)")
    if not device.is_gpu:
        return _whole(cpu, f"cpu ({placement.source})" if placement.source else "cpu")
    share = 1.0 if placement.gpu_fraction is None else placement.gpu_fraction
    label = device.describe()
    if share <= 0.0:
        return _whole(cpu, f"cpu: no layer on {label} ({placement.source})")
    gpu_bw = gpu.bandwidth if gpu is not None else None
    if gpu is None or gpu_bw is None:
        name = gpu.name if gpu is not None else device.name or label
        return DeviceBandwidth(None, (), f"no bandwidth known for {name} on {label}: pass "
                               "--tokperf-bandwidth, or add the GPU to the hardware catalog", gpu)
    notes = [placement.source] if placement.source else []
    if placement.gpu_fraction is None:
        notes.append(f"offload share unknown: all weights assumed on {label}")
    if placement.gpu_count > 1:
        notes.append(f"layers split over {placement.gpu_count} GPUs: a pipeline, one GPU's "
                     "bandwidth")
    if share >= 1.0:
        said = _figure(gpu_bw) if _named(gpu, label) else _describe(gpu, gpu_bw)
        text = f"{label}: {said}" + "".join(f"; {n}" for n in notes)
        return DeviceBandwidth(gpu_bw, (BandwidthPart(label, 1.0, gpu_bw),), text, gpu)
    cpu_bw = cpu.bandwidth if cpu is not None else None
    if cpu is None or cpu_bw is None:
        return DeviceBandwidth(None, (BandwidthPart(label, share, gpu_bw),), (
            f"{share:.0%} of the model on {label} and {1 - share:.0%} in system RAM, but no "
            "CPU bandwidth is known for the RAM part: pass --tokperf-bandwidth"), gpu)
    return _split(label, share, gpu, gpu_bw, cpu, cpu_bw, notes)


def _whole(info: HardwareInfo | None, where: str) -> DeviceBandwidth:
    bw = info.bandwidth if info is not None else None
    if info is None or bw is None:
        return DeviceBandwidth(None, (), f"no bandwidth known for {where}", info)
    return DeviceBandwidth(bw, (BandwidthPart(where, 1.0, bw),),
                           f"{where}: {_describe(info, bw)}", info)


def _split(
    label: str, share: float, gpu: HardwareInfo, gpu_bw: Bandwidth,
    cpu: HardwareInfo, cpu_bw: Bandwidth, notes: Sequence[str],
) -> DeviceBandwidth:
    seconds_per_byte = share / gpu_bw.bytes_per_s + (1 - share) / cpu_bw.bytes_per_s
    effective = 1 / seconds_per_byte
    on_gpu = f" at {_figure(gpu_bw)}" if _named(gpu, label) else f" ({_describe(gpu, gpu_bw)})"
    text = (
        f"split: {share:.0%} of the bytes on {label}{on_gpu} + "
        f"{1 - share:.0%} in system RAM ({_describe(cpu, cpu_bw)}): 1 / ({share:.2f} / "
        f"{format_bandwidth(gpu_bw.bytes_per_s)} + {1 - share:.2f} / "
        f"{format_bandwidth(cpu_bw.bytes_per_s)}) = {format_bandwidth(effective)} effective"
    ) + "".join(f"; {n}" for n in notes)
    bw = Bandwidth(effective, "split", text)
    parts = (BandwidthPart(label, share, gpu_bw), BandwidthPart("cpu", 1 - share, cpu_bw))
    return DeviceBandwidth(bw, parts, text, gpu)


def device_hardware(
    device: Device,
    *,
    nvml: ModuleType | None = None,
    run: Runner = run_command,
) -> HardwareInfo | None:
    """What is known about one device, or None. Never raises."""
    try:
        if device.kind == "cpu":
            return detect_linux_cpu(run=run)
        if device.kind == "metal":
            return detect_apple(run=run)
        index = device.index or 0
        if device.kind in ("cuda", "gpu"):
            info = detect_nvidia(nvml=nvml, cuda_index=index)
            if info is not None:
                return info
            if device.name:
                return nvidia_by_name(device.name, "NVML unavailable; GPU named by the "
                                      "engine's log")
            listed = {i: (name, memory) for i, name, memory
                      in parse_nvidia_smi(run(NVIDIA_SMI_QUERY))}
            if index in listed:
                name, memory = listed[index]
                return nvidia_by_name(name, "NVML unavailable; GPU named by nvidia-smi", memory)
            if device.kind == "cuda":
                return None
        if device.name:
            return nvidia_by_name(device.name, f"{device.label}: catalog by the engine's "
                                  "device name", figure=False)
        return None
    except Exception as exc:  # a provider's failure is a note, never a broken run
        return HardwareInfo(name=device.name or device.label, kind="unknown",
                            detail=f"detecting {device.label} failed: {exc!r}")
