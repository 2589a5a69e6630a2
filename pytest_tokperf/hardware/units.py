"""Bandwidth strings in, bytes per second out (decimal units); and back for messages."""

from __future__ import annotations

import math
import re

from pytest_tokperf.errors import ConfigError

_UNITS: dict[str, float] = {
    "b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
    "kib/s": 2.0**10, "mib/s": 2.0**20, "gib/s": 2.0**30, "tib/s": 2.0**40,
}
_BIT_PREFIX = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
MIN_BYTES_PER_S = 1e8
"""0.1 GB/s: slower than any memory a model could decode from."""
MAX_BYTES_PER_S = 1e14
"""100 TB/s: faster than any memory made (an H200 has 4.8 TB/s)."""
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z/]*)\s*$", re.IGNORECASE)
_EXAMPLES = (
    "'1008GB/s', '1008 GB/s', '1.0TB/s', '800GiB/s' or a bare number of GB/s such as '68.25'"
)


def parse_bandwidth(value: str | float) -> float:
    """``"1008GB/s"`` -> ``1.008e12`` bytes/s; a bare number means GB/s. Raises
    ``ConfigError`` naming the value for anything unparsable, zero or negative."""
    if isinstance(value, bool):
        raise ConfigError(f"memory bandwidth {value!r} is not a number; use {_EXAMPLES}")
    if isinstance(value, (int, float)):
        number, unit = float(value), "gb/s"
    else:
        match = _PATTERN.match(value)
        if match is None:
            raise ConfigError(f"cannot read memory bandwidth {value!r}; use {_EXAMPLES}")
        number, unit = float(match.group(1)), (match.group(2).lower() or "gb/s")
        bits = _bits(value, match.group(2))
        if bits is not None:
            gb = number * _BIT_PREFIX.get(bits[:1].lower(), 1.0) / 8 / 1e9
            raise ConfigError(
                f"memory bandwidth {value!r} is in bits per second ({bits!r}, lowercase b); "
                f"tokperf reads bytes: {value.strip()} is {gb:g} GB/s, so pass '{gb:g}GB/s' "
                f"(or, if you meant bytes, write the unit with a capital B: "
                f"'{number:g}{bits[:1].upper()}B/s')")
        if unit not in _UNITS:
            raise ConfigError(
                f"unknown unit {match.group(2)!r} in memory bandwidth {value!r}; use {_EXAMPLES}"
            )
    bytes_per_s = number * _UNITS[unit]
    if math.isnan(bytes_per_s) or bytes_per_s <= 0:
        raise ConfigError(f"memory bandwidth {value!r} must be a positive figure; use {_EXAMPLES}")
    if not MIN_BYTES_PER_S <= bytes_per_s <= MAX_BYTES_PER_S:
        figure = f"{bytes_per_s / 1e9:.3g} GB/s" if math.isfinite(bytes_per_s) else ""
        if bytes_per_s > MAX_BYTES_PER_S:
            figure += (", " if figure else "") + "beyond any real memory"
        raise ConfigError(
            f"memory bandwidth {value!r} ({figure}) is outside what memory can do (0.1 GB/s "
            f"to 100 TB/s), the range accepted: a typo or a wrong unit? use {_EXAMPLES}")
    return bytes_per_s


def _bits(value: str, unit: str) -> str | None:
    """The unit of a figure in bits per second (``Gb/s``, ``Tbit/s``, ``Gbps``), or None."""
    if re.fullmatch(r"[kmgt]?(bit/s|bits/s|bps)", unit.lower()):
        return unit
    if "b" in unit and any(c.isupper() for c in unit):
        return unit
    return None


def format_bandwidth(bytes_per_s: float) -> str:
    """``1.008e12`` -> ``"1008 GB/s"``; three significant digits below 100 GB/s."""
    gb = bytes_per_s / 1e9
    decimals = 0 if gb >= 100 else 1 if gb >= 10 else 2
    return f"{gb:.{decimals}f} GB/s"


def format_gb(n_bytes: float) -> str:
    """Bytes as decimal gigabytes with two decimals: ``11.78 GB``."""
    return f"{n_bytes / 1e9:.2f} GB"


def format_size(n_bytes: float) -> str:
    """Bytes in the unit that shows them: ``11.78 GB`` (``format_gb``) from 1 GB up, else
    ``10.1 MB``, ``262.1 KB``, ``512 B``, ``0 B``."""
    if abs(n_bytes) >= 1e9:
        return format_gb(n_bytes)
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"
