"""Hardware detection: which device runs the engine and how fast its memory is.

Providers (NVML, Apple, Linux CPU) each return a ``HardwareInfo`` or None; the spec
catalog ships in the package as ``hardware.csv``; the probe measures read bandwidth.
"""

from __future__ import annotations

from pytest_tokperf.hardware.apple import detect_apple
from pytest_tokperf.hardware.bandwidth import DeviceBandwidth, bandwidth_for, device_hardware
from pytest_tokperf.hardware.catalog import CatalogEntry, close_names, load_catalog, lookup
from pytest_tokperf.hardware.detect import detect_hardware
from pytest_tokperf.hardware.linux_cpu import detect_linux_cpu
from pytest_tokperf.hardware.nvidia import detect_nvidia, nvml_bandwidth_bytes_per_s
from pytest_tokperf.hardware.placement import Device, Placement
from pytest_tokperf.hardware.probe import ProbeResult, probe_read_bandwidth
from pytest_tokperf.hardware.units import format_bandwidth, parse_bandwidth

__all__ = [
    "CatalogEntry", "Device", "DeviceBandwidth", "Placement", "ProbeResult", "bandwidth_for",
    "close_names", "detect_apple", "detect_hardware", "detect_linux_cpu", "detect_nvidia",
    "device_hardware", "format_bandwidth", "load_catalog", "lookup",
    "nvml_bandwidth_bytes_per_s", "parse_bandwidth", "probe_read_bandwidth",
]
