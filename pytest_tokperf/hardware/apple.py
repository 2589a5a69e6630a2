"""Apple Silicon: chip name and memory from ``sysctl``, GPU cores from ``system_profiler``;
the bandwidth is the catalog's for the chip (the GPU core count tells binned chips apart).
"""

from __future__ import annotations

import json
import sys

from pytest_tokperf.hardware.catalog import lookup
from pytest_tokperf.hardware.commands import Runner, run_command
from pytest_tokperf.results import HardwareInfo


def parse_gpu_cores(profiler_json: str | None) -> int | None:
    """``sppci_cores`` of the first display adapter that reports one."""
    if not profiler_json:
        return None
    try:
        data = json.loads(profiler_json)
    except ValueError:
        return None
    adapters = data.get("SPDisplaysDataType") if isinstance(data, dict) else None
    if not isinstance(adapters, list):
        return None
    for adapter in adapters:
        cores = adapter.get("sppci_cores") if isinstance(adapter, dict) else None
        if isinstance(cores, int) and cores > 0:
            return cores
        if isinstance(cores, str) and cores.strip().isdigit():
            return int(cores.strip())
    return None


def detect_apple(run: Runner = run_command, platform: str = sys.platform) -> HardwareInfo | None:
    """The Apple Silicon chip this Mac runs on, or None off macOS or on an Intel Mac."""
    if platform != "darwin":
        return None
    brand = (run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "").strip()
    if not brand.startswith("Apple"):
        return None
    memsize = (run(["sysctl", "-n", "hw.memsize"]) or "").strip()
    memory_bytes = int(memsize) if memsize.isdigit() else None
    cores = parse_gpu_cores(run(["system_profiler", "SPDisplaysDataType", "-json"]))
    entry = lookup(brand, gpu_cores=cores, kind="apple")
    notes = [f"{cores}-core GPU" if cores else "GPU core count unknown"]
    if entry is not None:
        notes.append(f"catalog row {entry.name}")
    return HardwareInfo(name=brand, kind="apple", memory_bytes=memory_bytes,
                        spec_bandwidth=entry.bandwidth() if entry is not None else None,
                        peak_flops=entry.fp16_flops if entry is not None else None,
                        detail="; ".join(notes))
