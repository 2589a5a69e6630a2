"""Which machine the engine runs on, and the bandwidth its ceiling divides by: the user's
figure, else NVML, Apple Silicon, the Linux CPU (spec plus read probe), in that order.
"""

from __future__ import annotations

import math
import platform
import sys
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from pytest_tokperf.errors import ConfigError, TokperfWarning
from pytest_tokperf.hardware.apple import detect_apple
from pytest_tokperf.hardware.catalog import CATALOG_ENV
from pytest_tokperf.hardware.linux_cpu import detect_linux_cpu
from pytest_tokperf.hardware.nvidia import detect_nvidia
from pytest_tokperf.hardware.probe import probe_read_bandwidth
from pytest_tokperf.hardware.units import format_bandwidth
from pytest_tokperf.results import Bandwidth, HardwareInfo

Provider = Literal["nvidia", "apple", "cpu"]
PROVIDERS: tuple[Provider, ...] = ("nvidia", "apple", "cpu")
_ALIASES: dict[str, Provider] = {"gpu": "nvidia", "cuda": "nvidia",
                                 "mac": "apple", "metal": "apple"}
_HOW_TO_PASS = "pass one with --tokperf-bandwidth 1008GB/s (or PYTEST_TOKPERF_BANDWIDTH)"


def _provider_order(prefer: str | None) -> tuple[Provider, ...]:
    if prefer is None:
        return PROVIDERS
    key = prefer.strip().lower()
    chosen = _ALIASES.get(key, key)
    if chosen not in PROVIDERS:
        raise ConfigError(f"hardware preference {prefer!r} is not one of "
                          f"{', '.join(PROVIDERS)} (or gpu, which means nvidia)")
    return (chosen, *(p for p in PROVIDERS if p != chosen))


def detect_hardware(
    explicit_bandwidth: float | None = None,
    probe: bool = True,
    threads: int | None = None,
    prefer: str | None = None,
    *,
    probe_size_bytes: int | None = None,
    probe_duration_s: float = 2.0,
) -> HardwareInfo:
    """Describe this machine; only bad arguments raise ``ConfigError``.
    ``explicit_bandwidth`` (bytes/s) wins; ``prefer`` puts one provider first; warns when
    no bandwidth is known."""
    if explicit_bandwidth is not None and not (
            math.isfinite(explicit_bandwidth) and explicit_bandwidth > 0):
        raise ConfigError(f"explicit bandwidth {explicit_bandwidth!r} bytes/s must be positive; "
                          "for example 1.008e12 for 1008 GB/s")
    info: HardwareInfo | None = None
    detectors: dict[Provider, Callable[[], HardwareInfo | None]] = {
        "nvidia": detect_nvidia, "apple": detect_apple, "cpu": detect_linux_cpu}
    failures: list[str] = []
    for provider in _provider_order(prefer):
        try:
            info = detectors[provider]()
        except Exception as exc:  # a provider's failure is a note in ``detail``, never a failure
            failures.append(f"{provider} detection failed: {exc!r}")
        if info is not None:
            break
    if info is None:
        name = platform.processor() or platform.machine() or "unknown CPU"
        info = HardwareInfo(name=name, kind="cpu", detail=f"no detector for {sys.platform}")
    if failures:
        info = replace(info, detail="; ".join(p for p in (info.detail, *failures) if p))

    if explicit_bandwidth is not None:
        given = Bandwidth(explicit_bandwidth, "explicit", "given by the user")
        detected = info.spec_bandwidth
        note = (f"detected spec {format_bandwidth(detected.bytes_per_s)} ({detected.source}) "
                "overridden" if detected is not None else "")
        detail = "; ".join(part for part in (info.detail, note) if part)
        return replace(info, spec_bandwidth=given, detail=detail)

    if info.kind == "cpu" and probe:
        try:
            result = probe_read_bandwidth(
                size_bytes=probe_size_bytes, threads=threads, duration_s=probe_duration_s
            )
        except ConfigError:
            raise  # a bad probe argument is the caller's usage error, not the machine's
        except Exception as exc:  # MemoryError, OSError from a starved machine
            info = replace(info, detail=f"{info.detail}; read probe failed: {exc!r}")
        else:
            passes = ", ".join(f"{b / 1e9:.1f}" for b in result.passes_bytes_per_s)
            note = f"probe passes {passes} GB/s (spread {result.spread:.0%})"
            detail = f"{info.detail}; {note}" if info.detail else note
            info = replace(info, measured_bandwidth=result.bandwidth, detail=detail)
    if info.bandwidth is None:
        what = "GPU" if info.kind in ("gpu", "apple") else "machine"
        remedy = "" if info.kind != "cpu" else " or let the read probe run"
        warnings.warn(
            f"no memory bandwidth known for {what} {info.name!r}: the decode ceiling "
            f"cannot be computed; {_HOW_TO_PASS}{remedy}, or add a row to the hardware "
            f"catalog (db/hardware.csv in the source, or {CATALOG_ENV} for your own file)",
            TokperfWarning,
            stacklevel=2,
        )
    return info
