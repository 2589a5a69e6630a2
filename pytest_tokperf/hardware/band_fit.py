"""An efficiency model with the terms the physics names, fitted on published rows.

Time per decoded token on one device::

    1 / tok_s  =  a_q x (weights + KV at depth) / bandwidth  +  o

``a_q >= 1`` is the cost per streamed byte of quant family ``q`` relative to a perfect
stream (1 / ``a_q`` is the efficiency a large model reaches: dequantization and kernel
quality), ``o`` a fixed per-token overhead in seconds (kernel launches, synchronisation,
sampling) that dominates small models and fast memories. Attention work at depth shows
up as the KV bytes (counted where the row names its layer shape) plus the residual.
``fit`` solves the least squares per device class (one ``o`` for the class, one ``a``
per quant family with rows); the band is the 5th-95th percentile of measured / modelled
over the fitted rows. ``leave_one_source_out`` refits without each source and counts
how many of that source's rows fall inside the band fitted without them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_tokperf.errors import ConfigError

BAND_QUANTILES = (0.05, 0.95)


@dataclass(frozen=True, slots=True)
class Observation:
    """One published decode row, reduced to what the model needs."""

    source: str
    device_class: str
    family: str
    bytes_per_token: float
    bandwidth_bytes_per_s: float
    tokens_per_s: float

    @property
    def stream_s(self) -> float:
        """The time a perfect stream of this row's bytes takes: 1 / ceiling."""
        return self.bytes_per_token / self.bandwidth_bytes_per_s


@dataclass(frozen=True, slots=True)
class ClassModel:
    """The fitted model of one device class."""

    device_class: str
    overhead_s: float
    cost_per_family: dict[str, float]
    """``a_q``: seconds per perfectly-streamed second; efficiency of a big model = 1/a."""
    ratio_low: float
    ratio_high: float
    """Band around the modelled tok/s: measured / modelled, 5th and 95th percentile."""
    rows: int

    def tokens_per_s(self, family: str, stream_s: float) -> float | None:
        """Modelled decode for a row of ``family`` whose perfect stream takes ``stream_s``."""
        cost = self.cost_per_family.get(family)
        if cost is None:
            return None
        return 1.0 / (cost * stream_s + self.overhead_s)

    def band(self, family: str, stream_s: float) -> tuple[float, float, float] | None:
        """(low, typical, high) tok/s, never above the ceiling."""
        typical = self.tokens_per_s(family, stream_s)
        if typical is None:
            return None
        ceiling = 1.0 / stream_s
        return (min(typical * self.ratio_low, ceiling), min(typical, ceiling),
                min(typical * self.ratio_high, ceiling))


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    lo, hi = math.floor(position), math.ceil(position)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def fit_class(observations: Sequence[Observation]) -> ClassModel:
    """Least squares of ``1/tok_s = a_q x stream_s + o`` over one class's rows."""
    import numpy as np

    if not observations:
        raise ConfigError("fit_class needs at least one observation")
    families = sorted({o.family for o in observations})
    design = np.zeros((len(observations), len(families) + 1))
    target = np.array([1.0 / o.tokens_per_s for o in observations])
    for i, o in enumerate(observations):
        design[i, families.index(o.family)] = o.stream_s
        design[i, -1] = 1.0
    solution, *_ = np.linalg.lstsq(design, target, rcond=None)
    overhead = max(float(solution[-1]), 0.0)
    if overhead != float(solution[-1]):  # no negative overhead: refit the costs alone
        solution, *_ = np.linalg.lstsq(design[:, :-1], target, rcond=None)
    costs = {f: max(float(solution[i]), 1.0) for i, f in enumerate(families)}
    model = ClassModel(observations[0].device_class, overhead, costs, 1.0, 1.0,
                       len(observations))
    ratios = [o.tokens_per_s / (model.tokens_per_s(o.family, o.stream_s) or math.inf)
              for o in observations]
    low, high = (_quantile(ratios, q) for q in BAND_QUANTILES)
    return ClassModel(model.device_class, overhead, costs, low, high, len(observations))


def fit(observations: Sequence[Observation]) -> dict[str, ClassModel]:
    """One model per device class present."""
    classes = sorted({o.device_class for o in observations})
    return {c: fit_class([o for o in observations if o.device_class == c]) for c in classes}


@dataclass(frozen=True, slots=True)
class HeldOut:
    """Leave-one-source-out result for one device class."""

    device_class: str
    rows: int
    checked: int
    """Rows whose source was held out and whose family the other sources cover."""
    inside: int
    above_ceiling: int

    @property
    def fraction_inside(self) -> float | None:
        return self.inside / self.checked if self.checked else None


def leave_one_source_out(observations: Sequence[Observation]) -> dict[str, HeldOut]:
    """Per class: refit without each source, count its rows inside the refitted band."""
    out = {}
    for cls in sorted({o.device_class for o in observations}):
        rows = [o for o in observations if o.device_class == cls]
        checked = inside = 0
        for source in sorted({o.source for o in rows}):
            rest = [o for o in rows if o.source != source]
            if not rest:
                continue
            model = fit_class(rest)
            for o in rows:
                if o.source != source:
                    continue
                band = model.band(o.family, o.stream_s)
                if band is None:
                    continue
                checked += 1
                inside += band[0] <= o.tokens_per_s <= band[2]
        above = sum(o.tokens_per_s > 1.0 / o.stream_s for o in rows)
        out[cls] = HeldOut(cls, len(rows), checked, inside, above)
    return out
