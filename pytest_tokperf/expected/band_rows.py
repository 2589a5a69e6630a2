"""Stored llama-bench decode rows as the observations the efficiency model is fitted on.

Dense decode rows with a ceiling only: no MoE, no KV cache in system RAM, no GPU behind
a host the source names as the bottleneck.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_tokperf.expected.band_fit import Observation
from pytest_tokperf.expected.bands import device_class, quant_family
from pytest_tokperf.storage.exchange import export_rows
from pytest_tokperf.storage.store import ResultStore

NOT_HEALTHY = ("no_kv_offload", "host")
"""Configurations no band is for: the KV cache in system RAM, a GPU behind a host the
source names as the bottleneck."""


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
