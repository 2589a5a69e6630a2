"""How well do the efficiency bands hold on the public record? The per-group table.

    PYTHONPATH=. .venv/bin/python lab/drivers/fit_bands.py [--public db/public] [--write]

Imports db/public (published llama-bench rows, each with its source) into a scratch
DB, keeps the rows ``band_fitting`` fits on (dense decode rows with a ceiling; not
-nkvo 1, not a GPU behind a host the source names), and prints per device class and
quant family the static band of ``expected.bands`` and how many rows it contains; then
the fitted model of ``band_fitting`` (big-model efficiency per family, depth cost,
per-token overhead per class) and, per class: rows, sources, the calibrated band, the
leave-one-source-out share inside (each source judged by a model fitted and calibrated
without it), the median band of those held-out rows as efficiency and as high/low, and
the rows above the ceiling. ``--write`` stores the model in
``pytest_tokperf/expected/band_fit.json``, which ``predict`` reads. No engine, no network.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from band_fitting import (
    COVERAGE,
    Observation,
    band_observations,
    fit,
    leave_one_source_out,
    model_to_dict,
)

from pytest_tokperf.expected.band_fit import FITTED_FILE
from pytest_tokperf.expected.bands import band_for
from pytest_tokperf.expected.llama_bench_import import import_llama_bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--public", default="db/public")
    parser.add_argument("--write", action="store_true",
                        help=f"store the fitted model in {FITTED_FILE.name} for predict")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "public.db"
        import_llama_bench(db, [Path(args.public)])
        obs = band_observations(db)
    print(f"{len(obs)} dense decode rows with a ceiling, "
          f"{len({o.source for o in obs})} sources")
    print("\nstatic bands (expected.bands) per device class / quant family:")
    groups: dict[tuple[str, str], list[Observation]] = defaultdict(list)
    for o in obs:
        groups[(o.device_class, o.family)].append(o)
    print(f"  {'class':15} {'family':7} {'rows':>4} {'srcs':>4} {'band':>9} {'inside':>7} "
          f"{'median eff':>10}")
    for (cls, family), rows in sorted(groups.items()):
        band = band_for(family, cls)  # type: ignore[arg-type]
        effs = sorted(o.tokens_per_s * o.stream_s for o in rows)
        inside = sum(band.low <= e <= band.high for e in effs)
        print(f"  {cls:15} {family:7} {len(rows):4d} {len({o.source for o in rows}):4d} "
              f"{band.low:4.0%}-{band.high:3.0%} {inside:3d}/{len(rows):<3d} "
              f"{effs[len(effs) // 2]:10.0%}")
    model = fit(obs)
    held = leave_one_source_out(obs)
    print("\nfitted model 1/tok_s = bytes/bandwidth x (a_q + k x depth/1000) + o_c, pooled "
          "a_q and k:")
    print("  efficiency of a big model (1/a_q): " + ", ".join(
        f"{f} {1 / a:.0%}" for f, a in model.cost_per_family.items()))
    print(f"  depth cost k: {model.depth_cost:.4f} per 1000 tokens")
    print("\nper device class: band = held-out log residuals' split-conformal "
          f"{(1 - COVERAGE) / 2:.0%}-{1 - (1 - COVERAGE) / 2:.0%}; LOSO = each source judged "
          "by a model fitted and calibrated without it")
    print(f"  {'class':13} {'rows':>4} {'srcs':>4} {'o (ms)':>7} {'band':>11} {'calib.':>9} "
          f"{'LOSO inside':>13} {'median band (eff)':>17} {'width':>6} {'>ceiling':>8}")
    for cls, h in held.items():
        cal = model.calibration.get(cls)
        band = "-" if cal is None else f"{math.exp(cal.low):.2f}-{math.exp(cal.high):.2f}x"
        calib = "-" if cal is None else f"{cal.residuals}{' pool' if cal.pooled else ''}"
        frac = ("-" if h.fraction_inside is None
                else f"{h.inside}/{h.checked} {h.fraction_inside:.0%}")
        eff = h.median_efficiency_band
        effs = "-" if eff is None else f"{eff[0]:.0%}-{eff[1]:.0%}"
        width = "-" if h.median_ratio is None else f"{h.median_ratio:.2f}x"
        print(f"  {cls:13} {h.rows:4d} {h.sources:4d} "
              f"{model.overhead_per_class[cls] * 1e3:7.2f} {band:>11} {calib:>9} "
              f"{frac:>13} {effs:>17} {width:>6} {h.above_ceiling:8d}")
    print("\nwidth: median high/low of the held-out rows' bands (1.00x would be a point).")
    if args.write:
        FITTED_FILE.write_text(json.dumps(model_to_dict(model, held), indent=1,
                                          sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {FITTED_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
