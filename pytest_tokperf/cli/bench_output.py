"""``tokperf bench -o md|csv|json|jsonl|sql``: results in llama-bench's forms.

Each measured test is a ``BenchRow``: llama-bench's fields under its names (what
``llama-bench -o json`` writes, in its order, typed as its printers type them), then
tokperf's own (ceiling, efficiency, TTFT, the series and run). ``md`` is llama-bench's
markdown table (``t/s`` as ``avg ± stddev``, a ``build:`` line under it) with the ceiling
and efficiency beside it; ``sql`` is its ``CREATE TABLE IF NOT EXISTS llama_bench`` and one
``INSERT`` per row, the table ``scripts/compare-llama-bench.py`` reads.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pytest_tokperf.cli.bench_grid import FLASH_ATTN_NUMBER, BenchTest
from pytest_tokperf.jsontext import dumps, finite
from pytest_tokperf.results import judged_decode_values

if TYPE_CHECKING:
    from pytest_tokperf.bench.run import Recorded
    from pytest_tokperf.results import BenchResult, ModelInfo

OutputForm = Literal["md", "csv", "json", "jsonl", "sql"]
FORMS: tuple[OutputForm, ...] = ("md", "csv", "json", "jsonl", "sql")

FieldType = Literal["TEXT", "INTEGER", "REAL", "BOOL"]

LLAMA_BENCH_FIELDS: dict[str, FieldType] = {
    "build_commit": "TEXT", "build_number": "INTEGER", "cpu_info": "TEXT",
    "gpu_info": "TEXT", "backends": "TEXT", "model_filename": "TEXT", "model_type": "TEXT",
    "model_size": "INTEGER", "model_n_params": "INTEGER", "n_batch": "INTEGER",
    "n_ubatch": "INTEGER", "n_threads": "INTEGER", "cpu_mask": "TEXT", "cpu_strict": "BOOL",
    "poll": "INTEGER", "type_k": "TEXT", "type_v": "TEXT", "n_gpu_layers": "INTEGER",
    "n_cpu_moe": "INTEGER", "split_mode": "TEXT", "main_gpu": "INTEGER",
    "no_kv_offload": "BOOL", "flash_attn": "INTEGER", "devices": "TEXT",
    "tensor_split": "TEXT", "tensor_buft_overrides": "TEXT", "use_mmap": "BOOL",
    "use_direct_io": "BOOL", "embeddings": "BOOL", "no_op_offload": "INTEGER",
    "no_host": "BOOL", "repack": "BOOL", "fit_target": "INTEGER", "fit_min_ctx": "INTEGER",
    "n_prompt": "INTEGER", "n_gen": "INTEGER", "n_depth": "INTEGER", "test_time": "TEXT",
    "avg_ns": "INTEGER", "stddev_ns": "INTEGER", "avg_ts": "REAL", "stddev_ts": "REAL",
}
"""llama-bench's fields and types (tools/llama-bench/README.md's CSV header; the ones
compare-llama-bench.py joins on are all here). What tokperf cannot set (CPU mask, poll,
split mode, ...) is llama-server's default, as it ran."""

TOKPERF_FIELDS: dict[str, FieldType] = {
    "test": "TEXT", "test_id": "TEXT", "series_key": "TEXT", "run_id": "TEXT",
    "result_id": "INTEGER", "created_at": "TEXT", "engine": "TEXT", "engine_build": "TEXT",
    "concurrency": "INTEGER", "cached_prefix_tokens": "INTEGER", "chat": "BOOL",
    "draft_model": "TEXT", "prompt_tokens": "INTEGER", "generate_tokens": "INTEGER",
    "repetitions": "INTEGER", "ttft_s": "REAL", "prefill_tokens_per_s": "REAL",
    "decode_tokens_per_s": "REAL", "decode_tokens_per_s_stdev": "REAL",
    "decode_source": "TEXT", "ceiling_decode_tokens_per_s": "REAL", "efficiency": "REAL",
    "bandwidth_bytes_per_s": "REAL", "bandwidth_source": "TEXT", "verdict": "TEXT",
    "notes": "TEXT",
}
"""tokperf's own fields after llama-bench's: what was sent (``prompt_tokens``,
``generate_tokens``: a pp test streams 2 tokens, a tg test sends 1 prompt token), the
medians ``--json`` prints, the decode ceiling and efficiency (null for pp tests, whose t/s
is the prefill's), where it is stored."""

_BACKENDS = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm", "metal": "Metal",
             "vulkan": "Vulkan", "sycl": "SYCL", "opencl": "OpenCL", "cann": "CANN",
             "musa": "MUSA", "rpc": "RPC"}


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One test's result with what llama-bench reports beside it."""

    test: BenchTest
    recorded: Recorded
    test_time: str
    """RFC 3339 UTC second the test started, as llama-bench's ``test_time``."""
    created_at: str
    """When the result was recorded (ISO 8601 UTC)."""
    run_id: str | None
    series_key: str | None
    model: ModelInfo | None
    model_bytes: int | None
    """Bytes of the model's tensors (llama-bench's ``model_size``)."""
    cpu_info: str
    gpu_info: str

    @property
    def samples(self) -> tuple[list[int], list[float]]:
        """``samples_ns``/``samples_ts``: per repetition (and stream), the time of the
        test's phase and its tokens per second: the prefill for pp (the engine's own timing
        when every repetition has it), the judged decode for tg (``n_gen / ts``), the whole
        request for pg (n_prompt + n_gen over TTFT + the decode span)."""
        samples = self.recorded.result.samples
        ns: list[int] = []
        ts: list[float] = []
        if self.test.kind == "pp":
            engine = bool(samples) and all(s.engine_prefill_s and s.engine_prefill_tokens_per_s
                                           for s in samples)
            for s in samples:
                rate = s.engine_prefill_tokens_per_s if engine else s.prefill_tokens_per_s
                time_s = s.engine_prefill_s if engine else s.ttft_s
                if rate and time_s:
                    ns.append(round(time_s * 1e9))
                    ts.append(rate)
        elif self.test.kind == "tg":
            ts = [v for v in judged_decode_values(samples) if v > 0]
            ns = [round(self.test.n_gen / v * 1e9) for v in ts]
        else:
            for s in samples:
                time_s = (s.ttft_s or 0.0) + sum(s.inter_token_s)
                if s.ttft_s is not None and time_s > 0:
                    ns.append(round(time_s * 1e9))
                    ts.append(self.test.tokens / time_s)
        return ns, ts

    def fields(self) -> dict[str, Any]:
        """llama-bench's fields, then ``samples_ns``/``samples_ts``, then tokperf's."""
        return {**self.llama_bench_fields(), **dict(zip(("samples_ns", "samples_ts"),
                                                        self.samples, strict=True)),
                **self.tokperf_fields()}

    def llama_bench_fields(self) -> dict[str, Any]:
        from pytest_tokperf.engines.speed_settings import ServerSettings

        result = self.recorded.result
        server = ServerSettings.from_engine(result.engine)
        ns, ts = self.samples
        commit, number = build_of(result)
        fa = FLASH_ATTN_NUMBER.get(server.flash_attn or "auto", -1)
        model = self.model
        return {
            "build_commit": commit, "build_number": number, "cpu_info": self.cpu_info,
            "gpu_info": self.gpu_info,
            "backends": _BACKENDS.get(server.backend or "", server.backend or "CPU"),
            "model_filename": (model.path if model and model.path else
                               result.engine.model_path or result.engine.model_name or ""),
            "model_type": model_type(model), "model_size": self.model_bytes,
            "model_n_params": model.parameter_count if model else None,
            "n_batch": server.batch_size or 2048, "n_ubatch": server.ubatch_size or 512,
            "n_threads": server.threads or result.engine.threads, "cpu_mask": "0x0",
            "cpu_strict": False, "poll": 50, "type_k": server.cache_type_k or "f16",
            "type_v": server.cache_type_v or "f16", "n_gpu_layers": _gpu_layers(server.gpu_layers),
            "n_cpu_moe": 0, "split_mode": server.split_mode or "layer",
            "main_gpu": server.main_gpu or 0, "no_kv_offload": False, "flash_attn": fa,
            "devices": server.device_arg or "auto", "tensor_split": server.tensor_split or "0.00",
            "tensor_buft_overrides": "none", "use_mmap": True, "use_direct_io": False,
            "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True,
            "fit_target": 0, "fit_min_ctx": 0, "n_prompt": self.test.n_prompt,
            "n_gen": self.test.n_gen, "n_depth": self.test.n_depth, "test_time": self.test_time,
            "avg_ns": round(statistics.fmean(ns)) if ns else None,
            "stddev_ns": round(statistics.stdev(ns)) if len(ns) > 1 else 0 if ns else None,
            "avg_ts": statistics.fmean(ts) if ts else None,
            "stddev_ts": statistics.stdev(ts) if len(ts) > 1 else 0.0 if ts else None,
        }

    def tokperf_fields(self) -> dict[str, Any]:
        from pytest_tokperf.report.report_data import figures_from_result

        r = self.recorded
        fig = figures_from_result(r.test_id, r.result, ceiling=r.ceiling, verdict=r.verdict,
                                  series_key=self.series_key, model=self.model,
                                  run_id=self.run_id, created_at=self.created_at)
        decoded = self.test.kind != "pp"  # a pp test's 2 tokens are no decode figure
        bandwidth = r.ceiling.bandwidth if r.ceiling is not None else None
        w = r.result.workload
        return {
            "test": self.test.name, "test_id": r.test_id, "series_key": self.series_key,
            "run_id": self.run_id, "result_id": r.result_id, "created_at": self.created_at,
            "engine": r.result.engine.name, "engine_build": r.result.engine.build,
            "concurrency": w.concurrency, "cached_prefix_tokens": w.cached_prefix_tokens,
            "chat": w.chat, "draft_model": fig.draft_model, "prompt_tokens": w.prompt_tokens,
            "generate_tokens": w.generate_tokens, "repetitions": fig.repetitions,
            "ttft_s": fig.ttft_s, "prefill_tokens_per_s": fig.prefill_tokens_per_s,
            "decode_tokens_per_s": fig.decode_tokens_per_s if decoded else None,
            "decode_tokens_per_s_stdev": fig.decode_tokens_per_s_stdev if decoded else None,
            "decode_source": fig.decode_source if decoded else None,
            "ceiling_decode_tokens_per_s": fig.ceiling_decode_tokens_per_s if decoded else None,
            "efficiency": fig.efficiency if decoded else None,
            "bandwidth_bytes_per_s": bandwidth.bytes_per_s if bandwidth and decoded else None,
            "bandwidth_source": bandwidth.source if bandwidth and decoded else None,
            "verdict": r.verdict, "notes": "; ".join(r.result.notes) or None,
        }


def build_of(result: BenchResult) -> tuple[str, int | None]:
    """llama-bench's ``build_commit`` and ``build_number`` from llama-server's build
    (``b11434-74f58e63``, its ``/props`` build_info), else from the version alone."""
    engine = result.engine
    found = re.fullmatch(r"b?(\d+)-(.+)", engine.build or "")
    if found:
        return found[2], int(found[1])
    number = re.fullmatch(r"b?(\d+)", engine.version or "")
    return (engine.build or engine.version or "unknown"), int(number[1]) if number else None


def model_type(model: ModelInfo | None) -> str:
    """Like llama-bench's model description: architecture, size, file type."""
    if model is None:
        return "?"
    count = model.parameter_count
    size = ("?B" if not count else f"{count / 1e6:.0f}M" if count < 1e9
            else f"{count / 1e9:.1f}".removesuffix(".0") + "B")
    return " ".join(p for p in (model.architecture or "?", size, model.file_type) if p)


def _gpu_layers(requested: str | None) -> int:
    """llama-bench's ``n_gpu_layers``: the count asked for; -1 for all (its default)."""
    if requested is not None and re.fullmatch(r"\d+", requested):
        return int(requested)
    return -1


# -- the printers -------------------------------------------------------------------------

_MD_NAMES = {"n_gpu_layers": "ngl", "n_threads": "threads", "flash_attn": "fa",
             "concurrency": "c", "cached_prefix_tokens": "warm", "draft_model": "draft"}
_MD_WIDTHS = {"model": -30, "t/s": 20, "size": 10, "params": 10, "n_gpu_layers": 3,
              "n_threads": 7, "n_batch": 7, "n_ubatch": 8, "type_k": 6, "type_v": 6,
              "flash_attn": 3, "test": 15, "backend": -10, "draft_model": -10}
_MD_DEFAULTS: dict[str, object] = {"n_batch": 2048, "n_ubatch": 512, "type_k": "f16",
                                   "type_v": "f16", "flash_attn": -1, "concurrency": 1,
                                   "cached_prefix_tokens": 0, "draft_model": None}
"""llama-bench's defaults (and tokperf's): a column whose value is another is shown."""
MD_OPTIONAL = ("n_gpu_layers", "n_threads", "n_batch", "n_ubatch", "type_k", "type_v",
               "flash_attn", "concurrency", "cached_prefix_tokens", "draft_model")
"""Columns shown when they were asked for, vary, or are not the default (as llama-bench
shows a parameter given other than its default; tokperf's ``c`` and ``warm`` likewise)."""


def md_table(rows: Sequence[BenchRow], asked: set[str] | frozenset[str] = frozenset()
             ) -> list[str]:
    """llama-bench's markdown table (then the ceiling and efficiency) and its build line."""
    data = [row.fields() for row in rows]
    cpu_only = all(d["backends"] == "CPU" for d in data)

    def show(name: str) -> bool:
        values = {d[name] for d in data}
        if name in asked or len(values) > 1 or (
                name in _MD_DEFAULTS and values != {_MD_DEFAULTS[name]}):
            return True
        return {"n_gpu_layers": not cpu_only, "n_threads": cpu_only}.get(name, False)

    shown = ["model", "size", "params", "backend", *filter(show, MD_OPTIONAL),
             "test", "t/s", "ceiling t/s", "eff"]
    widths = [_MD_WIDTHS.get(name, max(len(_MD_NAMES.get(name, name)), 10)) for name in shown]
    lines = ["|" + "".join(f" {_pad(_MD_NAMES.get(n, n), w)} |" for n, w in zip(shown, widths))]
    lines.append("|" + "".join(f" {'-' * (abs(w) - 1)}{':' if w > 0 else '-'} |"
                               for w in widths))
    for d in data:
        cells = [_pad(_md_cell(name, d).replace("|", "\\|"), w)  # GFM: a pipe in a cell
                 for name, w in zip(shown, widths)]
        lines.append("|" + "".join(f" {c} |" for c in cells))
    if data:
        lines += ["", f"build: {data[0]['build_commit']} ({data[0]['build_number'] or 0})"]
    return lines


def _pad(text: str, width: int) -> str:
    return text.rjust(width) if width > 0 else text.ljust(-width)


def _md_cell(name: str, d: Mapping[str, Any]) -> str:
    if name == "model":
        return str(d["model_type"])
    if name == "size":
        size = d["model_size"] or 0
        return (f"{size / 1024**2:.2f} MiB" if size < 1024**3 else f"{size / 1024**3:.2f} GiB")
    if name == "params":
        count = d["model_n_params"] or 0
        return f"{count / 1e6:.2f} M" if count < 1e9 else f"{count / 1e9:.2f} B"
    if name == "backend":
        return str(d["backends"])
    if name == "t/s":
        avg, sd = d["avg_ts"], d["stddev_ts"]
        return "-" if avg is None else f"{avg:.2f} ± {sd or 0:.2f}"
    if name == "ceiling t/s":
        ceiling = d["ceiling_decode_tokens_per_s"]
        return "-" if ceiling is None else f"{ceiling:.2f}"
    if name == "eff":
        eff = d["efficiency"]
        return "-" if eff is None else f"{eff:.0%}"
    if name == "test":
        return str(d["test"])
    return "-" if d[name] is None else str(d[name])


def _types() -> dict[str, FieldType]:
    return {**LLAMA_BENCH_FIELDS, **TOKPERF_FIELDS}


def _flat(name: str, value: Any) -> Any:
    """A value for a CSV cell or SQL column: booleans as 0/1 (llama-bench's CSV), no NaN."""
    if isinstance(value, bool):
        return int(value)
    return finite(value)


def csv_text(rows: Sequence[BenchRow]) -> list[str]:
    """llama-bench's CSV: the field names, then every value quoted; samples left out."""
    names = list(_types())
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for row in rows:
        fields = row.fields()
        writer.writerow(["" if (v := _flat(n, fields[n])) is None else v for n in names])
    return [",".join(names), *out.getvalue().splitlines()]


def json_text(rows: Sequence[BenchRow]) -> list[str]:
    """llama-bench's ``-o json``: a list of objects (strict JSON: no NaN)."""
    return dumps([row.fields() for row in rows]).splitlines()


def jsonl_text(rows: Sequence[BenchRow]) -> list[str]:
    """One object per line."""
    return [dumps(row.fields(), indent=None) for row in rows]


SQL_TABLE = "llama_bench"


def sql_text(rows: Sequence[BenchRow]) -> list[str]:
    """llama-bench's ``-o sql``: the table if it is not there, one INSERT per row."""
    types = _types()
    names = list(types)
    lines = [f"CREATE TABLE IF NOT EXISTS {SQL_TABLE} ("]
    lines += [f"  {n} {'INTEGER' if t == 'BOOL' else t}{',' if i < len(names) - 1 else ''}"
              for i, (n, t) in enumerate(types.items())]
    lines += [");", ""]
    for row in rows:
        fields = row.fields()
        values = ", ".join(_sql_literal(_flat(n, fields[n])) for n in names)
        lines.append(f"INSERT INTO {SQL_TABLE} ({', '.join(names)}) VALUES ({values});")
    return lines


def _sql_literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else "NULL"
    return "'" + str(value).replace("'", "''") + "'"


def render(form: OutputForm, rows: Sequence[BenchRow],
           asked: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The lines of ``-o form``."""
    if form == "md":
        return md_table(rows, asked)
    return {"csv": csv_text, "json": json_text, "jsonl": jsonl_text, "sql": sql_text}[form](rows)
