"""``tokperf bench -o md|csv|json|jsonl|sql``: results in llama-bench's forms.

Each measured test (``bench.grid_run.BenchRow``) has the fields llama-bench of the measured
release writes (``builds.llama_bench``), in its order, typed as its printers type them,
then tokperf's own (ceiling, efficiency, marks, the series and run). ``md`` is llama-bench's
markdown table (``t/s`` as ``avg ± stddev``, a ``build:`` line under it) with the ceiling,
efficiency and marks beside it; ``sql`` is llama-bench's own ``CREATE TABLE IF NOT EXISTS
llama_bench`` (so either's rows go into one file, as ``scripts/compare-llama-bench.py``
reads it) and ``tokperf_bench`` for tokperf's fields, each row's ``llama_bench_rowid``
naming its llama-bench row.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pytest_tokperf.bench.grid import FLASH_ATTN_NUMBER
from pytest_tokperf.bench.grid_run import BenchRow
from pytest_tokperf.builds.llama_bench import FieldType, build_of, release_fields
from pytest_tokperf.jsontext import dumps
from pytest_tokperf.report.tables import UNSTABLE_SPREAD, unstable
from pytest_tokperf.report.tables import Table, csv_text, markdown, sql_literal, sql_text, text
from pytest_tokperf.results import Summary, judged_decode_values

if TYPE_CHECKING:
    from pytest_tokperf.bench.run import BenchRun
    from pytest_tokperf.expected.llama_bench_import import ImportedRow
    from pytest_tokperf.expected.outliers import Outlier
    from pytest_tokperf.results import ModelInfo
    from pytest_tokperf.storage.exchange import Added

OutputForm = Literal["md", "csv", "json", "jsonl", "sql"]
FORMS: tuple[OutputForm, ...] = ("md", "csv", "json", "jsonl", "sql")

TOKPERF_FIELDS: dict[str, FieldType] = {
    "test": "TEXT", "test_id": "TEXT", "series_key": "TEXT", "run_id": "TEXT",
    "result_id": "INTEGER", "created_at": "TEXT", "engine": "TEXT", "engine_build": "TEXT",
    "concurrency": "INTEGER", "cached_prefix_tokens": "INTEGER", "chat": "BOOL",
    "draft_model": "TEXT", "prompt_tokens": "INTEGER", "generate_tokens": "INTEGER",
    "repetitions": "INTEGER", "ttft_s": "REAL", "prefill_tokens_per_s": "REAL",
    "decode_tokens_per_s": "REAL", "decode_tokens_per_s_stdev": "REAL",
    "decode_source": "TEXT", "ceiling_decode_tokens_per_s": "REAL", "efficiency": "REAL",
    "bandwidth_bytes_per_s": "REAL", "bandwidth_source": "TEXT", "verdict": "TEXT",
    "busy": "BOOL", "unstable": "BOOL", "notes": "TEXT",
}
"""tokperf's own fields after llama-bench's: what was sent (``prompt_tokens``,
``generate_tokens``: a pp test streams 2 tokens, a tg test sends 1 prompt token), the
medians ``--json`` prints, the decode ceiling and efficiency (tg tests only: a pp or pg
t/s is no decode), where it is stored, and the summary's marks (``marks``)."""

_BACKENDS = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm", "metal": "Metal",
             "vulkan": "Vulkan", "sycl": "SYCL", "opencl": "OpenCL", "cann": "CANN",
             "musa": "MUSA", "rpc": "RPC"}


def samples(row: BenchRow) -> tuple[list[int], list[float]]:
    """``samples_ns``/``samples_ts``: per repetition (and stream), the time of the
    test's phase and its tokens per second: the prefill for pp (the engine's own timing
    when every repetition has it), the judged decode for tg (``n_gen / ts``), the whole
    request for pg (n_prompt + n_gen over TTFT + the decode span)."""
    measured = row.recorded.result.samples
    ns: list[int] = []
    ts: list[float] = []
    if row.test.kind == "pp":
        engine = bool(measured) and all(s.engine_prefill_s and s.engine_prefill_tokens_per_s
                                        for s in measured)
        for s in measured:
            rate = s.engine_prefill_tokens_per_s if engine else s.prefill_tokens_per_s
            time_s = s.engine_prefill_s if engine else s.ttft_s
            if rate and time_s:
                ns.append(round(time_s * 1e9))
                ts.append(rate)
    elif row.test.kind == "tg":
        ts = [v for v in judged_decode_values(measured) if v > 0]
        ns = [round(row.test.n_gen / v * 1e9) for v in ts]
    else:
        for s in measured:
            time_s = (s.ttft_s or 0.0) + sum(s.inter_token_s)
            if s.ttft_s is not None and time_s > 0:
                ns.append(round(time_s * 1e9))
                ts.append(row.test.tokens / time_s)
    return ns, ts


def fields(row: BenchRow) -> dict[str, Any]:
    """llama-bench's fields, then ``samples_ns``/``samples_ts``, then tokperf's."""
    return {**llama_bench_fields(row), **dict(zip(("samples_ns", "samples_ts"),
                                                    samples(row), strict=True)),
            **tokperf_fields(row)}


def release_of(row: BenchRow) -> Mapping[str, FieldType]:
    """The fields llama-bench of the row's release writes (``builds.llama_bench``)."""
    engine = row.recorded.result.engine
    return release_fields(build_of(engine.build, engine.version)[1], row.binary)[0]


def llama_bench_fields(row: BenchRow) -> dict[str, Any]:
    """The release's fields (``release_of``) typed as it types them; one tokperf does not
    know is null, but an attached server's threads are 0 (compare-llama-bench joins on
    them). What tokperf cannot set (CPU mask, poll, load mode, ...) is llama-server's
    default, as it ran."""
    known = _llama_bench_values(row)
    return {name: _typed(known.get(name), kind) for name, kind in release_of(row).items()}


def _typed(value: Any, kind: FieldType) -> Any:
    if value is None or kind == "TEXT":
        return value if value is None else str(value)
    if kind == "BOOL":
        return value is True or value == 1  # flash_attn -1 (auto) was no boolean
    return float(value) if kind == "REAL" else int(value)


def _llama_bench_values(row: BenchRow) -> dict[str, Any]:
    from pytest_tokperf.engines.speed_settings import ServerSettings

    result = row.recorded.result
    server = ServerSettings.from_engine(result.engine)
    ns, ts = samples(row)
    commit, number = build_of(result.engine.build, result.engine.version)
    fa = FLASH_ATTN_NUMBER.get(server.flash_attn or "auto", -1)
    model = row.model
    return {
        "build_commit": commit, "build_number": number, "cpu_info": row.cpu_info,
        "gpu_info": row.gpu_info,
        "backends": _BACKENDS.get(server.backend or "", server.backend or "CPU"),
        "model_filename": (model.path if model and model.path else
                           result.engine.model_path or result.engine.model_name or ""),
        "model_type": model_type(model), "model_size": row.model_bytes,
        "model_n_params": model.parameter_count if model else None,
        "n_batch": server.batch_size or 2048, "n_ubatch": server.ubatch_size or 512,
        "n_threads": server.threads or result.engine.threads or 0, "cpu_mask": "0x0",
        "cpu_strict": False, "poll": 50, "type_k": server.cache_type_k or "f16",
        "type_v": server.cache_type_v or "f16", "n_gpu_layers": _gpu_layers(server.gpu_layers),
        "n_cpu_moe": 0, "split_mode": server.split_mode or "layer",
        "main_gpu": server.main_gpu or 0, "no_kv_offload": False, "flash_attn": fa,
        "devices": server.device_arg or "auto", "tensor_split": server.tensor_split or "0.00",
        "tensor_buft_overrides": "none", "use_mmap": True, "use_direct_io": False,
        "load_mode": "auto", "lazy_mode": "auto",
        "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True,
        "fit_target": 0, "fit_min_ctx": 0, "n_prompt": row.test.n_prompt,
        "n_gen": row.test.n_gen, "n_depth": row.test.n_depth, "test_time": row.test_time,
        "avg_ns": round(statistics.fmean(ns)) if ns else None,
        "stddev_ns": round(statistics.stdev(ns)) if len(ns) > 1 else 0 if ns else None,
        "avg_ts": statistics.fmean(ts) if ts else None,
        "stddev_ts": statistics.stdev(ts) if len(ts) > 1 else 0.0 if ts else None,
    }


def tokperf_fields(row: BenchRow) -> dict[str, Any]:
    from pytest_tokperf.report.report_data import figures_from_result

    r = row.recorded
    fig = figures_from_result(r.test_id, r.result, ceiling=r.ceiling, verdict=r.verdict,
                              series_key=row.series_key, model=row.model,
                              run_id=row.run_id, created_at=row.created_at)
    decoded = row.test.kind != "pp"  # a pp test's 2 tokens are no decode figure
    judged = row.test.kind == "tg"  # a pg t/s counts its prompt: no decode ceiling
    bandwidth = r.ceiling.bandwidth if r.ceiling is not None and judged else None
    w = r.result.workload
    return {
        "test": row.test.name, "test_id": r.test_id, "series_key": row.series_key,
        "run_id": row.run_id, "result_id": r.result_id, "created_at": row.created_at,
        "engine": r.result.engine.name, "engine_build": r.result.engine.build,
        "concurrency": w.concurrency, "cached_prefix_tokens": w.cached_prefix_tokens,
        "chat": w.chat, "draft_model": fig.draft_model, "prompt_tokens": w.prompt_tokens,
        "generate_tokens": w.generate_tokens, "repetitions": fig.repetitions,
        "ttft_s": fig.ttft_s, "prefill_tokens_per_s": fig.prefill_tokens_per_s,
        "decode_tokens_per_s": fig.decode_tokens_per_s if decoded else None,
        "decode_tokens_per_s_stdev": fig.decode_tokens_per_s_stdev if decoded else None,
        "decode_source": fig.decode_source if decoded else None,
        "ceiling_decode_tokens_per_s": fig.ceiling_decode_tokens_per_s if judged else None,
        "efficiency": fig.efficiency if judged else None,
        "bandwidth_bytes_per_s": bandwidth.bytes_per_s if bandwidth else None,
        "bandwidth_source": bandwidth.source if bandwidth else None,
        "verdict": r.verdict, **dict.fromkeys(MARKS, False), **dict.fromkeys(marks(row), True),
        "notes": "; ".join(r.result.notes) or None,
    }


MARKS = ("busy", "unstable")
MARKS_NOTE = (f"busy: other processes kept the machine busy while it was measured (its notes "
              f"say how much): the figure may be theirs; unstable: its repetitions spread "
              f"by more than {UNSTABLE_SPREAD:.0%} of the median, or too widely to pass")


def marks(row: BenchRow) -> tuple[str, ...]:
    """The default summary's marks on the row: ``busy`` (a busy machine, as its verdict's
    ``(busy)``) and ``unstable`` (its t/s flagged ``!`` there, or its verdict)."""
    r = row.recorded
    load = r.result.load
    busy = r.verdict == "busy" or (load is not None and load.loaded)
    marked = r.verdict == "unstable" or unstable(Summary.of(samples(row)[1]))
    return tuple(m for m, on in zip(MARKS, (busy, marked), strict=True) if on)


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
              "flash_attn": 3, "test": 15, "backend": -10, "draft_model": -10, "note": -14}
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
    """llama-bench's markdown table (then the ceiling, efficiency and the rows' marks) and
    its build line (then what the marks mean)."""
    data = [{**_llama_bench_values(row), **tokperf_fields(row), "note": ", ".join(marks(row))}
            for row in rows]
    cpu_only = all(d["backends"] == "CPU" for d in data)

    def show(name: str) -> bool:
        values = {d[name] for d in data}
        if name in asked or len(values) > 1 or (
                name in _MD_DEFAULTS and values != {_MD_DEFAULTS[name]}):
            return True
        return {"n_gpu_layers": not cpu_only, "n_threads": cpu_only}.get(name, False)

    shown = ["model", "size", "params", "backend", *filter(show, MD_OPTIONAL),
             "test", "t/s", "ceiling t/s", "eff", *(["note"] if any(d["note"] for d in data)
                                                    else [])]
    widths = [_MD_WIDTHS.get(name, max(len(_MD_NAMES.get(name, name)), 10)) for name in shown]
    table = Table.of([_MD_NAMES.get(n, n) for n in shown],
                     [[_md_cell(name, d) for name in shown] for d in data],
                     numeric=[i for i, w in enumerate(widths) if w > 0],
                     widths=[abs(w) for w in widths])
    lines = markdown(table, padded=True)
    if data:
        lines += ["", f"build: {data[0]['build_commit']} ({data[0]['build_number'] or 0})"]
    return lines + (["", MARKS_NOTE] if "note" in shown else [])


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
    return "-" if d[name] in (None, "") else str(d[name])


SQL_TABLE = "llama_bench"
TOKPERF_TABLE = "tokperf_bench"


def render(form: OutputForm, rows: Sequence[BenchRow],
           asked: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The lines of ``-o form``: llama-bench's fields, then tokperf's; CSV and SQL without
    the per-repetition samples, CSV quoted throughout and booleans 0/1 as llama-bench's."""
    if form == "md":
        return md_table(rows, asked)
    records = [fields(row) for row in rows]
    if form == "json":
        return dumps(records).splitlines()
    if form == "jsonl":
        return [dumps(r, indent=None) for r in records]
    release = release_of(rows[0]) if rows else release_fields(None)[0]
    if form == "csv":
        return csv_text([*release, *TOKPERF_FIELDS], records, quote_all=True,
                        line_end="\n").splitlines()
    return sql_lines(release, records)


def sql_lines(release: Mapping[str, FieldType], records: Sequence[Mapping[str, Any]]
              ) -> list[str]:
    """llama-bench's table as its release creates it, tokperf's beside it; per row an
    ``INSERT`` into each, tokperf's naming the llama-bench row it belongs to."""
    own, sql = {"llama_bench_rowid": "INTEGER", **TOKPERF_FIELDS}, {"BOOL": "INTEGER"}
    lines = [*sql_text(SQL_TABLE, {n: sql.get(t, t) for n, t in release.items()}, []),
             *sql_text(TOKPERF_TABLE, {n: sql.get(t, t) for n, t in own.items()}, [])]
    for record in records:
        values = ", ".join(sql_literal(record.get(n)) for n in release)
        lines.append(f"INSERT INTO {SQL_TABLE} ({', '.join(release)}) VALUES ({values});")
        values = ", ".join(sql_literal(record.get(n)) for n in TOKPERF_FIELDS)
        lines.append(f"INSERT INTO {TOKPERF_TABLE} ({', '.join(own)}) VALUES "
                     f"(last_insert_rowid(), {values});")
    return lines


def bench_json(run: BenchRun, rows: Sequence[BenchRow], failed: Sequence[str]) -> str:
    """``tokperf bench --json``: every result as the session report writes it, with its
    test, the failures, the gate's verdicts and where the results went."""
    from pytest_tokperf.bench.gate import describe
    from pytest_tokperf.report.formats import result_json
    from pytest_tokperf.report.report_data import figures_from_result

    results = []
    for row in rows:
        r = row.recorded
        fig = figures_from_result(r.test_id, r.result, ceiling=r.ceiling, verdict=r.verdict,
                                  series_key=row.series_key, model=row.model,
                                  hardware=run.ceilings.hardware, run_id=row.run_id,
                                  created_at=row.created_at)
        results.append({**result_json(fig), "test": row.test.name, "result_id": r.result_id,
                        "notes": list(r.result.notes)})
    location = run.recorder.location
    return dumps({"results": results, "failures": list(failed),
                  "gate": [describe(f) for f in run.findings], "gate_summary": run.gate_summary,
                  "db": str(location) if location else None})


def bench_aside(run: BenchRun, option: str) -> list[str]:
    """What ``tokperf bench`` says after its table: the gate's verdicts, where the
    results are stored (``option`` turns storing off)."""
    from pytest_tokperf.bench.gate import describe

    gated = [f for f in run.findings if f.comparison.n_baseline > 0]
    lines = [f"gate against {run.settings.baseline.label}: {run.gate_summary}"] if gated else []
    lines += [f"  {describe(finding)}" for finding in gated]
    location = run.recorder.location
    lines.append(f"results: {len(run.recorded)} stored in {location}" if location
                 else f"results: not stored ({option})")
    return lines


def imported_json(db: object, added: Added, rows: Sequence[ImportedRow]) -> dict[str, Any]:
    """``tokperf import-llama-bench --json``: what was added, and each row as judged."""
    return {
        "db": str(db), "runs_added": added.runs, "results_added": added.results,
        "samples_added": added.samples,
        "rows": [{
            "source": r.record.source, "form": r.record.form, "test_id": r.test_id,
            "series_key": r.series_key, "hardware": r.hardware.name if r.hardware else None,
            "metric": r.metric, "tokens_per_s": r.record.get("avg_ts"),
            "ceiling_tokens_per_s": (r.ceiling.decode_tokens_per_s
                                     if r.ceiling and r.metric == "decode" else None),
            "efficiency": r.efficiency,
            "band": None if r.band is None or r.metric != "decode" else {
                "low": r.band.low, "typical": r.band.typical, "high": r.band.high},
            "verdict": r.verdict,
        } for r in rows],
    }


def imported_lines(db: object, added: Added, rows: Sequence[ImportedRow]) -> list[str]:
    """What was added, then a row per imported test with its ceiling, efficiency, band."""
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    body = [(r.record.test_name, r.hardware.name if r.hardware else "-",
             f"{r.record.get('avg_ts'):.2f}",
             f"{r.ceiling.decode_tokens_per_s:.1f}" if r.ceiling and r.efficiency else "-",
             pct(r.efficiency),
             f"{r.band.low:.0%}-{r.band.high:.0%}" if r.band and r.efficiency else "-",
             r.verdict, r.series_key) for r in rows]
    return [f"{db}: added {added.runs} run(s), {added.results} result(s), {added.samples} "
            f"sample(s) from {len(rows)} llama-bench row(s)",
            *text(Table.of(("test", "device", "t/s", "ceiling", "eff", "band", "verdict",
                            "series"), body))]


def outliers_json(found: Sequence[Outlier]) -> list[dict[str, Any]]:
    return [{
        "kind": o.kind, "result_id": o.result_id, "test_id": o.test_id,
        "hardware": o.hardware, "build": o.build, "tokens_per_s": o.tokens_per_s,
        "efficiency": o.efficiency, "should_reach_tokens_per_s": o.should_reach_tokens_per_s,
        "typical_tokens_per_s": o.typical_tokens_per_s,
        "earlier_best_tokens_per_s": o.earlier_best_tokens_per_s,
        "band": None if o.band is None else {"low": o.band.low, "typical": o.band.typical,
                                              "high": o.band.high},
        "reasons": list(o.reasons), "source": o.source,
    } for o in found]


def outliers_lines(db: object, found: Sequence[Outlier]) -> list[str]:
    """Each result under its band (what it should reach and why not), each build that fell."""
    lines = [f"{len(found)} outlier(s) in {db}" if found
             else f"no outliers in {db}: every judged result is inside its band"]
    for o in found:
        target = (f"should reach >= {o.should_reach_tokens_per_s:.1f} tok/s"
                  + (f" (typical {o.typical_tokens_per_s:.1f})" if o.typical_tokens_per_s
                     else ""))
        lines.append(f"- {o.test_id}  {o.build}: {o.tokens_per_s:.2f} tok/s = "
                     f"{o.efficiency:.0%} of the ceiling; {target}")
        lines.extend(f"    why: {reason}" for reason in o.reasons)
        if o.source:
            lines.append(f"    source: {o.source}")
    return lines
