"""How well do the efficiency bands hold on the public record? The per-group table.

    PYTHONPATH=. .venv/bin/python benchmarks/perf/bench_bands.py [--public db/public]

Imports db/public (published llama-bench rows, each with its source) into a scratch
DB, keeps the dense decode rows that have a ceiling (not those with -nkvo 1 or a host
the source names), and prints per device class and
quant family: rows, sources, the static band of ``hardware.bands`` and how many rows it
contains, then the fitted model of ``hardware.band_fit`` (fixed per-token overhead,
big-model efficiency per family, band) and its leave-one-source-out check: the share of
each source's rows inside the band fitted without that source. No engine, no network.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from pytest_tokperf.hardware.band_fit import Observation, fit, leave_one_source_out
from pytest_tokperf.hardware.bands import band_for, device_class, quant_family
from pytest_tokperf.storage.exchange import export_rows
from pytest_tokperf.storage.llama_bench_import import import_llama_bench
from pytest_tokperf.storage.store import ResultStore


NOT_HEALTHY = ("no_kv_offload", "host")
"""Configurations no band is for: the KV cache in system RAM, a GPU behind a host the
source names as the bottleneck (a Raspberry Pi, a RISC-V board)."""


def observations(db: Path) -> list[Observation]:
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
            kv = (row.get("footprint_kv_bytes_per_position") or 0) * (row.get("depth_tokens") or 0)
            out.append(Observation(
                source=json.loads(settings.get("lb.source_url", '"local"')),
                device_class=device_class(row.get("hardware_kind"), row.get("hardware_name")),
                family=family,
                bytes_per_token=float(row["footprint_weights_bytes"]) + kv,
                bandwidth_bytes_per_s=float(row["ceiling_bandwidth_bytes_per_s"]),
                tokens_per_s=float(decode),
            ))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--public", default="db/public")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "public.db"
        import_llama_bench(db, [Path(args.public)])
        obs = observations(db)
    print(f"{len(obs)} dense decode rows with a ceiling, "
          f"{len({o.source for o in obs})} sources")
    print("\nstatic bands (hardware.bands) per device class / quant family:")
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
    models = fit(obs)
    held = leave_one_source_out(obs)
    print("\nfitted model 1/tok_s = a_q x bytes/bandwidth + o, band = 5th-95th pct of "
          "measured/model:")
    print(f"  {'class':15} {'rows':>4} {'srcs':>4} {'o (ms)':>7} {'eff by family (1/a)':30} "
          f"{'band':>11} {'LOSO inside':>12} {'>ceiling':>8}")
    for cls, model in models.items():
        effs = ", ".join(f"{f} {1 / a:.0%}" for f, a in model.cost_per_family.items())
        h = held[cls]
        frac = "-" if h.fraction_inside is None else f"{h.inside}/{h.checked} {h.fraction_inside:.0%}"
        sources = len({o.source for o in obs if o.device_class == cls})
        print(f"  {cls:15} {model.rows:4d} {sources:4d} {model.overhead_s * 1e3:7.2f} "
              f"{effs:30} {model.ratio_low:5.2f}-{model.ratio_high:4.2f}x {frac:>12} "
              f"{h.above_ceiling:8d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
