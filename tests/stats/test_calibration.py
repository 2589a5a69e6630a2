"""Noise estimates and the smallest change they let a comparison resolve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scipy import optimize
from scipy import stats as sps

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats import DECODE, noise
from pytest_tokperf.stats.calibration import (
    NoiseEstimate, detectable_change, detectable_shift, format_noise, repetitions_needed,
)
from pytest_tokperf.stats.shifts import Shift


def versions(cv: float, count: int = 40, reps: int = 5, seed: int = 0) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(100 * (1 + cv * rng.standard_normal(reps))) for _ in range(count)]


def test_noise_recovers_the_spread_and_ignores_drift_between_versions() -> None:
    estimate = noise(versions(0.02))
    assert estimate.cv == pytest.approx(0.02, rel=0.15)
    assert (estimate.n_versions, estimate.n_samples) == (40, 200)
    drifting = [[x * (1 + 0.1 * (i % 2)) for x in v] for i, v in enumerate(versions(0.02))]
    assert noise(drifting).cv == pytest.approx(estimate.cv, rel=1e-9)


def test_noise_shrugs_off_occasional_stalls() -> None:
    clean = versions(0.02, seed=1)
    stalled = [[v[0] * 0.75, *v[1:]] if i % 5 == 0 else v for i, v in enumerate(clean)]
    assert noise(stalled).cv == pytest.approx(noise(clean).cv, rel=0.2)


def test_noise_needs_repetitions_and_clean_samples() -> None:
    with pytest.raises(ConfigError, match="needs a version with at least 2 samples"):
        noise([[100.0], [101.0]])
    with pytest.raises(ConfigError, match=r"version 1\[0\] is -3.0"):
        noise([[100.0, 101.0], [-3.0, 100.0]])
    assert noise([[100.0, 100.0], [101.0]]) == NoiseEstimate(0.0, 1, 3)


def test_detectable_change_shrinks_with_repetitions_and_grows_with_noise() -> None:
    by_reps = [detectable_change(0.02, n) for n in (3, 5, 10, 30)]
    assert by_reps == sorted(by_reps, reverse=True)
    by_cv = [detectable_change(cv, 5) for cv in (0.005, 0.01, 0.02, 0.05)]
    assert by_cv == sorted(by_cv)
    assert detectable_change(0.02, 5, n_baseline=100) < detectable_change(0.02, 5)
    assert detectable_change(0.02, 5, alpha=0.05) < detectable_change(0.02, 5, alpha=0.005)
    assert detectable_change(0.02, 5, power=0.95) > detectable_change(0.02, 5, power=0.5)
    assert detectable_change(0.0, 3) == 0.0


def test_detectable_change_is_the_noncentral_t_power_figure() -> None:
    df, crit = 8, float(sps.t.ppf(1 - 0.005 / 2, 8))
    ncp = optimize.brentq(lambda x: sps.nct.sf(crit, df, x) - 0.8, 0.0, 50.0)
    assert detectable_change(0.02, 5) == pytest.approx(math.expm1(ncp * 0.02 * math.sqrt(0.4)),
                                                       rel=1e-6)


def test_repetitions_needed_is_the_first_count_that_suffices() -> None:
    need = repetitions_needed(0.02, 0.05)
    assert detectable_change(0.02, need) <= 0.05 < detectable_change(0.02, need - 1)
    assert repetitions_needed(0.0, 0.05) == 2
    per_version = repetitions_needed(0.02, 0.05, versions=5)
    assert per_version < need
    assert detectable_change(0.02, per_version, n_baseline=5 * per_version, versions=5) <= 0.05


def test_detectable_shift_uses_the_comparisons_own_standard_error() -> None:
    shift = Shift(-0.01, 0.01, 24.0, 25, 5, "pooled", 0.02, 5)
    wide = Shift(-0.01, 0.02, 24.0, 25, 5, "pooled", 0.02, 5)
    assert 0.03 < detectable_shift(shift) < detectable_shift(wide)
    assert math.isnan(detectable_shift(Shift(0.0, math.nan, math.nan, 3, 3, "no spread", 0.0)))


@pytest.mark.parametrize(
    ("call", "message"),
    [(lambda: detectable_change(-0.1, 5), "cv is -0.1"),
     (lambda: detectable_change(math.nan, 5), "cv is nan"),
     (lambda: detectable_change(0.02, 1), "repetitions are 1 and 1"),
     (lambda: detectable_change(0.02, 5, alpha=1.0), "alpha is 1.0"),
     (lambda: detectable_change(0.02, 5, versions=9), "versions is 9: give 1 to 5"),
     (lambda: repetitions_needed(0.02, 0.0), "change is 0.0"),
     (lambda: repetitions_needed(math.inf, 0.05), "cv is inf"),
     (lambda: repetitions_needed(0.5, 1e-6), "needs over a million repetitions")],
)
def test_bad_calibration_arguments(call: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()  # type: ignore[operator]


def test_format_noise_says_what_to_do() -> None:
    line = format_noise(DECODE, NoiseEstimate(0.018, 10, 50), 5)
    assert line.startswith("decode CV 1.8%: smallest detectable change at 5 reps ≈ ")
    assert line.endswith(f"; add reps for finer ({repetitions_needed(0.018, 0.05)} resolve 5%)")
    assert format_noise(DECODE, 0.004, 5).endswith("; enough for the 5% minimum effect")
