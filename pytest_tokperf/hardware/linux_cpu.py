"""Linux CPU and system RAM: ``/proc`` for the model and size, ``dmidecode`` for DIMMs
(root only); without channel labels every DIMM counts as a channel (errs high).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from pytest_tokperf.hardware.commands import Runner, TextReader, read_text, run_command
from pytest_tokperf.results import Bandwidth, HardwareInfo

_EMPTY_SLOT = ("no module installed", "not installed", "unknown", "0 b", "")
_CHANNEL = re.compile(r"channel\s*_?\s*([a-z0-9]+)", re.IGNORECASE)
_SOCKET = re.compile(r"\b(?:p|cpu|socket|node)\s*_?(\d+)", re.IGNORECASE)
_SLOT_LETTER = re.compile(r"dimm[\s_-]*([a-z])[\s_-]*\d+$", re.IGNORECASE)
"""``DIMM_A1``, ``P1-DIMMA1``: the letter is the channel. A bare ``A1`` (Dell) is not."""
_MTS = re.compile(r"(\d+)\s*(?:mt/s|mhz)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class DimmConfig:
    """What ``dmidecode -t 17`` says about the populated memory."""

    dimms: int
    channels: int
    transfers_per_s: float
    memory_type: str
    channels_from_labels: bool

    @property
    def bytes_per_s(self) -> float:
        return self.channels * 8 * self.transfers_per_s

    def bandwidth(self) -> Bandwidth:
        how = "" if self.channels_from_labels else ", channels assumed = DIMMs"
        detail = (
            f"{self.channels} channels x 8 B x {self.transfers_per_s / 1e6:.0f} MT/s "
            f"({self.memory_type}, {self.dimms} DIMMs{how})"
        )
        return Bandwidth(self.bytes_per_s, "dmidecode", detail)


def parse_cpu_model(cpuinfo: str) -> str | None:
    """``model name`` on x86; ``Model`` / ``Hardware`` on ARM boards."""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
        if match and match.group(1).strip():
            return " ".join(match.group(1).split())
    return None


def parse_mem_total(meminfo: str) -> int | None:
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", meminfo, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _devices(text: str) -> list[dict[str, str]]:
    devices: list[dict[str, str]] = []
    for block in re.split(r"\n\s*\n", text):
        if "Memory Device" in block:
            pairs = (line.strip().partition(":") for line in block.splitlines())
            devices.append({key.strip().lower(): value.strip() for key, sep, value in pairs if sep})
    return devices


def _channel_key(device: dict[str, str]) -> str | None:
    bank = device.get("bank locator", "")
    locator = device.get("locator", "")
    socket = _SOCKET.search(bank) or _SOCKET.search(locator)
    prefix = f"s{socket.group(1)}:" if socket else ""
    for label in (bank, locator):
        match = _CHANNEL.search(label)
        if match:
            return prefix + match.group(1).lower()
    match = _SLOT_LETTER.search(locator.split("-")[-1].strip())
    if match:
        return prefix + match.group(1).lower()
    return None


def parse_dmidecode(text: str) -> DimmConfig | None:
    """The populated DIMMs, channels and speed, or None when the output says too little."""
    populated = [d for d in _devices(text) if d.get("size", "").strip().lower() not in _EMPTY_SLOT]
    speeds: list[int] = []
    for device in populated:
        for key in ("configured memory speed", "configured clock speed", "speed"):
            match = _MTS.search(device.get(key, ""))
            if match and int(match.group(1)) > 0:
                speeds.append(int(match.group(1)))
                break
    if not populated or len(speeds) != len(populated):
        return None
    keys = [_channel_key(d) for d in populated]
    from_labels = all(k is not None for k in keys)
    channels = len(set(keys)) if from_labels else len(populated)
    types = sorted({d.get("type", "unknown") for d in populated})
    return DimmConfig(
        dimms=len(populated),
        channels=channels,
        transfers_per_s=min(speeds) * 1e6,
        memory_type="/".join(types),
        channels_from_labels=from_labels,
    )


def detect_linux_cpu(
    run: Runner = run_command,
    read: TextReader = read_text,
    platform: str = sys.platform,
) -> HardwareInfo | None:
    """The CPU and its RAM; never fails for want of ``dmidecode`` or root."""
    if not platform.startswith("linux"):
        return None
    cpuinfo = read("/proc/cpuinfo") or ""
    meminfo = read("/proc/meminfo") or ""
    name = parse_cpu_model(cpuinfo) or "unknown CPU"
    logical = len(re.findall(r"^processor\s*:", cpuinfo, re.MULTILINE))
    dmi_text = run(["dmidecode", "-t", "17"])
    dimms = parse_dmidecode(dmi_text) if dmi_text else None
    notes = [f"{logical} logical CPUs" if logical else "CPU count unknown"]
    if dimms is None:
        notes.append("no DIMM data (dmidecode missing, not root, or uninformative)")
    return HardwareInfo(name=name, kind="cpu", memory_bytes=parse_mem_total(meminfo),
                        spec_bandwidth=dimms.bandwidth() if dimms is not None else None,
                        detail="; ".join(notes))
