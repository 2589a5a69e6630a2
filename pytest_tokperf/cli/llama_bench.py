"""``tokperf import-llama-bench`` and ``tokperf outliers``: llama-bench's own output as data.

``add_parsers(verbs)`` adds both verbs to the ``tokperf`` parser; each sets its handler
with ``set_defaults(func=...)``. A file that is no tokperf DB (an empty one included) is
refused by both and left as it is; ``outliers`` only reads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_tokperf.cli.common import DB_HELP, chosen_db, db_location
from pytest_tokperf.cli.output import emit, table

if TYPE_CHECKING:
    from pytest_tokperf.storage.location import DbLocation
    from pytest_tokperf.storage.store import ResultStore


def add_parsers(verbs: Any) -> None:
    p = verbs.add_parser(
        "import-llama-bench", help="add llama-bench output (-o json/jsonl/csv/sql/md) to a DB",
        description="Read llama-bench's own output in any of its forms (-o json, jsonl, csv, "
        "sql, md; the form is told from the content) and store each test row as a result: "
        "its repetitions, the device resolved in the hardware catalog, the ceiling, the "
        "efficiency, the verdict against its expected band (the fitted model's where the "
        "device class has 20 public rows, else the band of its quant family and class), and "
        "a series key, so history, compare, changes and report work on it. A folder stands "
        "for the llama-bench files in it. Importing a file again adds nothing.")
    p.add_argument("files", nargs="+", metavar="FILE", help="llama-bench output files or folders")
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--device", help="the chip every row ran on, as the hardware catalog names "
                   "it (e.g. 'RTX 4090', 'Apple M2 Max'): the md form has no gpu_info")
    p.add_argument("--gpu-cores", type=int, help="Apple GPU core count (binned chips differ)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_import)

    p = verbs.add_parser(
        "outliers", help="results far below the band of their chip class, and build regressions",
        description="Every stored decode result (pytest runs and imported llama-bench rows) "
        "whose efficiency is under the low end of its expected band (the one predict shows: "
        "fitted where the device class has 20 public rows, else that of its quant family and "
        "class), with the figure it should reach and the reasons the data offers (small "
        "model, KV depth, the same chip faster on another backend or build, the host); then "
        "each build whose efficiency fell against the best earlier build of its series. "
        "This is how a chip the engine does not yet support well, or a driver regression, "
        "shows up. Exit 0 either way.")
    p.add_argument("--db", help=DB_HELP)
    p.add_argument("--factor", type=float, default=1.0,
                   help="flag below FACTOR x the band's low end (default 1.0; 0.8: only "
                   "rows 20%% under it)")
    p.add_argument("--drop", type=float, default=0.10,
                   help="build regression: efficiency this fraction under the best earlier "
                   "build of the series (default 0.10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_outliers)


def _readable(db: DbLocation) -> ResultStore:
    """``db`` opened read-only: a file that is no tokperf DB (an empty one, another
    program's) is refused and left byte for byte as it was."""
    from pytest_tokperf.storage.store import ResultStore

    return ResultStore.open_read_only(db)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _import(args: argparse.Namespace) -> int:
    from pytest_tokperf.expected.llama_bench_import import import_llama_bench

    db = db_location(chosen_db(args))
    if isinstance(db, Path) and db.is_file():
        _readable(db).close()  # a tokperf DB, or refused before anything is written
    added, rows = import_llama_bench(db, [Path(f) for f in args.files],
                                     device=args.device, gpu_cores=args.gpu_cores)
    data = {
        "db": str(db), "runs_added": added.runs, "results_added": added.results,
        "samples_added": added.samples,
        "rows": [{
            "source": r.record.source, "form": r.record.form, "test_id": r.test_id,
            "series_key": r.series_key,
            "hardware": r.hardware.name if r.hardware else None,
            "metric": r.metric,
            "tokens_per_s": r.record.get("avg_ts"),
            "ceiling_tokens_per_s": (r.ceiling.decode_tokens_per_s
                                     if r.ceiling and r.metric == "decode" else None),
            "efficiency": r.efficiency,
            "band": None if r.band is None or r.metric != "decode" else {
                "low": r.band.low, "typical": r.band.typical, "high": r.band.high},
            "verdict": r.verdict,
        } for r in rows],
    }
    lines = [f"{db}: added {added.runs} run(s), {added.results} result(s), "
             f"{added.samples} sample(s) from {len(rows)} llama-bench row(s)"]
    body = [(r.record.test_name, r.hardware.name if r.hardware else "-",
             f"{r.record.get('avg_ts'):.2f}",
             f"{r.ceiling.decode_tokens_per_s:.1f}" if r.ceiling and r.efficiency else "-",
             _pct(r.efficiency),
             f"{r.band.low:.0%}-{r.band.high:.0%}" if r.band and r.efficiency else "-",
             r.verdict, r.series_key) for r in rows]
    lines += table(("test", "device", "t/s", "ceiling", "eff", "band", "verdict", "series"),
                   body)
    emit(args, data, lines)
    return 0


def _outliers(args: argparse.Namespace) -> int:
    from pytest_tokperf.errors import ConfigError
    from pytest_tokperf.expected.outliers import find_outliers

    path = chosen_db(args)
    db = db_location(path)
    if isinstance(db, Path) and not db.is_file():
        raise ConfigError(f"results DB {path!r} does not exist; fill one with "
                          "`tokperf import-llama-bench FILE --db PATH` or a pytest run")
    if not 0 < args.factor <= 2 or not 0 < args.drop < 1:
        raise ConfigError(f"--factor {args.factor!r} must be in (0, 2] and --drop "
                          f"{args.drop!r} in (0, 1)")
    found = find_outliers(db, factor=args.factor, drop=args.drop)
    data = [{
        "kind": o.kind, "result_id": o.result_id, "test_id": o.test_id,
        "hardware": o.hardware, "build": o.build, "tokens_per_s": o.tokens_per_s,
        "efficiency": o.efficiency, "should_reach_tokens_per_s": o.should_reach_tokens_per_s,
        "typical_tokens_per_s": o.typical_tokens_per_s,
        "earlier_best_tokens_per_s": o.earlier_best_tokens_per_s,
        "band": None if o.band is None else {"low": o.band.low, "typical": o.band.typical,
                                              "high": o.band.high},
        "reasons": list(o.reasons), "source": o.source,
    } for o in found]
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
    emit(args, data, lines)
    return 0
