"""How the results store scales: 1,000,000 synthetic results, then the queries people run.

    nice .venv/bin/python benchmarks/perf/bench_storage.py [DIR] [--series 2000] [--versions 500]

(``PYTHONPATH=.`` from the repository root while the package is not installed.)

First, bulk insert before and after: the same ``--compare`` results (default 50,000)
into fresh stores through sqlite-utils ``insert_all`` (before) and
``insert_rows`` below (after: prepared statements without the empty columns, no
per-value conversion),
interleaved, ``--rounds`` times each (the rows are built first: only the insert is
timed); medians and the ratio are printed (target:
>= 50,000 results/s after).

Then fills a fresh ``results.db`` in DIR (default: a new temporary folder) with
``series x versions`` results (one run and one environment per engine version, one
result per series in each run; no samples) through the store's own schema, in one
transaction with ``insert_rows``. Then, on a freshly opened store, times
``history()`` of single series (target: < 100 ms at 1M rows), ``latest_per_series()``
and ``runs()``, and prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import operator
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from sqlite_utils import Database

from pytest_tokperf.results import (
    Bandwidth,
    BenchResult,
    EngineInfo,
    HardwareInfo,
    ModelInfo,
    RunInfo,
    Summary,
    Workload,
)
from pytest_tokperf.storage.store import ResultStore
from pytest_tokperf.storage.rows import (
    Row,
    environment_row,
    result_row,
    run_row,
    series_of,
    series_row,
)

BATCH_SIZE = 10_000
HISTORY_PROBES = 25
BULK_CACHE_KIB = 64 * 1024
"""Page cache while ``insert_rows`` runs: a results row touches four indexes."""


def _insert_statement(table: str, chosen: list[str]
                      ) -> tuple[str, Callable[[Row], tuple[object, ...]]]:
    names = ", ".join(f"[{c}]" for c in chosen)
    sql = f"INSERT INTO [{table}] ({names}) VALUES ({', '.join('?' * len(chosen))})"
    if len(chosen) > 1:
        return sql, operator.itemgetter(*chosen)
    only = chosen[0]
    return sql, lambda r: (r[only],)


def insert_rows(db: Database, table: str, rows: Iterable[Row]) -> int:
    """Insert many rows through prepared statements; returns how many. Call it inside one
    transaction (``db.atomic()``).

    Every row must have the first row's columns, with values SQLite takes as they
    are (JSON columns already text). Columns that are None in the first row and have
    no default are left out of the statement while the rows keep them None; a row that
    fills one goes through the statement with every column, so ids follow the input.
    """
    it = iter(rows)
    first = next(it, None)
    if first is None:
        return 0
    columns = list(first)
    no_default = {name for _, name, _, _, default, _ in
                  db.execute(f"PRAGMA table_info([{table}])").fetchall() if default is None}
    empty = [c for c in columns if first[c] is None and c in no_default]
    if len(empty) == len(columns):
        empty = []  # a statement needs a column: a first row of NULLs goes in whole
    kept = [c for c in columns if c not in empty]
    statements = {False: _insert_statement(table, kept)}
    if empty:
        statements[True] = _insert_statement(table, columns)
        blanks = operator.itemgetter(*empty)
        fills: Callable[[Row], bool] = (
            (lambda r: blanks(r).count(None) != len(empty)) if len(empty) > 1
            else (lambda r: blanks(r) is not None))
    cache = db.execute("PRAGMA cache_size").fetchone()[0]
    db.execute(f"PRAGMA cache_size = {-BULK_CACHE_KIB}")  # the indexes stay in memory
    count = 0
    try:
        every = itertools.chain((first,), it)
        runs = itertools.groupby(every, fills) if empty else ((False, every),)
        for full, run in runs:
            sql, pick = statements[full]
            # values by itemgetter in C through map: no Python frame per row
            count += db.conn.executemany(sql, map(pick, run)).rowcount
    finally:
        db.execute(f"PRAGMA cache_size = {int(cache)}")
    return count


def _summary(value: float) -> Summary:
    return Summary(value, value, value / 50, value * 0.97, value * 1.03, 5)


def _result(version: int) -> BenchResult:
    engine = EngineInfo(
        name="llama-server",
        version=f"b{6000 + version}",
        build=f"{version:07x}",
        base_url="http://127.0.0.1:8080",
        backend="CUDA",
        context_size=4096,
        threads=8,
        settings=(("batch_size", "2048"), ("flash_attn", "on"), ("kv_type", "f16")),
    )
    return BenchResult(
        workload=Workload(prompt_tokens=512, generate_tokens=128),
        engine=engine,
        samples=(),
        ttft_s=_summary(0.05),
        decode_tokens_per_s=_summary(100.0),
        prefill_tokens_per_s=_summary(5000.0),
        engine_decode_tokens_per_s=_summary(101.0),
        engine_prefill_tokens_per_s=_summary(5100.0),
        inter_token_p50_s=0.01,
        inter_token_p90_s=0.012,
        inter_token_p99_s=0.02,
        decode_agreement=0.002,
        ttft_minus_engine_prefill_s=0.004,
    )


MODEL = ModelInfo(file_name="m.gguf", file_bytes=1 << 30, content_hash="a" * 64, file_type="F16")
HARDWARE = HardwareInfo("NVIDIA H200", "gpu", "570.86", spec_bandwidth=Bandwidth(4.8e12, "catalog"))


def _stamp(version: int, offset_us: int) -> str:
    day, hour = divmod(version, 24)
    return f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T{hour:02d}:00:00.{offset_us:06d}+00:00"


def _test_ids(n_series: int) -> list[str]:
    return [f"benchmarks/test_decode.py::test_decode[s{s}]" for s in range(n_series)]


def prepare(store: ResultStore, n_series: int, n_versions: int) -> None:
    """The series, one run and one environment per version: what results point at."""
    db = store.db
    with db.atomic():
        db.table("series").insert_all(
            (series_row(series_of(t, _result(0), MODEL)) for t in _test_ids(n_series)),
            batch_size=BATCH_SIZE,
        )
        for version in range(n_versions):
            run = RunInfo(
                f"run-{version:05d}", _stamp(version, 0), "bench", "Linux", "3.11", "0.1.0"
            )
            db.table("runs").insert(run_row(run))
            db.table("environments").insert(
                {"id": version + 1, **environment_row(_result(version).engine, MODEL, HARDWARE)}
            )


def result_rows(n_series: int, n_versions: int) -> Iterator[Row]:
    """One result row per series in each version's run, as ``rows.result_row`` makes them."""
    rng = random.Random(1)
    test_ids = _test_ids(n_series)
    keys = [series_of(t, _result(0), MODEL).key for t in test_ids]
    for version in range(n_versions):
        base = result_row(_result(version), None, None, "unchecked")
        for s, key in enumerate(keys):
            yield {
                **base,
                "run_id": f"run-{version:05d}",
                "environment_id": version + 1,
                "series_key": key,
                "test_id": test_ids[s],
                "created_at": _stamp(version, s),
                "decode_tokens_per_s_median": 100.0 * rng.gauss(1.0, 0.02),
            }


def insert(store: ResultStore, rows: Iterable[Row], fast: bool = True) -> None:
    """``fast``: ``insert_rows``; else sqlite-utils ``insert_all`` (before)."""
    with store.db.atomic():
        if fast:
            insert_rows(store.db, "results", rows)
        else:
            store.db.table("results").insert_all(rows, batch_size=BATCH_SIZE)


def fill(store: ResultStore, n_series: int, n_versions: int) -> int:
    prepare(store, n_series, n_versions)
    insert(store, result_rows(n_series, n_versions))
    return n_series * n_versions


def compare_inserts(folder: Path, n_results: int, rounds: int) -> tuple[float, float]:
    """Median results/s of ``insert_all`` and of ``insert_rows`` into fresh stores,
    interleaved; the rows are built beforehand, so only the insert is timed."""
    n_series = 100
    n_versions = max(1, n_results // n_series)
    rows = list(result_rows(n_series, n_versions))
    rates: dict[bool, list[float]] = {False: [], True: []}
    for index in range(rounds):
        for fast in (False, True) if index % 2 == 0 else (True, False):
            path = folder / f"insert-{index}-{'fast' if fast else 'utils'}.db"
            with ResultStore.open(path) as store:
                prepare(store, n_series, n_versions)
                start = time.perf_counter()
                insert(store, rows, fast)
                rates[fast].append(len(rows) / (time.perf_counter() - start))
            for leftover in folder.glob(path.name + "*"):
                leftover.unlink()
    return statistics.median(rates[False]), statistics.median(rates[True])


def _time_ms(call: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times), value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", type=Path, default=None)
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--versions", type=int, default=500)
    parser.add_argument("--compare", type=int, default=50_000, metavar="N",
                        help="results per before/after insert (0: skip)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="tokperf-bench-"))
    path = folder / "results.db"
    if path.exists():
        parser.error(f"{path} exists; give an empty folder")
    if args.compare:
        before, after = compare_inserts(folder, args.compare, args.rounds)
        print(f"bulk insert of {args.compare:,} results, median of {args.rounds} interleaved:")
        print(f"  before, sqlite-utils insert_all:   {before:>9,.0f} results/s")
        print(f"  after, insert_rows:                {after:>9,.0f} results/s "
              f"({after / before:.1f}x; target >= 50,000/s)")

    with ResultStore.open(path) as store:
        start = time.perf_counter()
        rows = fill(store, args.series, args.versions)
        insert_s = time.perf_counter() - start
    size_mb = sum(p.stat().st_size for p in folder.glob("results.db*")) / 1e6

    with ResultStore.open(path) as store:
        keys = [r[0] for r in store.db.execute("SELECT series_key FROM series")]
        probes = random.Random(2).sample(keys, min(HISTORY_PROBES, len(keys)))
        history_times = []
        for key in probes:
            start = time.perf_counter()
            history = store.history(key)
            history_times.append((time.perf_counter() - start) * 1000)
            assert len(history) == args.versions
        latest_med, latest_max, latest = _time_ms(store.latest_per_series, 5)
        runs_med, runs_max, _ = _time_ms(store.runs, 3)
        assert isinstance(latest, list) and len(latest) == args.series
        plan = store.db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM series_history WHERE series_key = ?"
            " ORDER BY created_at DESC, result_id DESC",
            [probes[0]],
        ).fetchall()

    print(
        f"results.db: {path} ({rows:,} results, {args.series:,} series x "
        f"{args.versions:,} versions, no samples; {size_mb:,.0f} MB with WAL)"
    )
    print(f"{'measure':<34}{'median':>12}{'max':>12}")
    print(f"{'fill: rows built + insert_rows':<34}{rows / insert_s:>9,.0f}/s{insert_s:>11.1f}s")
    print(
        f"{'history(one series), ' + str(args.versions) + ' rows':<34}"
        f"{statistics.median(history_times):>10.1f}ms{max(history_times):>10.1f}ms"
    )
    print(f"{'latest_per_series()':<34}{latest_med:>10.1f}ms{latest_max:>10.1f}ms")
    print(f"{'runs() with result counts':<34}{runs_med:>10.1f}ms{runs_max:>10.1f}ms")
    print("history plan: " + "; ".join(str(row[-1]) for row in plan))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
