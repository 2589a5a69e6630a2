"""Which stored results sit far below what their class of chip reaches, and why.

``find_outliers(db)`` reports results under ``factor x`` their band's low end, and builds
whose efficiency fell more than ``drop`` below the series' best earlier build (listed once,
with both reasons). Only series judged on decode are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from pytest_tokperf.expected.bands import Band, device_class, quant_family
from pytest_tokperf.expected.band_choice import expected_band
from pytest_tokperf.expected.prediction import OVERHEAD_BOUND_BYTES
from pytest_tokperf.storage.exchange import export_rows
from pytest_tokperf.storage.history import series_metric
from pytest_tokperf.storage.location import DbLocation
from pytest_tokperf.storage.store import ResultStore

DEFAULT_FACTOR = 1.0
"""Flag below ``factor x band low`` (1.0: anything under the band)."""
DEFAULT_DROP = 0.10
"""A build whose efficiency is 10% (relative) under the best earlier one."""


@dataclass(frozen=True, slots=True)
class Outlier:
    """One result far below its band, or one build below the series' earlier best."""

    kind: str
    """``below-band`` or ``build-regression``."""
    result_id: int
    test_id: str
    hardware: str
    build: str
    tokens_per_s: float
    efficiency: float
    should_reach_tokens_per_s: float
    """The band's low end or the earlier best's efficiency, times this row's ceiling."""
    typical_tokens_per_s: float | None
    band: Band | None
    reasons: tuple[str, ...]
    source: str | None
    earlier_best_tokens_per_s: float | None = None
    """Where a build fell: what the best earlier build's efficiency gives on this ceiling."""


def _settings(row: dict[str, Any]) -> dict[str, Any]:
    raw = row.get("engine_settings") or "{}"
    return json.loads(raw) if isinstance(raw, str) else dict(raw)


def _lb(settings: dict[str, Any], name: str) -> Any:
    value = settings.get(f"lb.{name}")
    return None if value is None else json.loads(value)


def _build(row: dict[str, Any], settings: dict[str, Any]) -> str:
    version, commit = row.get("engine_version"), row.get("engine_build")
    ref = _lb(settings, "build_ref")
    if version or commit:
        return " ".join(str(p) for p in (version, f"({commit})" if commit else None) if p)
    return str(ref or "build unknown")


def _build_number(row: dict[str, Any]) -> int | None:
    found = re.fullmatch(r"b?(\d+)", str(row.get("engine_version") or ""))
    return int(found[1]) if found else None


def _band(row: dict[str, Any]) -> Band | None:
    if row.get("footprint_active_parameters") and row.get("footprint_total_parameters") and (
            row["footprint_active_parameters"] < row["footprint_total_parameters"]):
        return None  # MoE: no dense band
    if "moe" in str(row.get("engine_model_name") or "").lower():
        return None
    kind, name = row.get("hardware_kind"), row.get("hardware_name")
    ceiling = row.get("ceiling_decode_tokens_per_s")
    return expected_band(device_class(kind, name), quant_family(row.get("model_file_type")),
                         1.0 / float(ceiling) if ceiling else None,
                         int(row.get("depth_tokens") or 0)).band


def _decode(row: dict[str, Any]) -> float | None:
    for name in ("engine_decode_tokens_per_s_median", "decode_tokens_per_s_median"):
        if row.get(name) is not None:
            return float(row[name])
    return None


def _days(earlier: str, later: str) -> int:
    return (date.fromisoformat(later[:10]) - date.fromisoformat(earlier[:10])).days


def _newest_in_class(row: dict[str, Any], rows: list[dict[str, Any]]) -> str | None:
    cls = device_class(row.get("hardware_kind"), row.get("hardware_name"))
    dates = [str(_lb(_settings(r), "published")) for r in rows
             if device_class(r.get("hardware_kind"), r.get("hardware_name")) == cls
             and _lb(_settings(r), "published")]
    return max(dates) if dates else None


def _reasons(row: dict[str, Any], settings: dict[str, Any], peers: list[dict[str, Any]],
             band: Band, peers_in_class: list[dict[str, Any]]) -> list[str]:
    out = []
    weights = row.get("footprint_weights_bytes") or 0
    if row.get("hardware_kind") != "cpu" and weights and weights < OVERHEAD_BOUND_BYTES:
        out.append(f"{weights / 1e9:.2f} GB of weights per token: overhead-bound (kernel "
                   "launches and synchronisation per token)")
    if _lb(settings, "no_kv_offload"):
        out.append("the KV cache is in system RAM (-nkvo 1): every token reads it over PCIe")
    depth = row.get("depth_tokens") or 0
    if depth and not row.get("footprint_kv_bytes_per_position"):
        out.append(f"KV read at depth {depth} not in the ceiling (no layer shape): part of "
                   "the gap is attention over the context")
    better = [p for p in peers if p["efficiency"] > row["efficiency"] * 1.15]
    for peer in sorted(better, key=lambda p: -p["efficiency"])[:2]:
        ps = _settings(peer)
        what = []
        if peer.get("engine_backend") != row.get("engine_backend") or (
                _lb(ps, "backends") != _lb(settings, "backends")):
            what.append(f"backend {_lb(ps, 'backends') or peer.get('engine_backend')}")
        if _build(peer, ps) != _build(row, settings):
            what.append(f"build {_build(peer, ps)}")
        if what:
            out.append(f"the same chip and model reach {peer['efficiency']:.0%} with "
                       f"{', '.join(what)}: this backend or build is behind on this chip")
    published, newest = _lb(settings, "published"), _newest_in_class(row, peers_in_class)
    if published and newest and _days(published, newest) > 365:
        out.append(f"an old build (published {published}; this class has rows up to "
                   f"{newest}): kernels for this chip improved since, rerun on a current build")
    host = _lb(settings, "host")
    if host:
        out.append(f"host: {host} (the source says so): CPU, PCIe or driver of the host")
    if row["efficiency"] < 0.35:
        out.append("under 35% of the ceiling: partial offload, a CPU fallback or a chip "
                   "the backend does not yet support well")
    if not out:
        out.append(f"below the {band.low:.0%} low end with nothing in the data to explain "
                   "it: a new chip, driver or build to look at")
    return out


def find_outliers(db: DbLocation, *, factor: float = DEFAULT_FACTOR,
                  drop: float = DEFAULT_DROP) -> list[Outlier]:
    """Results far below their band, then build regressions (see the module docstring).
    ``db`` is only read (a file that is no tokperf DB is refused as it is)."""
    with ResultStore.open_read_only(db) as store:
        decoded = {r.series_key for r in store.latest_per_series()  # a pp row: no decode ceiling
                   if series_metric(r, r.test_id).name == "decode"}
        rows = [r for r in export_rows(store) if r["series_key"] in decoded
                and r.get("efficiency") is not None and _decode(r) is not None]
    by_workload: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row.get("hardware_name"), row.get("model_file_name"), row.get("model_file_bytes"),
               row.get("generate_tokens"), row.get("depth_tokens"))
        by_workload.setdefault(key, []).append(row)
    found: list[Outlier] = []
    for row in rows:
        band = _band(row)
        if band is None or row["efficiency"] >= band.low * factor:
            continue
        settings = _settings(row)
        ceiling = float(row["ceiling_decode_tokens_per_s"])
        key = (row.get("hardware_name"), row.get("model_file_name"), row.get("model_file_bytes"),
               row.get("generate_tokens"), row.get("depth_tokens"))
        peers = [p for p in by_workload[key] if p is not row]
        found.append(Outlier(
            kind="below-band", result_id=int(row["result_id"]), test_id=row["test_id"],
            hardware=str(row.get("hardware_name")), build=_build(row, settings),
            tokens_per_s=float(_decode(row) or 0), efficiency=float(row["efficiency"]),
            should_reach_tokens_per_s=ceiling * band.low,
            typical_tokens_per_s=ceiling * band.typical, band=band,
            reasons=tuple(_reasons(row, settings, peers, band, rows)),
            source=_lb(settings, "source_url"),
        ))
    listed = {o.result_id: i for i, o in enumerate(found)}
    for fell in _regressions(rows, drop):
        if fell.result_id in listed:  # one result, one entry: the band's figure first
            i = listed[fell.result_id]
            found[i] = replace(found[i], reasons=(*found[i].reasons, *fell.reasons),
                               earlier_best_tokens_per_s=fell.earlier_best_tokens_per_s)
        else:
            found.append(fell)
    return found


def _regressions(rows: list[dict[str, Any]], drop: float) -> list[Outlier]:
    series: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if _build_number(row) is not None:
            series.setdefault(row["series_key"], []).append(row)
    out = []
    for group in series.values():
        group.sort(key=lambda r: (_build_number(r), r["created_at"]))
        best: dict[str, Any] | None = None
        for row in group:
            if best is not None and _build_number(row) != _build_number(best) and (
                    row["efficiency"] < best["efficiency"] * (1 - drop)):
                settings = _settings(row)
                change = row["efficiency"] / best["efficiency"] - 1
                reach = float(row["ceiling_decode_tokens_per_s"]) * best["efficiency"]
                out.append(Outlier(
                    kind="build-regression", result_id=int(row["result_id"]),
                    test_id=row["test_id"], hardware=str(row.get("hardware_name")),
                    build=_build(row, settings), tokens_per_s=float(_decode(row) or 0),
                    efficiency=float(row["efficiency"]),
                    should_reach_tokens_per_s=reach, earlier_best_tokens_per_s=reach,
                    typical_tokens_per_s=None, band=_band(row),
                    reasons=(f"efficiency {change:+.0%} against {best['efficiency']:.0%} at "
                             f"{_build(best, _settings(best))}, the best earlier build of this "
                             "series: a regression in the engine, backend or driver",),
                    source=_lb(settings, "source_url"),
                ))
            if best is None or row["efficiency"] > best["efficiency"]:
                best = row
    return out
