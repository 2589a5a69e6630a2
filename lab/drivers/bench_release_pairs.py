"""What ``tokperf compare`` and ``tokperf changes`` say on the real release dataset.

    .venv/bin/python lab/drivers/bench_release_pairs.py [--data db/runs/releases]
        [--no-inject] [--verbose]

The data: 9 llama.cpp releases x 3 pytest sessions x 5 repetitions of the main job
(``db/runs/releases/``, measured on this project's shared 2-core VM, whose memory
bandwidth sits in phases). The README calls the releases unchanged on CPU decode; the
sessions of one release spread by about 12%, their repetitions by about 1.4%.

1. **Every release pair, through the CLI.** ``tokperf compare DB --baseline A --current B``
   for each of the 36 pairs (older as baseline) judges decode for each of the 2 series
   (``test_decode_short_prompt``, ``test_ttft_prompt_512``): 72 verdicts. The target is
   0 flagged; "inconclusive" and "phase-dominated" are honest answers. The same pairs
   are then judged on TTFT through the library (``compare_many``, built the way the CLI
   builds decode's sessions), 72 more.
2. **A -5% step injected** (every session from release r on x 0.95, decode only, r =
   2..7 as a 1-based index into the 9 releases): what ``tokperf changes`` reports, and
   what the gate (``judge_history``) says of the first run after the step, judged
   against every run before it.

Nothing here is synthetic except the injected step; nothing is random.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import itertools
import json
import sqlite3
import sys
import tempfile
from collections import Counter
from pathlib import Path

from pytest_tokperf.cli.main import main as tokperf
from pytest_tokperf.stats import DECODE, TTFT, compare_many, judge_history
from pytest_tokperf.storage.exchange import import_datasets
from pytest_tokperf.storage.history import series_history, session_points
from pytest_tokperf.storage.store import ResultStore

FLAGS = ("regression", "improvement")


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = tokperf(list(args))
    return code, out.getvalue()


def builds(db: Path) -> list[str]:
    """The releases in the DB, oldest first (by build number)."""
    with sqlite3.connect(db) as conn:
        names = {row[0] for row in conn.execute("SELECT engine_build FROM environments")}
    return sorted(names, key=lambda b: int(b[1:].split("-")[0]))


def pairs_through_cli(db: Path, releases: list[str], verbose: bool) -> Counter[str]:
    counts: Counter[str] = Counter()
    for a, b in itertools.combinations(releases, 2):
        code, out = cli("compare", str(db), "--baseline", a, "--current", b, "--json")
        if code != 0:
            raise SystemExit(f"tokperf compare {a} {b} exited {code}: {out}")
        for key, verdict in json.loads(out).items():
            counts[verdict["verdict"]] += 1
            phase = "phase-dominated" in verdict["reason"]
            counts["phase-dominated"] += phase
            if verdict["verdict"] in FLAGS or verbose:
                print(f"  {a[:6]} -> {b[:6]} {key[:8]} {verdict['verdict']}: {verdict['reason']}")
    return counts


def pairs_ttft(db: Path, releases: list[str], verbose: bool) -> Counter[str]:
    """TTFT judged as the CLI judges decode: sessions nested, other builds as spread."""
    nested = "spread" in inspect.signature(compare_many).parameters
    counts: Counter[str] = Counter()
    with ResultStore.open(db) as store:
        runs: dict[str, dict[str, list[list[float]]]] = {}
        for row in store.latest_per_series():
            by_build: dict[str, list[list[float]]] = {}
            for e in series_history(store, row.series_key, TTFT.name):
                by_build.setdefault(e.row.engine_build or "?", []).append(list(e.point.samples))
            runs[row.series_key] = by_build
    for a, b in itertools.combinations(releases, 2):
        keys = [k for k, v in runs.items() if a in v and b in v]
        base = {k: runs[k][a] for k in keys}
        if nested:
            spread = {k: [s for build, s in runs[k].items() if build not in (a, b)] for k in keys}
            found = compare_many(base, {k: runs[k][b] for k in keys}, TTFT, spread=spread)
        else:  # the code before sessions were nested: the current side pooled flat
            found = compare_many(base, {k: [x for s in runs[k][b] for x in s] for k in keys}, TTFT)
        for key, c in found.items():
            counts[c.verdict] += 1
            counts["phase-dominated"] += "phase-dominated" in c.reason
            if c.verdict in FLAGS or verbose:
                print(f"  {a[:6]} -> {b[:6]} {key[:8]} {c.verdict}: {c.reason}")
    return counts


def table(title: str, counts: Counter[str]) -> None:
    total = sum(counts[v] for v in ("regression", "improvement", "unchanged", "inconclusive"))
    print(f"\n{title}: {total} verdicts")
    for verdict in ("regression", "improvement", "unchanged", "inconclusive"):
        print(f"  {verdict:<13} {counts[verdict]:>3}")
    print(f"  {'flagged':<13} {counts['regression'] + counts['improvement']:>3}   (target 0)")
    print(f"  {'phase-dominated':<13} {counts['phase-dominated']:>3}   (of the inconclusive: "
          "the verdict names the history's phases)")


def inject(db: Path, releases: list[str], first: int, factor: float = 0.95) -> None:
    """Every decode figure of every session from ``releases[first]`` on, times ``factor``."""
    later = releases[first:]
    with sqlite3.connect(db) as conn:
        marks = ",".join("?" * len(later))
        ids = [r[0] for r in conn.execute(
            f"SELECT r.id FROM results r JOIN environments e ON e.id = r.environment_id "
            f"WHERE e.engine_build IN ({marks})", later)]
        id_marks = ",".join("?" * len(ids))
        conn.execute(f"UPDATE samples SET decode_tokens_per_s = decode_tokens_per_s * ?, "
                     f"engine_decode_tokens_per_s = engine_decode_tokens_per_s * ? "
                     f"WHERE result_id IN ({id_marks})", [factor, factor, *ids])
        summary = ("median", "mean", "stdev", "min", "max")
        conn.execute("UPDATE results SET " + ", ".join(
            f"decode_tokens_per_s_{s} = decode_tokens_per_s_{s} * ?" for s in summary)
            + f" WHERE id IN ({id_marks})", [*([factor] * len(summary)), *ids])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("db/runs/releases"))
    parser.add_argument("--no-inject", action="store_true", help="skip the injected steps")
    parser.add_argument("--verbose", action="store_true", help="print every verdict")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "releases.db"
        added = import_datasets(db, [args.data])
        releases = builds(db)
        print(f"{args.data}: {added.runs} runs, {added.results} results, {len(releases)} "
              f"releases ({releases[0]} .. {releases[-1]})")
        print("\nflagged verdicts, tokperf compare (decode):")
        decode = pairs_through_cli(db, releases, args.verbose)
        print("\nflagged verdicts, TTFT judged the same way:")
        ttft = pairs_ttft(db, releases, args.verbose)
        table("tokperf compare, every release pair, decode per series", decode)
        table("the same pairs, TTFT per series (library)", ttft)
        if args.no_inject:
            return 0
        print("\n-5% step injected into decode (every session from release r on x 0.95); "
              "what `tokperf changes` says:")
        for r in range(2, 8):
            stepped = Path(folder) / f"step-{r}.db"
            stepped.write_bytes(db.read_bytes())
            inject(stepped, releases, r - 1)
            _, out = cli("changes", str(stepped))
            _, found = cli("changes", str(stepped), "--json")
            hits = [f"{c['version_before']} -> {c['version_after']} {c['relative_change']:+.1%}"
                    for c in json.loads(found)]
            at = f"{releases[r - 2][:6]} -> {releases[r - 1][:6]}"
            print(f"\n  r={r} (step between {at}): change points: {', '.join(hits) or 'none'}")
            for line in out.splitlines():
                print(f"    {line}")
            for test, verdict in gate_after_step(stepped, releases[r - 1]):
                print(f"    gate, first run of {releases[r - 1][:6]} ({test}): {verdict}")
    return 0


def gate_after_step(db: Path, first: str) -> list[tuple[str, str]]:
    """Per series: the gate's verdict on the first run of ``first`` against all before."""
    out = []
    with ResultStore.open(db) as store:
        for row in store.latest_per_series():
            entries = series_history(store, row.series_key, DECODE.name, since_accepted=False)
            at = next(i for i, e in enumerate(entries) if e.row.engine_build == first)
            points = session_points(entries[:at])
            judged = judge_history(points, list(entries[at].point.samples), DECODE,
                                   current_version=first)
            c = judged.comparison
            out.append((row.test_id.split("::")[-1], f"{c.verdict}: {c.reason[:160]}..."))
    return out


if __name__ == "__main__":
    sys.exit(main())
