"""``tokperf import-llama-bench`` and ``tokperf outliers``: llama-bench's own output as data
(``expected.llama_bench_import``, ``expected.outliers``; printed by ``report.llama_bench``).

A file that is no tokperf DB (an empty one included) is refused by both and left as it
is; ``outliers`` only reads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import DB_HELP, chosen_db, db_location
from pytest_tokperf.cli.output import emit
from pytest_tokperf.errors import ConfigError


def import_llama_bench(args: argparse.Namespace) -> int:
    from pytest_tokperf.expected.llama_bench_import import (
        import_llama_bench as imported,
    )
    from pytest_tokperf.report.llama_bench import imported_json, imported_lines
    from pytest_tokperf.storage.lookup import writable

    db = writable(chosen_db(args))
    added, rows = imported(db, [Path(f) for f in args.files], device=args.device,
                           gpu_cores=args.gpu_cores)
    emit(args, imported_json(db, added, rows), imported_lines(db, added, rows))
    return 0


def outliers(args: argparse.Namespace) -> int:
    from pytest_tokperf.expected.outliers import find_outliers
    from pytest_tokperf.report.llama_bench import outliers_json, outliers_lines

    path = chosen_db(args)
    db = db_location(path)
    if isinstance(db, Path) and not db.is_file():
        raise ConfigError(f"results DB {path!r} does not exist; fill one with "
                          "`tokperf import-llama-bench FILE --db PATH` or a pytest run")
    if not 0 < args.factor <= 2 or not 0 < args.drop < 1:
        raise ConfigError(f"--factor {args.factor!r} must be in (0, 2] and --drop "
                          f"{args.drop!r} in (0, 1)")
    found = find_outliers(db, factor=args.factor, drop=args.drop)
    emit(args, outliers_json(found), outliers_lines(db, found))
    return 0


def add_import_llama_bench(verbs: Any) -> None:
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
    p.set_defaults(func=import_llama_bench)


def add_outliers(verbs: Any) -> None:
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
    p.set_defaults(func=outliers)
