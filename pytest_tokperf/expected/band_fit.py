"""The efficiency model fitted on published rows, as shipped in ``band_fit.json``.

``1/tok_s = stream x (a_q + k x depth/1000) + o_c``: a cost per quant family, a depth
cost and a per-token overhead per device class, with a band calibrated on held-out
sources; derivation in docs/expected-speed.md, the fit in lab/drivers/band_fitting.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.errors import ConfigError

PREDICT_ROWS = 20
"""Public rows a device class needs before ``predict`` uses the fitted band for it."""
FITTED_FILE = Path(__file__).with_name("band_fit.json")
"""The model fitted on db/public, shipped in the package."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """The band around the modelled value: quantiles of held-out log residuals."""

    low: float
    high: float
    residuals: int
    pooled: bool
    """True: the class had too few residuals of its own; every class's residuals count."""


@dataclass(frozen=True, slots=True)
class Model:
    """Per-family costs, per-class overheads, the depth cost and the calibrated bands."""

    cost_per_family: dict[str, float]
    """``a_q``: seconds per perfectly-streamed second; efficiency of a big model = 1/a."""
    overhead_per_class: dict[str, float]
    """``o_c`` in seconds per token."""
    depth_cost: float
    """``k``: extra streamed seconds per streamed second, per 1000 tokens of depth."""
    calibration: dict[str, Calibration]
    rows_per_class: dict[str, int]
    sources_per_class: dict[str, int]

    def typical_tokens_per_s(self, device_class: str, family: str, stream_s: float,
                             depth_tokens: int = 0) -> float | None:
        """Modelled decode (None: the class or the family has no fitted term)."""
        cost = self.cost_per_family.get(family)
        overhead = self.overhead_per_class.get(device_class)
        if cost is None or overhead is None:
            return None
        return 1.0 / (stream_s * (cost + self.depth_cost * depth_tokens / 1000) + overhead)

    def band(self, device_class: str, family: str, stream_s: float,
             depth_tokens: int = 0) -> tuple[float, float, float] | None:
        """(low, typical, high) tok/s, never above the ceiling ``1 / stream_s``."""
        typical = self.typical_tokens_per_s(device_class, family, stream_s, depth_tokens)
        cal = self.calibration.get(device_class)
        if typical is None or cal is None:
            return None
        ceiling = 1.0 / stream_s
        return (min(typical * math.exp(cal.low), ceiling), min(typical, ceiling),
                min(typical * math.exp(cal.high), ceiling))


@dataclass(frozen=True, slots=True)
class Fitted:
    """The shipped model and the leave-one-source-out figures it was checked with."""

    model: Model
    loso_inside: dict[str, tuple[int, int]]
    """Per class: (inside, checked)."""


def load_fitted(path: Path = FITTED_FILE) -> Fitted | None:
    """The shipped fitted model (None: no file)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        model = Model(
            {str(k): float(v) for k, v in data["cost_per_family"].items()},
            {str(k): float(v) for k, v in data["overhead_s_per_class"].items()},
            float(data["depth_cost_per_1000_tokens"]),
            {str(c): Calibration(float(v["log_low"]), float(v["log_high"]),
                                 int(v["residuals"]), bool(v["pooled"]))
             for c, v in data["calibration"].items()},
            {str(k): int(v) for k, v in data["rows_per_class"].items()},
            {str(k): int(v) for k, v in data["sources_per_class"].items()},
        )
        loso = {str(c): (int(v["inside"]), int(v["checked"]))
                for c, v in data.get("loso", {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"fitted band model {str(path)!r} cannot be read ({exc}); reinstall "
            "pytest-tokperf (predict(band_source='fixed') skips it)"
        ) from exc
    return Fitted(model, loso)


def fitted_band(fitted: Fitted, device_class: str, family: str | None, stream_s: float,
                depth_tokens: int = 0) -> tuple[float, float, float] | None:
    """(low, typical, high) efficiency from the fitted model; None where the class has under
    ``PREDICT_ROWS`` public rows or the family no fitted cost (the fixed bands apply)."""
    if family is None or fitted.model.rows_per_class.get(device_class, 0) < PREDICT_ROWS:
        return None
    band = fitted.model.band(device_class, family, stream_s, depth_tokens)
    if band is None:
        return None
    low, typical, high = (tok_s * stream_s for tok_s in band)
    return low, typical, high


def describe_fitted(fitted: Fitted, device_class: str) -> str:
    """Where a fitted band comes from, in one line with its held-out check."""
    model = fitted.model
    inside, checked = fitted.loso_inside.get(device_class, (0, 0))
    share = f" ({inside / checked:.0%})" if checked else ""
    return (
        f"fitted model of db/public ({model.rows_per_class[device_class]} rows from "
        f"{model.sources_per_class[device_class]} sources; each source held out: "
        f"{inside}/{checked}{share} inside; per-token overhead "
        f"{model.overhead_per_class[device_class] * 1e3:.2f} ms, depth cost "
        f"{model.depth_cost:.4f} per 1000 tokens)"
    )
