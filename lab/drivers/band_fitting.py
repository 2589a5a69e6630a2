"""The fitting half of the efficiency model ``predict`` ships (``band_fit.json``).

Stored db/public rows as observations (dense, healthy decode rows with a ceiling), the
non-negative least-squares fit of ``1/tok_s = stream x (a_q + k x depth/1000) + o_c``,
bands calibrated on held-out sources, the leave-one-source-out check, and the JSON
``fit_bands.py --write`` stores for ``pytest_tokperf.expected.band_fit.load_fitted``.
Derivation in docs/expected-speed.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected.band_fit import Calibration, Model
from pytest_tokperf.expected.bands import device_class, quant_family
from pytest_tokperf.storage.exchange import export_rows
from pytest_tokperf.storage.store import ResultStore

COVERAGE = 0.90
"""The share of a new source's rows the band is calibrated to contain."""

CLASS_RESIDUALS = 10
"""Held-out residuals a device class needs for a band of its own (else: pooled with the
other classes'). Ten residuals' full range covers (10 - 1) / (10 + 1) = 82% nominally;
fewer would be a band set by one or two sources."""

NOT_HEALTHY = ("no_kv_offload", "host")
"""Configurations no band is for: the KV cache in system RAM, a GPU behind a host the
source names as the bottleneck."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One published decode row, reduced to what the model needs."""

    source: str
    device_class: str
    family: str
    bytes_per_token: float
    bandwidth_bytes_per_s: float
    tokens_per_s: float
    depth_tokens: int = 0

    @property
    def stream_s(self) -> float:
        """The time a perfect stream of this row's bytes takes: 1 / ceiling."""
        return self.bytes_per_token / self.bandwidth_bytes_per_s

    @property
    def efficiency(self) -> float:
        return self.tokens_per_s * self.stream_s


def _fit_terms(observations: Sequence[Observation]
               ) -> tuple[dict[str, float], dict[str, float], float]:
    """Non-negative least squares of the relative error; a_q = 1 + a' with a' >= 0."""
    import numpy as np
    from scipy.optimize import nnls

    families = sorted({o.family for o in observations})
    classes = sorted({o.device_class for o in observations})
    width = len(families) + len(classes) + 1
    design = np.zeros((len(observations), width))
    target = np.zeros(len(observations))
    for i, o in enumerate(observations):
        t = 1.0 / o.tokens_per_s
        design[i, families.index(o.family)] = o.stream_s / t
        design[i, len(families) + classes.index(o.device_class)] = 1.0 / t
        design[i, -1] = o.stream_s * o.depth_tokens / 1000 / t
        target[i] = 1.0 - o.stream_s / t
    solution, _ = nnls(design, target)
    costs = {f: 1.0 + float(solution[i]) for i, f in enumerate(families)}
    overheads = {c: float(solution[len(families) + i]) for i, c in enumerate(classes)}
    return costs, overheads, float(solution[-1])


def held_out_residuals(observations: Sequence[Observation]
                       ) -> list[tuple[Observation, float]]:
    """``log(measured / modelled)`` of each row, by a model fitted without its source.

    Rows whose class or family no other source has are left out (nothing predicts them).
    """
    out = []
    for source in sorted({o.source for o in observations}):
        rest = [o for o in observations if o.source != source]
        if not rest:
            continue
        costs, overheads, depth = _fit_terms(rest)
        bare = Model(costs, overheads, depth, {}, {}, {})
        for o in observations:
            if o.source != source:
                continue
            typical = bare.typical_tokens_per_s(o.device_class, o.family, o.stream_s,
                                                o.depth_tokens)
            if typical is not None:
                out.append((o, math.log(o.tokens_per_s / typical)))
    return out


def conformal_interval(residuals: Sequence[float], coverage: float = COVERAGE
                       ) -> tuple[float, float]:
    """Split-conformal bounds: the k-th smallest and largest of ``n`` held-out residuals.

    ``k`` is ``floor((n + 1) x (1 - coverage) / 2)``, at least 1: with fewer than
    ``2 / (1 - coverage) - 1`` residuals (19 for 90%) the band is their full range and
    its coverage is below the nominal one (the report says how many there were).
    """
    if not residuals:
        raise ConfigError("a band needs at least one held-out residual")
    ordered = sorted(residuals)
    n = len(ordered)
    k = max(1, math.floor((n + 1) * (1 - coverage) / 2 + 1e-9))  # 0.1 is 0.0999...
    return ordered[k - 1], ordered[n - k]


def calibrate(residuals: Iterable[tuple[Observation, float]],
              classes: Iterable[str]) -> dict[str, Calibration]:
    """A band per class: its own held-out residuals where it has enough, else all."""
    pairs = list(residuals)
    everything = [r for _, r in pairs]
    out = {}
    for cls in classes:
        own = [r for o, r in pairs if o.device_class == cls]
        pooled = len(own) < CLASS_RESIDUALS
        chosen = everything if pooled else own
        if not chosen:
            continue
        low, high = conformal_interval(chosen)
        out[cls] = Calibration(low, high, len(chosen), pooled)
    return out


def fit(observations: Sequence[Observation]) -> Model:
    """The terms fitted on every row, the bands calibrated on held-out residuals."""
    if not observations:
        raise ConfigError("fit needs at least one observation")
    costs, overheads, depth = _fit_terms(observations)
    classes = sorted({o.device_class for o in observations})
    return Model(
        costs, overheads, depth, calibrate(held_out_residuals(observations), classes),
        {c: sum(o.device_class == c for o in observations) for c in classes},
        {c: len({o.source for o in observations if o.device_class == c}) for c in classes},
    )


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Leave-one-source-out result for one device class."""

    device_class: str
    rows: int
    sources: int
    checked: int
    """Rows whose source was held out and whose class and family the others cover."""
    inside: int
    above_ceiling: int
    band_ratios: tuple[float, ...]
    """high / low of each checked row's band (1.5: the band spans 1.5x)."""
    band_efficiencies: tuple[tuple[float, float], ...]
    """(low, high) of each checked row's band as a share of its ceiling."""

    @property
    def fraction_inside(self) -> float | None:
        return self.inside / self.checked if self.checked else None

    @property
    def median_ratio(self) -> float | None:
        return _median(self.band_ratios)

    @property
    def median_efficiency_band(self) -> tuple[float, float] | None:
        if not self.band_efficiencies:
            return None
        lows = _median([lo for lo, _ in self.band_efficiencies])
        highs = _median([hi for _, hi in self.band_efficiencies])
        return (lows or 0.0, highs or 0.0)


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def leave_one_source_out(observations: Sequence[Observation]) -> dict[str, HeldOut]:
    """Per class: each source judged by a model fitted and calibrated without it."""
    classes = sorted({o.device_class for o in observations})
    counts: dict[str, list[int]] = {c: [0, 0] for c in classes}
    ratios: dict[str, list[float]] = {c: [] for c in classes}
    effs: dict[str, list[tuple[float, float]]] = {c: [] for c in classes}
    for source in sorted({o.source for o in observations}):
        rest = [o for o in observations if o.source != source]
        held = [o for o in observations if o.source == source]
        if not rest:
            continue
        model = fit(rest)
        for o in held:
            band = model.band(o.device_class, o.family, o.stream_s, o.depth_tokens)
            if band is None:
                continue
            counts[o.device_class][0] += 1
            counts[o.device_class][1] += band[0] <= o.tokens_per_s <= band[2]
            ratios[o.device_class].append(band[2] / band[0])
            effs[o.device_class].append((band[0] * o.stream_s, band[2] * o.stream_s))
    return {
        c: HeldOut(
            c, sum(o.device_class == c for o in observations),
            len({o.source for o in observations if o.device_class == c}),
            counts[c][0], counts[c][1],
            sum(o.tokens_per_s > 1.0 / o.stream_s for o in observations if o.device_class == c),
            tuple(ratios[c]), tuple(effs[c]))
        for c in classes
    }


def _g(value: float) -> float:
    """Six significant digits: the stored file diffs by what changed, not by float noise."""
    return float(f"{value:.6g}")


def model_to_dict(model: Model, held: dict[str, HeldOut] | None = None) -> dict[str, object]:
    """JSON-ready parameters (``FITTED_FILE``), with the LOSO figures where given."""
    return {
        "cost_per_family": {f: _g(a) for f, a in model.cost_per_family.items()},
        "overhead_s_per_class": {c: _g(o) for c, o in model.overhead_per_class.items()},
        "depth_cost_per_1000_tokens": _g(model.depth_cost),
        "calibration": {c: {"log_low": _g(cal.low), "log_high": _g(cal.high),
                            "residuals": cal.residuals, "pooled": cal.pooled}
                        for c, cal in model.calibration.items()},
        "rows_per_class": model.rows_per_class,
        "sources_per_class": model.sources_per_class,
        "loso": {} if held is None else {
            c: {"checked": h.checked, "inside": h.inside, "above_ceiling": h.above_ceiling}
            for c, h in held.items()},
    }


def band_observations(db: Path) -> list[Observation]:
    """The dense, healthy decode rows of ``db`` with a ceiling, one observation each."""
    out = []
    with ResultStore.open(db) as store:
        for row in export_rows(store):
            if row.get("efficiency") is None or not row.get("generate_tokens"):
                continue
            if "moe" in str(row.get("engine_model_name") or "").lower():
                continue
            settings = json.loads(row["engine_settings"])
            if any(json.loads(settings.get(f"lb.{k}", "null")) for k in NOT_HEALTHY):
                continue
            family = quant_family(row.get("model_file_type"))
            decode = row.get("engine_decode_tokens_per_s_median")
            if family is None or decode is None:
                continue
            depth = int(row.get("depth_tokens") or 0)
            kv = (row.get("footprint_kv_bytes_per_position") or 0) * depth
            out.append(Observation(
                source=json.loads(settings.get("lb.source_url", '"local"')),
                device_class=device_class(row.get("hardware_kind"), row.get("hardware_name")),
                family=family,
                bytes_per_token=float(row["footprint_weights_bytes"]) + kv,
                bandwidth_bytes_per_s=float(row["ceiling_bandwidth_bytes_per_s"]),
                tokens_per_s=float(decode),
                depth_tokens=depth,
            ))
    return out
