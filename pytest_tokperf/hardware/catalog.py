"""The hardware spec catalog: ``hardware.csv`` in this package, loaded, validated, searched.

Ties go to the higher bandwidth: a ceiling must not be low.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal, cast

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.results import Bandwidth, BandwidthSource

CatalogKind = Literal["gpu", "apple", "cpu"]
COLUMNS = ("name", "kind", "match", "memory_gb", "bandwidth_gb_s", "fp16_tflops", "gpu_cores",
           "source")
CATALOG_ENV = "PYTEST_TOKPERF_CATALOG"
CATALOG_FILE = "hardware.csv"
"""The packaged catalog, next to this module (``db/hardware.csv`` links to it)."""
_KINDS: tuple[CatalogKind, ...] = ("gpu", "apple", "cpu")
_GUARD_WORDS = ("laptop", "mobile", "max q")
"""A detected name carrying one of these matches only aliases that carry it too."""


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One row of the catalog, in SI units."""

    name: str
    kind: CatalogKind
    aliases: tuple[str, ...]
    memory_bytes: int | None
    bandwidth_bytes_per_s: float
    fp16_flops: float | None
    """Dense FP16 tensor peak in FLOP/s (no sparsity), when published."""
    gpu_cores: tuple[int, ...]
    source: str
    line: int

    def bandwidth(self) -> Bandwidth:
        source: BandwidthSource = "apple-catalog" if self.kind == "apple" else "catalog"
        return Bandwidth(self.bandwidth_bytes_per_s, source, f"{self.name}: {self.source}")


def normalize(name: str) -> str:
    """Lower-case, ``-``/``_``/``/``/``(``/``)`` to spaces, runs of spaces collapsed."""
    return " ".join(re.sub(r"[-_/(),]", " ", name.lower()).split())


def load_catalog(path: Path | None = None) -> tuple[CatalogEntry, ...]:
    """All rows of the catalog, validated and cached. ``path`` (or
    ``$PYTEST_TOKPERF_CATALOG``) names another CSV with the same columns."""
    override = os.environ.get(CATALOG_ENV)
    chosen = path or (Path(override).expanduser() if override else None)
    if chosen is None:
        return _load_packaged()
    resolved = chosen.resolve()
    try:
        mtime = resolved.stat().st_mtime_ns
    except OSError as exc:
        raise ConfigError(
            f"hardware catalog {str(resolved)!r} cannot be read ({exc.strerror}); "
            f"point {CATALOG_ENV} at a CSV with columns {', '.join(COLUMNS)}"
        ) from exc
    return _load(str(resolved), mtime)


@lru_cache(maxsize=1)
def _load_packaged() -> tuple[CatalogEntry, ...]:
    resource = resources.files(__package__).joinpath(CATALOG_FILE)
    try:
        text = resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"the packaged hardware catalog {str(resource)!r} cannot be read ({exc}); "
            f"reinstall pytest-tokperf, or point {CATALOG_ENV} at a CSV with columns "
            f"{', '.join(COLUMNS)}"
        ) from exc
    return _parse(str(resource), io.StringIO(text, newline=""))


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int) -> tuple[CatalogEntry, ...]:
    with open(path, newline="", encoding="utf-8") as handle:
        return _parse(path, handle)


def _parse(path: str, lines: Iterable[str]) -> tuple[CatalogEntry, ...]:
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise ConfigError(f"{path}:1: header {header!r} must be exactly {','.join(COLUMNS)}")
    entries: list[CatalogEntry] = []
    seen: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        entry = _parse_row(path, line, row)
        if entry.name in seen:
            raise ConfigError(
                f"{path}:{line}: name {entry.name!r} already defined on line {seen[entry.name]}"
            )
        seen[entry.name] = line
        entries.append(entry)
    if not entries:
        raise ConfigError(f"{path}: the hardware catalog has no rows")
    return tuple(entries)


def _parse_row(path: str, line: int, row: list[str]) -> CatalogEntry:
    where = f"{path}:{line}"
    if len(row) != len(COLUMNS):
        raise ConfigError(
            f"{where}: expected {len(COLUMNS)} fields ({','.join(COLUMNS)}), got {len(row)}; "
            "quote fields that contain commas"
        )
    fields = dict(zip(COLUMNS, (value.strip() for value in row), strict=True))
    for required in ("name", "match", "source"):
        if not fields[required]:
            raise ConfigError(f"{where}: column {required!r} is empty")
    if fields["kind"] not in _KINDS:
        raise ConfigError(f"{where}: kind {fields['kind']!r} must be one of {', '.join(_KINDS)}")
    bandwidth = _number(where, "bandwidth_gb_s", fields["bandwidth_gb_s"], required=True)
    memory = _number(where, "memory_gb", fields["memory_gb"], required=False)
    flops = _number(where, "fp16_tflops", fields["fp16_tflops"], required=False)
    cores = [part.strip() for part in fields["gpu_cores"].split("|") if part.strip()]
    if not all(part.isdigit() and int(part) > 0 for part in cores):
        raise ConfigError(f"{where}: gpu_cores {fields['gpu_cores']!r} must be counts like 30|40")
    aliases = tuple(dict.fromkeys(normalize(a) for a in fields["match"].split("|") if a.strip()))
    return CatalogEntry(
        name=fields["name"],
        kind=fields["kind"],
        aliases=aliases,
        memory_bytes=None if memory is None else int(memory * 1e9),
        bandwidth_bytes_per_s=cast(float, bandwidth) * 1e9,
        fp16_flops=None if flops is None else flops * 1e12,
        gpu_cores=tuple(map(int, cores)),
        source=fields["source"],
        line=line,
    )


def _number(where: str, column: str, text: str, *, required: bool) -> float | None:
    if not text:
        if required:
            raise ConfigError(f"{where}: column {column!r} is empty")
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: {column} {text!r} must be a positive number")
    return value


def _contains(haystack: str, alias: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(alias)}(?![a-z0-9])", haystack) is not None


def _guarded(query: str, alias: str) -> bool:
    return any(word in query and word not in alias for word in _GUARD_WORDS)


def lookup(
    name: str,
    gpu_cores: int | None = None,
    *,
    kind: CatalogKind | None = None,
    catalog: tuple[CatalogEntry, ...] | None = None,
) -> CatalogEntry | None:
    """The catalog row for a detected or typed device name, or None. A fragment of exactly
    one row's alias ("4090") also resolves; an ambiguous one does not."""
    rows = [e for e in (catalog or load_catalog()) if kind is None or e.kind == kind]
    query = normalize(name)
    if not query:
        return None
    exact = [e for e in rows if normalize(e.name) == query]
    if exact:
        return _choose(exact, gpu_cores)
    longest = [max((len(a) for a in e.aliases if _contains(query, a) and not _guarded(query, a)),
                   default=0) for e in rows]
    if any(longest):
        return _choose([e for e, n in zip(rows, longest) if n == max(longest)], gpu_cores)
    partial = [e for e in rows if any(_contains(a, query) for a in (*e.aliases, normalize(e.name)))]
    if partial and len({(e.aliases, e.kind) for e in partial}) == 1:
        return _choose(partial, gpu_cores)
    return None


def _choose(candidates: list[CatalogEntry], gpu_cores: int | None) -> CatalogEntry:
    if gpu_cores is not None:
        by_cores = [e for e in candidates if gpu_cores in e.gpu_cores]
        candidates = by_cores or candidates
    return max(candidates, key=lambda e: e.bandwidth_bytes_per_s)


_CPU_WORDS = re.compile(r"\b(ryzen|threadripper|epyc|xeon|core i\d|core ultra|i[3579] \d{4,5})")
_IGPU_WORDS = ("radeon", "ai max", "strix")


def _looks_like_cpu(name: str) -> bool:
    query = normalize(name)
    return bool(_CPU_WORDS.search(query)) and not any(w in query for w in _IGPU_WORDS)


def close_names(
    name: str, limit: int = 6, catalog: tuple[CatalogEntry, ...] | None = None
) -> list[str]:
    """Catalog names like ``name``, for "did you mean" (CPU names get CPU rows)."""
    entries = catalog or load_catalog()
    if _looks_like_cpu(name):
        entries = tuple(e for e in entries if e.kind == "cpu") or entries
    by_key: dict[str, str] = {}
    for entry in entries:
        by_key.setdefault(normalize(entry.name), entry.name)
        for alias in entry.aliases:
            by_key.setdefault(alias, entry.name)
    query = normalize(name)
    keys = [k for k in by_key if query and _contains(k, query)]
    keys += difflib.get_close_matches(query, list(by_key), n=limit * 3, cutoff=0.5)
    return list(dict.fromkeys(by_key[k] for k in keys))[:limit]
