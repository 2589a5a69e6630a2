"""The expected efficiency band of one decode, from one place: ``expected_band``, which
``predict``, the llama-bench import and ``tokperf outliers`` all call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pytest_tokperf.expected.band_fit import (
    PREDICT_ROWS,
    describe_fitted,
    fitted_band,
    load_fitted,
)
from pytest_tokperf.expected.bands import (
    DEVICE_CLASS_NAMES,
    Band,
    DeviceClass,
    QuantFamily,
    band_for,
)

BandOrigin = Literal["fitted", "fixed"]
BandSource = Literal["auto", "fixed"]
FITTED_SOURCE = ("db/public: published llama-bench rows, each with its link, in the "
                 "pytest-tokperf repository")


@dataclass(frozen=True, slots=True)
class Expected:
    """A band, where it comes from (``fitted`` or ``fixed``) and why, in one line."""

    band: Band
    origin: BandOrigin
    detail: str


def expected_band(device_class: DeviceClass, family: QuantFamily | None,
                  stream_s: float | None, depth_tokens: int = 0,
                  band_source: BandSource = "auto") -> Expected:
    """The fitted band where the class has ``PREDICT_ROWS`` rows, else the fixed one, and
    why; ``stream_s`` is 1 / ceiling (None: the fixed band, as ``band_source="fixed"``)."""
    fixed = band_for(family, device_class)
    if band_source == "fixed":
        return Expected(fixed, "fixed", "fixed band of expected.bands (band_source='fixed')")
    fitted = load_fitted()
    if fitted is not None and stream_s is not None:
        efficiency = fitted_band(fitted, device_class, family, stream_s, depth_tokens)
        if efficiency is not None:
            low, typical, high = efficiency
            return Expected(Band(family, device_class, low, typical, high, (FITTED_SOURCE,)),
                            "fitted", describe_fitted(fitted, device_class))
    rows = fitted.model.rows_per_class.get(device_class, 0) if fitted is not None else 0
    if family is None:
        why = "the fitted model needs the quant (--quant) to price the bytes"
    elif stream_s is None:
        why = "no ceiling to scale the fitted model by"
    elif rows < PREDICT_ROWS:
        why = (f"the fitted model is used for a class with {PREDICT_ROWS} public rows; "
               f"{DEVICE_CLASS_NAMES[device_class]} has {rows}")
    else:
        why = f"the fitted model has no {family} rows"
    return Expected(fixed, "fixed", f"fixed band of expected.bands ({why})")
