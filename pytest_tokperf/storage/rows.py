"""Value types to database rows and back, and the series key: rows are plain dicts named
like the columns in ``schema``, JSON lists and objects stored as text. No database here."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any, cast

from pytest_tokperf.engines.speed_settings import ServerSettings
from pytest_tokperf.errors import StorageError
from pytest_tokperf.jsontext import loads as bounded_loads
from pytest_tokperf.results import (
    Bandwidth, BandwidthSource, BenchResult, Ceiling, EngineInfo, Footprint, HardwareInfo,
    MachineLoad, ModelInfo, RunInfo, Sample, Summary, Verdict, Workload,
)
from pytest_tokperf.storage.env_hash import PER_RESULT_COLUMNS, dumps, environment_hash
from pytest_tokperf.storage.schema import SUMMARY_FIGURES, SUMMARY_FIGURES_V6
from pytest_tokperf.transport.credentials import redact_url

Row = dict[str, Any]

JSON_COLUMNS = frozenset(
    {"engine_settings", "model_quant_types", "footprint_warnings", "notes", "inter_token_s"}
)
"""Columns holding JSON text (a list, or an object for ``engine_settings``)."""


def speed_settings(engine: EngineInfo) -> Row:
    """The speed columns of an ``environments`` row: what the engine ran with
    (``ServerSettings.from_engine``), observed values where known, else requested."""
    settings = ServerSettings.from_engine(engine)
    return {
        "threads": engine.threads,
        **settings.columns(),
        "context_size": engine.context_size,
        "speculative": engine.speculative,
    }


def series_settings(engine: EngineInfo) -> Row:
    """The speed settings as the series key holds them: requested, defaults as None (so a
    setting left at the engine's default keeps the key it had before it was recorded)."""
    fields = ServerSettings.from_engine(engine).series_fields(engine.name)
    return {
        "threads": engine.threads,
        **{k: fields[k] for k in ("batch_size", "ubatch_size", "gpu_layers", "flash_attn",
                                  "kv_type")},
        "context_size": engine.context_size,
        "speculative": engine.speculative,
        **{k: fields[k] for k in ("kv_type_v", "threads_batch", "split_mode", "backend")},
    }


ENGINE_SETTING_FIELDS = frozenset({
    "threads", "batch_size", "ubatch_size", "gpu_layers", "flash_attn", "kv_type",
    "context_size", "kv_type_v", "threads_batch", "split_mode", "backend",
})
"""Series fields the engine's configuration sets (the rest describe the workload)."""

_LATER_FIELDS: dict[str, object] = {
    "cached_prefix_tokens": 0, "draft_model": None, "chat": False,
    "kv_type_v": None, "threads_batch": None, "split_mode": None, "backend": None,
}
"""Series fields added after schema v2 (v3: workloads, v5: speed settings), with the
value that leaves a key unchanged."""


@dataclass(frozen=True, slots=True)
class Series:
    """Everything that changes speed except what a history compares across (engine version
    and build, driver, hardware, OS): two results are comparable exactly when their series
    match. ``model`` is ``sha256:<content hash>``, else ``file:<name>:<bytes>``, else the
    engine's model name. Every field is a column of the ``series`` table."""

    test_id: str
    engine_name: str
    model: str
    quant: str | None
    threads: int | None
    batch_size: int | None
    ubatch_size: int | None
    gpu_layers: int | None
    flash_attn: str | None
    kv_type: str | None
    context_size: int | None
    speculative: bool
    prompt_tokens: int
    generate_tokens: int
    depth_tokens: int
    concurrency: int
    cached_prefix_tokens: int = 0
    draft_model: str | None = None
    chat: bool = False
    kv_type_v: str | None = None
    """V cache type where it differs from ``kv_type`` (the K type)."""
    threads_batch: int | None = None
    split_mode: str | None = None
    backend: str | None = None
    """cuda, metal, vulkan, rocm, ... (None: cpu or not known)."""

    @property
    def text(self) -> str:
        """Canonical JSON with sorted keys (``series.series_text``); fields added after schema
        v2 appear only off their default, so every older series keeps its key."""
        fields = {name: value for name, value in asdict(self).items()
                  if not (name in _LATER_FIELDS and value == _LATER_FIELDS[name])}
        return dumps(fields)

    @property
    def key(self) -> str:
        """Stable 16-hex-digit sha256 of ``text`` (``series.series_key``)."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    @classmethod
    def from_text(cls, text: str) -> Series:
        """The series a ``series_text`` names; ``StorageError`` for text that names none."""
        try:
            fields = bounded_loads(text)
            if not isinstance(fields, dict):
                raise TypeError(f"a JSON {type(fields).__name__}, not an object")
            return cls(**fields)
        except (ValueError, TypeError) as exc:
            reason = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
            raise StorageError(f"series text {str(text)[:60]!r} names no tokperf series "
                               f"({reason}): the DB or file was written by another tool or "
                               f"is damaged") from exc

    @property
    def workload_key(self) -> str:
        """The series without the engine's speed settings: what one test measures, so two
        builds whose defaults differ (a release turning flash attention on) still compare."""
        fields = {name: value for name, value in asdict(self).items()
                  if name not in ENGINE_SETTING_FIELDS}
        return hashlib.sha256(dumps(fields).encode()).hexdigest()[:16]


def model_identity(engine: EngineInfo, model: ModelInfo | None) -> str:
    if model is not None and model.content_hash:
        return f"sha256:{model.content_hash}"
    if model is not None:
        return f"file:{model.file_name}:{model.file_bytes}"
    return f"engine:{engine.model_name or engine.model_path or 'unknown'}"


def series_of(test_id: str, result: BenchResult, model: ModelInfo | None) -> Series:
    """The series a result belongs to (pure; see ``Series`` for what is in it)."""
    quant = None
    if model is not None:
        quant = model.file_type or (",".join(sorted(model.quant_types)) or None)
    workload = result.workload
    return Series(
        test_id=test_id,
        engine_name=result.engine.name,
        model=model_identity(result.engine, model),
        quant=quant,
        **series_settings(result.engine),
        prompt_tokens=workload.prompt_tokens,
        generate_tokens=workload.generate_tokens,
        depth_tokens=workload.depth_tokens,
        concurrency=workload.concurrency,
        cached_prefix_tokens=workload.cached_prefix_tokens,
        draft_model=dict(result.engine.settings).get("draft_model"),
        chat=workload.chat,
    )


def series_key(test_id: str, result: BenchResult, model: ModelInfo | None) -> str:
    """Stable hash of the series a result belongs to; see ``Series``."""
    return series_of(test_id, result, model).key


def series_row(series: Series) -> Row:
    return {"series_key": series.key, "series_text": series.text, **asdict(series)}


def run_row(run: RunInfo) -> Row:
    return {**asdict(run), "finished_at": None}


def run_from_row(row: Row) -> RunInfo:
    return RunInfo(**{k: row[k] for k in RunInfo.__dataclass_fields__})


def _bandwidth_cols(prefix: str, bw: Bandwidth | None) -> Row:
    return {
        f"{prefix}_bytes_per_s": bw.bytes_per_s if bw else None,
        f"{prefix}_source": bw.source if bw else None,
        f"{prefix}_detail": bw.detail if bw else None,
    }


def _bandwidth(row: Row, prefix: str) -> Bandwidth | None:
    if row[f"{prefix}_bytes_per_s"] is None:
        return None
    source = cast(BandwidthSource, row[f"{prefix}_source"])
    return Bandwidth(row[f"{prefix}_bytes_per_s"], source, row[f"{prefix}_detail"] or "")


def environment_row(engine: EngineInfo, model: ModelInfo | None, hardware: HardwareInfo | None
                    ) -> Row:
    """One ``environments`` row; ``env_hash`` is the sha256 of every other column."""
    hw = hardware
    row: Row = {
        "engine_name": engine.name,
        "engine_version": engine.version,
        "engine_build": engine.build,
        "engine_backend": engine.backend,
        "engine_base_url": redact_url(engine.base_url),  # whatever the adapter passed
        "engine_model_path": engine.model_path,
        "engine_model_name": engine.model_name,
        "engine_settings": dumps(dict(engine.settings)),
        **speed_settings(engine),
        "hardware_name": hw.name if hw else None,
        "hardware_kind": hw.kind if hw else None,
        "hardware_driver": hw.driver if hw else None,
        "hardware_memory_bytes": hw.memory_bytes if hw else None,
        "hardware_peak_flops": hw.peak_flops if hw else None,
        "hardware_detail": hw.detail if hw else None,
        **_bandwidth_cols("spec_bandwidth", hw.spec_bandwidth if hw else None),
        **_bandwidth_cols("measured_bandwidth", hw.measured_bandwidth if hw else None),
    }
    for name in ModelInfo.__dataclass_fields__:
        row[f"model_{name}"] = getattr(model, name) if model else None
    row["model_quant_types"] = dumps(list(model.quant_types)) if model else None
    row["env_hash"] = environment_hash(row)
    return row


def split_environment(env: Row) -> tuple[Row, Row]:
    """An ``environment_row`` -> (the ``environments`` row, its per-result columns)."""
    per_result = {k: env.get(k) for k in PER_RESULT_COLUMNS}
    identity = {**env, **{k: None for k in PER_RESULT_COLUMNS}}
    identity["env_hash"] = environment_hash(identity)
    return identity, per_result


def with_result_columns(env: Row, result: Row) -> Row:
    """An ``environments`` row completed with its result's per-result columns (an old row
    keeps its own where the result has none)."""
    return {**env, **{k: result[k] for k in PER_RESULT_COLUMNS if result.get(k) is not None}}


def engine_from_row(row: Row) -> EngineInfo:
    return EngineInfo(
        name=row["engine_name"],
        version=row["engine_version"],
        build=row["engine_build"],
        base_url=row["engine_base_url"],
        backend=row["engine_backend"],
        model_path=row["engine_model_path"],
        model_name=row["engine_model_name"],
        context_size=row["context_size"],
        threads=row["threads"],
        speculative=bool(row["speculative"]),
        settings=tuple(json.loads(row["engine_settings"]).items()),  # sorted by key
    )


def model_from_row(row: Row) -> ModelInfo | None:
    if row["model_file_name"] is None:
        return None
    values = {name: row[f"model_{name}"] for name in ModelInfo.__dataclass_fields__}
    values["quant_types"] = tuple(json.loads(row["model_quant_types"]))
    return ModelInfo(**values)


def hardware_from_row(row: Row) -> HardwareInfo | None:
    if row["hardware_name"] is None:
        return None
    return HardwareInfo(
        name=row["hardware_name"],
        kind=row["hardware_kind"],
        driver=row["hardware_driver"],
        memory_bytes=row["hardware_memory_bytes"],
        spec_bandwidth=_bandwidth(row, "spec_bandwidth"),
        measured_bandwidth=_bandwidth(row, "measured_bandwidth"),
        peak_flops=row["hardware_peak_flops"],
        detail=row["hardware_detail"] or "",
    )


_SUMMARY_COLUMNS = {"median": "median", "mean": "mean", "stdev": "stdev", "min": "minimum",
                    "max": "maximum", "n": "n"}
_RESULT_SCALARS = ("inter_token_p50_s", "inter_token_p90_s", "inter_token_p99_s",
                   "decode_agreement", "ttft_minus_engine_prefill_s")
_FOOTPRINT_SCALARS = (
    "architecture", "weights_bytes", "kv_bytes_per_position", "depth_tokens", "kv_type",
    "resident_bytes", "active_parameters", "total_parameters", "expert_count", "experts_used",
    "tied_output",
)


def result_row(result: BenchResult, ceiling: Ceiling | None, efficiency: float | None,
               verdict: Verdict) -> Row:
    """The ``results`` columns a ``BenchResult`` and its ceiling fill (no ids or keys)."""
    row: Row = {**asdict(result.workload)}
    for figure in (*SUMMARY_FIGURES, *SUMMARY_FIGURES_V6):
        summary: Summary | None = getattr(result, figure)
        for column, field in _SUMMARY_COLUMNS.items():
            row[f"{figure}_{column}"] = getattr(summary, field) if summary else None
    for name in _RESULT_SCALARS:
        row[name] = getattr(result, name)
    fp = ceiling.footprint if ceiling else None
    row.update(
        ceiling_decode_tokens_per_s=ceiling.decode_tokens_per_s if ceiling else None,
        ceiling_prefill_tokens_per_s=ceiling.prefill_tokens_per_s if ceiling else None,
        **_bandwidth_cols("ceiling_bandwidth", ceiling.bandwidth if ceiling else None),
        bytes_per_token=fp.total_bytes if fp else None,
        **{f"footprint_{name}": getattr(fp, name) if fp else None for name in _FOOTPRINT_SCALARS},
        footprint_warnings=dumps(list(fp.warnings)) if fp else None,
        efficiency=efficiency,
        verdict=verdict,
        notes=dumps(list(result.notes)),
        machine_load=machine_load_json(result),
    )
    return row


def machine_load_json(result: BenchResult) -> str | None:
    """The ``machine_load`` column: the result's window and each repetition's reading
    (None where a repetition was not sampled); None when nothing was sampled."""
    if result.load is None and not any(s.load for s in result.samples):
        return None
    return dumps({"result": asdict(result.load) if result.load else None,
                  "samples": [asdict(s.load) if s.load else None for s in result.samples]})


def machine_loads_from_json(text: str | None) -> tuple[MachineLoad | None,
                                                       list[MachineLoad | None]]:
    """``machine_load_json`` read back: (the result's, the repetitions'); unreadable or
    absent text reads as nothing sampled."""
    if not text:
        return None, []
    try:
        data = json.loads(text)
        fields = set(MachineLoad.__dataclass_fields__)

        def one(value: Any) -> MachineLoad | None:
            if not isinstance(value, dict):
                return None
            return MachineLoad(**{k: v for k, v in value.items() if k in fields})

        return one(data.get("result")), [one(v) for v in data.get("samples", [])]
    except (ValueError, TypeError, AttributeError):
        return None, []


def _summary(row: Row, figure: str) -> Summary | None:
    if row.get(f"{figure}_median") is None:  # absent from exports made before its column
        return None
    return Summary(**{field: row[f"{figure}_{col}"] for col, field in _SUMMARY_COLUMNS.items()})


def ceiling_from_row(row: Row) -> Ceiling | None:
    bandwidth = _bandwidth(row, "ceiling_bandwidth")
    if bandwidth is None or row["ceiling_decode_tokens_per_s"] is None:
        return None
    values = {name: row[f"footprint_{name}"] for name in _FOOTPRINT_SCALARS}
    values["tied_output"] = bool(values["tied_output"])
    footprint = Footprint(**values, warnings=tuple(json.loads(row["footprint_warnings"])))
    return Ceiling(
        bandwidth=bandwidth,
        footprint=footprint,
        decode_tokens_per_s=row["ceiling_decode_tokens_per_s"],
        prefill_tokens_per_s=row["ceiling_prefill_tokens_per_s"],
    )


SAMPLE_NOT_STORED = ("decode_wait_s", "decode_wait_share", "ttft_wait_s")
"""Sample fields with no column yet: the engine's wait for a CPU, which the same-run A/B
judges while both servers run (and its JSON keeps)."""


def sample_rows(samples: tuple[Sample, ...]) -> list[Row]:
    """``samples`` rows without their ``result_id``."""
    rows = []
    for index, sample in enumerate(samples):
        row = asdict(sample)
        row.pop("load")  # in the result's machine_load column
        for name in SAMPLE_NOT_STORED:
            row.pop(name, None)
        row["inter_token_s"] = dumps(list(sample.inter_token_s))
        rows.append({"repetition": index, **row})
    return rows


def sample_from_row(row: Row) -> Sample:
    # Columns added by later schema steps are absent from older exports.
    values = {name: row[name] for name in Sample.__dataclass_fields__
              if name in row and name != "load"}
    values["inter_token_s"] = tuple(json.loads(row["inter_token_s"]))
    values["speculative"] = bool(row["speculative"])
    return Sample(**values)


def _workload_from_row(row: Row) -> Workload:
    values = {name: row[name] for name in Workload.__dataclass_fields__ if row.get(name) is not None}
    values["chat"] = bool(values.get("chat", False))  # SQLite stores it as 0/1
    return Workload(**values)


def bench_result_from_rows(result: Row, environment: Row, samples: list[Row]) -> BenchResult:
    load, loads = machine_loads_from_json(result.get("machine_load"))
    read = [sample_from_row(r) for r in samples]
    if len(loads) == len(read):
        read = [replace(s, load=x) for s, x in zip(read, loads, strict=True)]
    return BenchResult(
        workload=_workload_from_row(result),
        engine=engine_from_row(environment),
        samples=tuple(read),
        ttft_s=_summary(result, "ttft_s"),  # None: not measured (an imported llama-bench row)
        decode_tokens_per_s=_summary(result, "decode_tokens_per_s"),
        prefill_tokens_per_s=_summary(result, "prefill_tokens_per_s"),
        engine_decode_tokens_per_s=_summary(result, "engine_decode_tokens_per_s"),
        engine_prefill_tokens_per_s=_summary(result, "engine_prefill_tokens_per_s"),
        **{name: result[name] for name in _RESULT_SCALARS},
        notes=tuple(json.loads(result["notes"])),
        aggregate_tokens_per_s=_summary(result, "aggregate_tokens_per_s"),
        load=load,
    )
