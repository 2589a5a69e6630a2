"""What a model should do on hardware you may not have: the ceiling and a likely range.

``predict("RTX 4090", footprint, quant="Q4_K_M")``: the catalog's bandwidth / bytes per
token, scaled by the efficiency band ``band_choice`` picks (fitted or fixed, it says
which), and whether weights plus KV cache fit in the device's memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from pytest_tokperf.ceiling import compute_ceiling, describe_ceiling
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected.bands import Band, device_class, format_share, quant_family
from pytest_tokperf.expected.band_choice import BandOrigin, BandSource, expected_band
from pytest_tokperf.hardware.catalog import CatalogEntry, close_names, lookup
from pytest_tokperf.hardware.units import format_bandwidth, format_size, parse_bandwidth
from pytest_tokperf.results import Bandwidth, Ceiling, Footprint


@dataclass(frozen=True, slots=True)
class Prediction:
    """The ceiling, the expected decode range and the memory a model needs somewhere."""

    hardware: str
    entry: CatalogEntry | None
    ceiling: Ceiling
    efficiencies: tuple[float, ...]
    expected_tokens_per_s: tuple[float, ...]
    """``ceiling x efficiency`` for each of ``efficiencies``, same order."""
    memory_needed_bytes: int
    """Resident weights plus the KV cache at the footprint's depth."""
    memory_available_bytes: int | None
    band: Band | None = None
    """The published efficiency band the range comes from (None: fractions were given)."""
    warnings: tuple[str, ...] = ()
    """Where the band does not apply (small, MoE priced as one quant, does not fit)."""
    band_origin: BandOrigin | None = None
    """``fitted``: the fitted model of db/public; ``fixed``: ``expected.bands``."""
    band_detail: str = ""
    """Why that one, and what the fitted model rests on (rows, sources, held-out check)."""

    @property
    def expected_low(self) -> float:
        return min(self.expected_tokens_per_s)

    @property
    def expected_high(self) -> float:
        return max(self.expected_tokens_per_s)

    @property
    def fits(self) -> bool | None:
        if self.memory_available_bytes is None:
            return None
        return self.memory_needed_bytes <= self.memory_available_bytes


def _resolve(hardware: str | float, gpu_cores: int | None
             ) -> tuple[str, Bandwidth, CatalogEntry | None]:
    if isinstance(hardware, (int, float)) and not isinstance(hardware, bool):
        if not math.isfinite(hardware) or hardware <= 0:
            raise ConfigError(f"bandwidth {hardware!r} bytes/s must be positive, e.g. 1.008e12")
        label = format_bandwidth(float(hardware))
        return label, Bandwidth(float(hardware), "explicit", "given to predict"), None
    if not isinstance(hardware, str):
        raise ConfigError(f"hardware {hardware!r} must be a catalog name or bytes/s")
    entry = lookup(hardware, gpu_cores)
    if entry is not None:
        return entry.name, entry.bandwidth(), entry
    if "/s" in hardware.lower():
        bytes_per_s = parse_bandwidth(hardware)
        return format_bandwidth(bytes_per_s), Bandwidth(bytes_per_s, "explicit", hardware), None
    close = close_names(hardware)
    suggestion = f"; close catalog names: {', '.join(close)}" if close else ""
    raise ConfigError(
        f"hardware {hardware!r} does not name one row of the hardware catalog "
        f"(shipped in the package){suggestion}; "
        "or give the bandwidth itself, e.g. '1008GB/s'"
    )


FITTED_DEPTH_NOTE = ("the ceiling counts the KV read at this depth and the fitted model adds "
                     "its depth cost (attention work beyond the KV bytes), so the band is the "
                     "one at this depth")
DEPTH_NOTE = ("the ceiling counts the KV read at this depth, so the band is the depth-0 one: "
              "published rows keep their efficiency when the KV is counted (db/public, llama.cpp "
              "benches/dgx-spark.md: Qwen2.5-Coder-7B Q8_0 87% at depth 0, 83% at 32768)")
"""What the band does with depth (fitted, fixed): shown with a prediction at a depth."""

OVERHEAD_BOUND_BYTES = 1e9
"""Below ~1 GB of weights per token a GPU's decode is set by its per-token overhead."""


def predict(hardware: str | float, footprint: Footprint,
            efficiencies: tuple[float, ...] | None = None, *, gpu_cores: int | None = None,
            quant: str | float | None = None, expert_sizes: bool = False,
            band_source: BandSource = "auto") -> Prediction:
    """Ceiling and expected decode range for ``footprint`` on ``hardware``: a catalog name
    ("RTX 4090", "Apple M4 Max" with ``gpu_cores``), "1008GB/s", or bytes/s.

    Without ``efficiencies`` the range is the band (low, typical, high) for ``quant``'s
    family ("Q4_K_M", "F16" or bits per weight) on the device class (``band_source="fixed"``:
    never the fitted one). ``expert_sizes``: a MoE footprint priced its expert weights apart.
    """
    label, bandwidth, entry = _resolve(hardware, gpu_cores)
    ceiling = compute_ceiling(footprint, bandwidth, entry.fp16_flops if entry else None)
    band: Band | None = None
    origin: BandOrigin | None = None
    detail = ""
    if efficiencies is None:
        cls = device_class(entry.kind, entry.name) if entry else "unknown"
        expected = expected_band(cls, quant_family(quant), 1.0 / ceiling.decode_tokens_per_s,
                                 footprint.depth_tokens, band_source)
        band, origin, detail = expected.band, expected.origin, expected.detail
        efficiencies = band.fractions
    if not efficiencies:
        raise ConfigError("efficiencies must name at least one fraction, e.g. (0.5, 0.8)")
    for fraction in efficiencies:
        if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1.5:
            raise ConfigError(f"efficiency {fraction!r} must be a fraction in (0, 1.5]")
    needed = footprint.resident_bytes + footprint.kv_bytes
    warnings = _warnings(footprint, entry, needed, expert_sizes, origin)
    return Prediction(
        hardware=label, entry=entry, ceiling=ceiling,
        efficiencies=tuple(float(f) for f in efficiencies),
        expected_tokens_per_s=tuple(ceiling.decode_tokens_per_s * f for f in efficiencies),
        memory_needed_bytes=needed, memory_available_bytes=entry.memory_bytes if entry else None,
        band=band, warnings=warnings, band_origin=origin, band_detail=detail)


def _warnings(fp: Footprint, entry: CatalogEntry | None, needed: int,
              expert_sizes: bool, origin: BandOrigin | None) -> tuple[str, ...]:
    out = []
    if entry is not None and entry.kind != "cpu" and fp.weights_bytes < OVERHEAD_BOUND_BYTES:
        consequence = (
            "the fitted band counts that cost, from few public rows this small; measure it"
            if origin == "fitted" else
            "so the band (from multi-GB models) overstates it; measure it, do not read it "
            "from here")
        out.append(
            f"{format_size(fp.weights_bytes)} of weights per token is under "
            f"{OVERHEAD_BOUND_BYTES / 1e9:g} GB: on a GPU decode is then bound by the fixed "
            f"per-token cost (kernel launches, synchronisation), not by memory: {consequence}")
    # only an estimate can be a MoE of unknown shape: a model file names its experts, and
    # a dense file's active share is below 1 too (the embedding table is gathered)
    if (fp.architecture == "estimate" and fp.active_parameters < fp.total_parameters
            and not (fp.expert_count or expert_sizes)):
        out.append(
            "MoE without expert sizes: every weight is priced at one quant and the active "
            "share is read per token; give --expert-params and --expert-quant (or the GGUF) "
            "for the expert weights' own type; the band is from dense models")
    if entry is not None and entry.memory_bytes is not None and needed > entry.memory_bytes:
        out.append(
            f"does not fit: {format_size(needed)} needed of {format_size(entry.memory_bytes)}; "
            "layers left in system RAM run at its speed, far below this range")
    return tuple(out)


def _count(n: float) -> str:
    """A parameter count that shows: ``8.03 B``, ``4.2 M``, ``950 K``."""
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} K"


def format_prediction(pred: Prediction) -> str:
    """Plain text for a terminal."""
    fp = pred.ceiling.footprint
    bandwidth = format_bandwidth(pred.ceiling.bandwidth.bytes_per_s)
    head = (f"{pred.entry.name}: {bandwidth} ({pred.entry.source})" if pred.entry
            else f"given bandwidth: {bandwidth}")
    shares = ", ".join(f"{format_share(f)}: {t:.1f}"
                       for f, t in zip(pred.efficiencies, pred.expected_tokens_per_s, strict=True))
    expected = (f"expected decode: {pred.expected_low:.1f}-{pred.expected_high:.1f} tok/s "
                f"({shares})")
    if pred.fits is False:
        expected = (f"expected decode: does not fit ({format_size(pred.memory_needed_bytes)} "
                    f"needed of {format_size(cast(int, pred.memory_available_bytes))})")
    lines = [head, f"decode ceiling: {pred.ceiling.decode_tokens_per_s:.1f} tok/s "
             f"({describe_ceiling(pred.ceiling, format_size)})", expected]
    if pred.band is not None:
        at_depth = f" at depth {fp.depth_tokens}" if fp.depth_tokens else ""
        lines.append(f"efficiency band: {pred.band.describe()}{at_depth}")
        lines.append(f"  band from: {pred.band_detail}")
        if fp.depth_tokens:
            note = FITTED_DEPTH_NOTE if pred.band_origin == "fitted" else DEPTH_NOTE
            lines.append(f"  at depth: {note}")
        if pred.band.derived:
            lines.append(f"  derived: {pred.band.derived}")
        lines.extend(f"  source: {source}" for source in pred.band.sources)
    needed = (f"memory needed: {format_size(pred.memory_needed_bytes)} (model "
              f"{format_size(fp.resident_bytes)} + KV {format_size(fp.kv_bytes)} at depth "
              f"{fp.depth_tokens})")
    if pred.memory_available_bytes is not None:
        verdict = "fits" if pred.fits else "does NOT fit"
        needed += f" of {format_size(pred.memory_available_bytes)}: {verdict}"
    lines.append(needed)
    prefill = pred.ceiling.prefill_tokens_per_s
    if prefill is not None and pred.entry is not None and pred.entry.fp16_flops:
        lines.append(
            f"prefill bound: {prefill:.0f} tok/s ({pred.entry.fp16_flops / 1e12:g} TFLOPS FP16 "
            f"dense / 2 x {_count(fp.active_parameters)} active parameters)"
        )
    lines.extend(f"warning: {w}" for w in pred.warnings if not w.startswith("does not fit"))
    lines.extend(f"note: {w}" for w in fp.warnings)
    return "\n".join(lines)


def prediction_to_dict(pred: Prediction) -> dict[str, Any]:
    """JSON-ready view for ``--json``: SI units, names with units."""
    fp = pred.ceiling.footprint
    bw = pred.ceiling.bandwidth
    return {
        "hardware": pred.hardware,
        "catalog_name": pred.entry.name if pred.entry else None,
        "bandwidth_bytes_per_s": bw.bytes_per_s,
        "bandwidth_source": bw.source,
        "bandwidth_detail": pred.entry.source if pred.entry else bw.detail,
        "bytes_per_token": fp.total_bytes,
        "weights_bytes_per_token": fp.weights_bytes,
        "kv_bytes_per_token": fp.kv_bytes,
        "depth_tokens": fp.depth_tokens,
        "decode_ceiling_tokens_per_s": pred.ceiling.decode_tokens_per_s,
        "prefill_bound_tokens_per_s": pred.ceiling.prefill_tokens_per_s,
        "expected_decode_tokens_per_s": None if pred.fits is False else _named(pred),
        "expected_decode": [
            {"efficiency": f, "tokens_per_s": t}
            for f, t in zip(pred.efficiencies, pred.expected_tokens_per_s, strict=True)
        ],
        "memory_needed_bytes": pred.memory_needed_bytes,
        "memory_available_bytes": pred.memory_available_bytes,
        "fits": pred.fits,
        "efficiency_band": None if pred.band is None else {
            "quant_family": pred.band.family,
            "device_class": pred.band.device_class,
            "low": pred.band.low,
            "typical": pred.band.typical,
            "high": pred.band.high,
            "sources": list(pred.band.sources),
            "derived": pred.band.derived or None,
            "depth_tokens": fp.depth_tokens,
            "depth_note": None if not fp.depth_tokens else (
                FITTED_DEPTH_NOTE if pred.band_origin == "fitted" else DEPTH_NOTE),
            "origin": pred.band_origin,
            "origin_detail": pred.band_detail,
        },
        "warnings": [*pred.warnings, *fp.warnings],
    }


def _named(pred: Prediction) -> dict[str, float]:
    """``low``/``typical``/``high`` of a band's range; ``low``/``high`` of given fractions."""
    if pred.band is not None:
        low, typical, high = pred.expected_tokens_per_s
        return {"low": low, "typical": typical, "high": high}
    return {"low": pred.expected_low, "high": pred.expected_high}


def footprint_from_file_size(
    size_bytes: float, quant: str | float | None, *, parameters: float | None = None,
    active_parameters: float | None = None, n_layer: int = 0, n_head_kv: int = 0,
    head_dim: int = 0, depth_tokens: int = 0, kv_type: str = "f16", sliding_window: int = 0,
    sliding_layers: int = 0,
) -> Footprint:
    """A footprint from a model file's size, every byte taken as streamed per token;
    parameters default to ``size x 8 / bits per weight`` of ``quant`` (given both, the size
    sets the bits per weight)."""
    from pytest_tokperf.model.footprint import bits_per_weight, estimate_footprint

    if isinstance(size_bytes, bool) or not math.isfinite(size_bytes) or size_bytes <= 0:
        raise ConfigError(f"file size {size_bytes!r} bytes must be positive, e.g. 4.9e9")
    if parameters is None:
        if quant is None:
            raise ConfigError(
                "a file size needs --params or --quant to count the parameters "
                "(e.g. --size 4.9GB --quant Q4_K_M)"
            )
        parameters = size_bytes * 8 / bits_per_weight(quant)
    return estimate_footprint(
        parameters, size_bytes * 8 / parameters, n_layer=n_layer, n_head_kv=n_head_kv,
        head_dim=head_dim, depth_tokens=depth_tokens, kv_type=kv_type,
        active_parameters=active_parameters, sliding_window=sliding_window,
        sliding_layers=sliding_layers,
    )
