"""llama-bench records into the results store, through the rows every tokperf run uses:
each file is one run (imported again, it adds nothing), every field also kept verbatim in
``engine_settings`` as ``lb.<field>``; the field mapping is in docs/expected-speed.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_tokperf.ceiling import check_efficiency, compute_ceiling, decode_efficiency
from pytest_tokperf.environment import UNKNOWN_VERSION, package_version
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.expected.bands import Band, device_class, quant_family
from pytest_tokperf.expected.band_choice import expected_band
from pytest_tokperf.hardware.catalog import lookup
from pytest_tokperf.results import (
    BenchResult, Ceiling, EngineInfo, HardwareInfo, ModelInfo, RunInfo, Sample, Summary, Verdict,
    Workload,
)
from pytest_tokperf.storage.exchange import Added, add_run, adding_to
from pytest_tokperf.storage.history import series_metric
from pytest_tokperf.storage.run_files import ResultBundle, RunBundle
from pytest_tokperf.expected.llama_bench_parse import LlamaBenchRecord, read_llama_bench
from pytest_tokperf.storage.env_hash import dumps
from pytest_tokperf.storage.rows import (
    Row, environment_row, result_row, run_row, sample_rows, series_of,
)
from pytest_tokperf.storage.location import DbLocation
from pytest_tokperf.storage.store import ResultStore

ENGINE_NAME = "llama-bench"
SETTING_PREFIX = "lb."
_COLUMNED = ("n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "samples_ts", "samples_ns")
_QUANT = re.compile(r"^(?:MOSTLY_)?(?:[IT]?Q\d(?:_[0-9A-Z]+)*|F16|BF16|F32|MXFP4|NVFP4)$", re.I)
_SIZE_SUFFIX = {"small": "S", "medium": "M", "large": "L"}
_ACTIVE = re.compile(r"\b\d+(?:\.\d+)?[BM]\.A(?P<active>\d+(?:\.\d+)?)(?P<unit>[BM])\b")


@dataclass(frozen=True, slots=True)
class ImportedRow:
    """What one record became (for the CLI's summary and ``outliers``)."""

    record: LlamaBenchRecord
    test_id: str
    series_key: str
    hardware: HardwareInfo | None
    ceiling: Ceiling | None
    band: Band | None
    efficiency: float | None
    verdict: Verdict
    metric: str = "decode"
    """What the row's series is judged on (``series_metric``): a pp row has no decode band."""


def quant_of(model_type: str | None) -> str | None:
    """``"qwen2 7B Q4_K - Medium"`` -> ``Q4_K_M``; ``"llama 7B mostly Q4_0"`` -> ``Q4_0``."""
    words = (model_type or "").replace("mostly ", "").split()
    for index in range(len(words) - 1, -1, -1):
        if not _QUANT.match(words[index]):
            continue
        name = words[index].upper().removeprefix("MOSTLY_")
        rest = words[index + 1:]
        if len(rest) >= 2 and rest[0] == "-" and rest[1].lower() in _SIZE_SUFFIX:
            name += "_" + _SIZE_SUFFIX[rest[1].lower()]
        return name
    return None


def active_parameters_of(model_type: str | None) -> float | None:
    """MoE names carry the active count: ``"qwen3moe 30B.A3B Q4_K - Medium"`` -> 3e9."""
    found = _ACTIVE.search(model_type or "")
    if not found:
        return None
    return float(found["active"]) * (1e9 if found["unit"] == "B" else 1e6)


_OLD_BACKEND_FLAGS = (
    ("cuda", "CUDA"), ("metal", "Metal"), ("vulkan", "Vulkan"), ("opencl", "OpenCL"),
    ("sycl", "SYCL"), ("kompute", "Kompute"), ("blas", "BLAS"),
)
"""llama-bench before ``backends`` (2023-early 2024) printed one boolean per backend."""


def backends_of(fields: dict[str, Any]) -> list[str]:
    """``backends`` split (``"Metal,BLAS"``), or the old per-backend booleans set."""
    if fields.get("backends"):
        return [b for b in re.split(r"[,/ ]+", str(fields["backends"])) if b]
    return [name for key, name in _OLD_BACKEND_FLAGS if fields.get(key) in (True, 1, "1")]


def device_of(fields: dict[str, Any]) -> tuple[str, bool]:
    """The device text a record ran on and whether it is a GPU (layers offloaded)."""
    backends = {b.lower() for b in backends_of(fields)}
    on_gpu = bool(backends - {"cpu", "blas"}) and fields.get("n_gpu_layers") != 0
    if fields.get("device"):
        return str(fields["device"]), on_gpu
    gpu, cpu = str(fields.get("gpu_info") or ""), str(fields.get("cpu_info") or "")
    return (gpu if on_gpu and gpu else cpu or gpu), on_gpu


def resolve_hardware(fields: dict[str, Any]) -> HardwareInfo | None:
    """The record's device as the catalog knows it (None: nothing named)."""
    text, on_gpu = device_of(fields)
    if not text:
        return None
    detail = f"llama-bench device {text!r}"
    parts = [p.strip() for p in re.split(r",|/", text) if p.strip()]
    if on_gpu and len(parts) > 1:
        return HardwareInfo(name=text, kind="gpu",
                            detail=f"{detail}: {len(parts)} devices, no one-device ceiling")
    cores = fields.get("gpu_cores")
    entry = lookup(text, int(cores) if cores else None, kind=None if on_gpu else "cpu")
    if entry is None and not on_gpu:
        entry = lookup(text, int(cores) if cores else None, kind="apple")
    if entry is None:
        return HardwareInfo(name=text, kind="gpu" if on_gpu else "cpu",
                            detail=f"{detail}: not in the hardware catalog")
    return HardwareInfo(
        name=entry.name, kind=entry.kind, memory_bytes=entry.memory_bytes,
        spec_bandwidth=entry.bandwidth(), peak_flops=entry.fp16_flops,
        detail=f"{detail} -> catalog line {entry.line}",
    )


def _summary(values: Sequence[float], mean: float, stdev: float) -> Summary:
    if not values:
        return Summary(median=mean, mean=mean, stdev=stdev, minimum=mean, maximum=mean, n=1)
    return Summary(median=statistics.median(values), mean=mean, stdev=stdev,
                   minimum=min(values), maximum=max(values), n=len(values))


def bench_result(record: LlamaBenchRecord) -> BenchResult:
    """The record as the ``BenchResult`` a pytest run would have stored."""
    f = record.fields
    prompt, gen, depth = int(f.get("n_prompt") or 0), int(f.get("n_gen") or 0), \
        int(f.get("n_depth") or 0)
    if "avg_ts" not in f:
        raise ConfigError(f"{record.source}: no avg_ts (tokens/s) in the llama-bench row")
    kind = "tg" if gen and not prompt else "pp" if prompt and not gen else "pg"
    rates = [float(x) for x in f.get("samples_ts") or []] if kind != "pg" else []
    walls = [int(x) / 1e9 for x in f.get("samples_ns") or []] if kind != "pg" else []
    samples = tuple(Sample(  # no request: no TTFT, no text (None: not measured)
        ttft_s=None,
        prefill_tokens_per_s=ts if kind == "pp" else None,
        decode_tokens_per_s=ts if kind == "tg" else None,
        prompt_tokens=prompt, generated_tokens=gen, inter_token_s=(),
        engine_prefill_s=(prompt / ts) if kind == "pp" else None,
        engine_prefill_tokens_per_s=ts if kind == "pp" else None,
        engine_decode_tokens_per_s=ts if kind == "tg" else None,
        cached_prompt_tokens=None, speculative=False, text_chars=None,
        round_index=index, round_wall_s=walls[index] if index < len(walls) else None,
    ) for index, ts in enumerate(rates))
    figure = _summary(rates, float(f["avg_ts"]), float(f.get("stddev_ts") or 0.0))
    return BenchResult(
        workload=Workload(prompt_tokens=prompt, generate_tokens=gen, depth_tokens=depth,
                          repetitions=len(samples), warmup=0),
        engine=_engine(f), samples=samples, ttft_s=None,
        decode_tokens_per_s=figure if kind == "tg" else None,
        prefill_tokens_per_s=figure if kind == "pp" else None,
        engine_decode_tokens_per_s=figure if kind == "tg" else None,
        engine_prefill_tokens_per_s=figure if kind == "pp" else None,
        inter_token_p50_s=None, inter_token_p90_s=None, inter_token_p99_s=None,
        decode_agreement=None, ttft_minus_engine_prefill_s=None,
        aggregate_tokens_per_s=figure if kind == "pg" else None,
    )


def _flash(value: Any) -> str | None:
    if isinstance(value, bool):
        return "on" if value else "off"
    return {1: "on", 0: "off", -1: "auto"}.get(value) if isinstance(value, int) else (
        str(value) if value is not None else None)


def _engine(f: dict[str, Any]) -> EngineInfo:
    kept = {SETTING_PREFIX + k: dumps(v) for k, v in f.items() if k not in _COLUMNED}
    if int(f.get("n_prompt") or 0) and int(f.get("n_gen") or 0):
        kept.update({SETTING_PREFIX + k: dumps(f[k]) for k in ("samples_ts", "samples_ns")
                     if k in f})
    backends = backends_of(f)
    tokperf = {
        "backend": next((b for b in backends if b.lower() not in ("blas",)), None),
        "flash_attn": _flash(f.get("flash_attn")),
        "gpu_layers": None if f.get("n_gpu_layers") is None else str(f["n_gpu_layers"]),
        "batch_size": f.get("n_batch"), "ubatch_size": f.get("n_ubatch"),
        "cache_type_k": f.get("type_k"), "cache_type_v": f.get("type_v"),
        "split_mode": f.get("split_mode"),
    }
    pairs = {**{k: str(v) for k, v in tokperf.items() if v is not None}, **kept}
    build = f.get("build_number")
    return EngineInfo(
        name=ENGINE_NAME, version=f"b{build}" if build is not None else None,
        build=f.get("build_commit"), base_url="", backend=tokperf["backend"],
        model_path=f.get("model_filename"), model_name=f.get("model_type"),
        threads=f.get("n_threads"), settings=tuple(sorted(pairs.items())),
    )


def model_info(f: dict[str, Any]) -> ModelInfo:
    name = os.path.basename(str(f.get("model_filename") or "")) or str(f.get("model_type"))
    model_type = str(f.get("model_type") or "")
    return ModelInfo(
        file_name=name, file_bytes=f.get("model_size"),
        architecture=model_type.split()[0] if model_type else None,
        parameter_count=f.get("model_n_params"), file_type=quant_of(model_type),
    )


def ceiling_of(f: dict[str, Any], hardware: HardwareInfo | None) -> Ceiling | None:
    """Bandwidth over the file's bytes (active share for MoE); None without either."""
    from pytest_tokperf.expected.prediction import footprint_from_file_size

    if hardware is None or hardware.spec_bandwidth is None or not f.get("model_size"):
        return None
    params = f.get("model_n_params") or None
    active = active_parameters_of(f.get("model_type"))
    if is_moe(f) and active is None:
        return None  # the whole file is not read per token; the active share is unknown
    quant = quant_of(f.get("model_type"))
    depth = int(f.get("n_depth") or 0)
    shape = {k: int(f.get(k) or 0) for k in ("n_layer", "n_head_kv", "head_dim",
                                            "sliding_window", "sliding_layers")}
    known = bool(shape["n_layer"] and shape["n_head_kv"] and shape["head_dim"])
    kv_type = str(f.get("type_k") or "f16")  # K's type for both: V rarely differs
    try:
        fp = footprint_from_file_size(
            float(f["model_size"]), quant, parameters=params,
            active_parameters=active if params and active and active < params else None,
            **(shape if known else {}), depth_tokens=depth if known else 0, kv_type=kv_type)
    except ConfigError:
        return None
    if depth and not known:
        fp = replace(fp, warnings=(*fp.warnings, f"KV at depth {depth} not counted: "
                                   "llama-bench names no layer shape"))
    return compute_ceiling(fp, hardware.spec_bandwidth, hardware.peak_flops)


def is_moe(f: dict[str, Any]) -> bool:
    """A mixture of experts, by llama-bench's model_type ("qwen3moe 30B.A3B", "... MoE")."""
    text = str(f.get("model_type") or "").lower()
    return "moe" in text or active_parameters_of(text.upper()) is not None


def band_of(f: dict[str, Any], hardware: HardwareInfo | None,
            ceiling: Ceiling | None = None) -> Band | None:
    """The row's band (``expected_band``); None for a MoE or an unknown device."""
    if hardware is None or is_moe(f):
        return None
    stream_s = None if ceiling is None else 1.0 / ceiling.decode_tokens_per_s
    depth = 0 if ceiling is None else ceiling.footprint.depth_tokens
    return expected_band(device_class(hardware.kind, hardware.name),
                         quant_family(quant_of(f.get("model_type"))), stream_s, depth).band


def judge(result: BenchResult, ceiling: Ceiling | None, band: Band | None
          ) -> tuple[float | None, Verdict]:
    """Efficiency and verdict: below the band's low end fails, above 115% is suspect."""
    eff = decode_efficiency(result, ceiling)
    decode = result.judged_decode_tokens_per_s
    if eff is None or ceiling is None or band is None or decode is None:
        return eff, "unchecked"
    return eff, check_efficiency(decode.median, ceiling, band.low).status


def imported_row(record: LlamaBenchRecord) -> tuple[ImportedRow, ResultBundle]:
    f = record.fields
    result = bench_result(record)
    hardware = resolve_hardware(f)
    ceiling = ceiling_of(f, hardware)
    band = band_of(f, hardware, ceiling)
    eff, verdict = judge(result, ceiling, band)
    model = model_info(f)
    device = device_of(f)[0] or "unknown device"
    test_id = f"{ENGINE_NAME} {record.test_name}{_unkeyed_settings(f)} [{device}]"
    series = series_of(test_id, result, model)
    row: Row = {"series_key": series.key, "test_id": test_id,
                "created_at": _created_at(f, record), **result_row(result, ceiling, eff, verdict)}
    bundle = ResultBundle(series.text, environment_row(result.engine, model, hardware), row,
                          sample_rows(result.samples))
    return (ImportedRow(record, test_id, series.key, hardware, ceiling, band, eff, verdict,
                        series_metric(result).name), bundle)


_UNKEYED = (("no_kv_offload", "nkvo", (False, 0, None)), ("n_cpu_moe", "ncmoe", (0, None)),
            ("tensor_buft_overrides", "ot", ("none", "", None)), ("poll", "poll", (50, None)),
            ("cpu_strict", "cpu-strict", (False, 0, None)))


def _unkeyed_settings(f: dict[str, Any]) -> str:
    """Settings that change speed but have no field in the series key, off their default:
    they go into the test id so such rows get their own series (``tg128 nkvo=1``)."""
    parts = [f"{short}={_text(f[name])}" for name, short, defaults in _UNKEYED
             if name in f and f[name] not in defaults]
    return "".join(f" {p}" for p in parts)


def _text(value: Any) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


def _created_at(f: dict[str, Any], record: LlamaBenchRecord) -> str:
    """``test_time``, else the published date, else the epoch; a row's position in its
    file is added as microseconds so rows keep their order and a re-import dedupes."""
    if f.get("test_time"):
        return str(f["test_time"])
    day = str(f.get("published") or "1970-01-01")[:10]
    found = re.search(r"[:\[#](\d+)\]?$", record.source)  # file:12, file[3], file:table#2
    position = int(found[1]) if found else 0
    return f"{day}T00:00:00.{position % 1_000_000:06d}Z"


def run_of(records: Sequence[LlamaBenchRecord], source: str) -> RunInfo:
    digest = hashlib.sha256(dumps([r.fields for r in records]).encode()).hexdigest()[:16]
    first = records[0].fields
    return RunInfo(
        run_id=f"llama-bench-{digest}",
        started_at=min(_created_at(r.fields, r) for r in records),
        host=str(first.get("source_url") or os.path.basename(source)),
        os="", python="", plugin_version=package_version("pytest-tokperf") or UNKNOWN_VERSION,
        ci_provider=ENGINE_NAME, ci_job=os.path.basename(source),
    )


def import_records(store: ResultStore, records: Sequence[LlamaBenchRecord], source: str
                   ) -> tuple[Added, list[ImportedRow]]:
    built = [imported_row(r) for r in records]
    bundle = RunBundle(run_row(run_of(records, source)), [b for _, b in built])
    return add_run(store, bundle), [i for i, _ in built]


def import_llama_bench(db: DbLocation, paths: Iterable[Path], *, device: str | None = None,
                       gpu_cores: int | None = None) -> tuple[Added, list[ImportedRow]]:
    """Read each llama-bench output file and add it to ``db`` as one run; ``device`` (and
    ``gpu_cores``) name the chip for every row (stored as its ``device``/``gpu_cores``)."""
    extra = {k: v for k, v in (("device", device), ("gpu_cores", gpu_cores)) if v is not None}
    total, rows = Added(), []
    read = [(path, [replace(r, fields={**r.fields, **extra}) for r in read_llama_bench(path)])
            for path in _files(paths)]  # every file read before the DB is opened (or made)
    with adding_to(db) as store:
        for path, records in read:
            added, imported = import_records(store, records, str(path))
            total += added
            rows += imported
    return total, rows


def _files(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a folder stands for its llama-bench outputs (by suffix)."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*")
                          if p.suffix in (".json", ".jsonl", ".csv", ".sql", ".md")
                          and p.name.lower() != "readme.md")
        else:
            out.append(path)
    return out
