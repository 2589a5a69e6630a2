"""``tokperf compare``: two engine versions in one DB, or the latest runs of a second DB.

``compared`` gathers both sides per series and judges them once (``stats.compare_many``);
the verdict table, ``--json`` and ``-o md`` (compare-llama-bench's table, for a pull
request) are three views of that one judgement.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pytest_tokperf.cli.common import DB, JSON, chosen_db, db_location, shown_db
from pytest_tokperf.cli.output import emit, table
from pytest_tokperf.cli.results_verbs import open_db, series_labels
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.changepoints import settled_baseline
from pytest_tokperf.stats.comparing import Comparison, compare_many
from pytest_tokperf.stats.metric import Metric, interval_text, pct
from pytest_tokperf.stats.moved import moved_verdict
from pytest_tokperf.storage.history import (
    HistoryEntry,
    series_histories,
    series_metric,
    session_points,
)
from pytest_tokperf.storage.location import same_db
from pytest_tokperf.storage.store import HistoryRow, ResultStore

FIGURES = ("decode", "prefill", "ttft")
"""What the markdown table shows of each side, besides the figure a series is judged on."""


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a series' comparison: the stored results it judges, per metric, and the
    runs (sessions) of the judged metric that the judge reads."""

    entries: Mapping[str, Sequence[HistoryEntry]]
    sessions: Sequence[Sequence[float]]

    def median(self, metric: str) -> float | None:
        """The median of every repetition of ``metric`` in this side's results."""
        values = [v for e in self.entries.get(metric, ()) for v in e.point.samples]
        return statistics.median(values) if values else None


@dataclass(frozen=True, slots=True)
class SeriesComparison:
    """One series judged: both sides and the verdict ``tokperf compare`` prints."""

    series_key: str
    label: str
    tests: Mapping[str, str]
    """Per figure (decode, prefill, aggregate), llama-bench's test name: ``tg128``,
    ``pp512@d4096``, ``pp512+tg128``."""
    metric: Metric
    baseline: Side
    current: Side
    verdict: Comparison


@dataclass(frozen=True, slots=True)
class Compared:
    """Every series with results on both sides, by series key, and what each side is."""

    baseline_name: str
    current_name: str
    series: tuple[SeriesComparison, ...]


Pair = tuple[Side, Side, list[list[list[float]]]]
"""A series' baseline and current side, and the other builds' sessions (the spread)."""


def series_metrics(*stores: ResultStore) -> dict[str, Metric]:
    """Per series key, the metric it is judged on (``series_metric`` of its latest
    result); a series in several stores takes the first store's."""
    out: dict[str, Metric] = {}
    for store in reversed(stores):
        out.update({r.series_key: series_metric(r) for r in store.latest_per_series()})
    return out


def _histories(store: ResultStore, key: str, metric: Metric,
               version: str | None = None) -> dict[str, list[HistoryEntry]]:
    names = tuple(dict.fromkeys((metric.name, *FIGURES)))
    return series_histories(store, key, names, engine_version=version)


def _side(histories: Mapping[str, Sequence[HistoryEntry]], chosen: Sequence[HistoryEntry],
          sessions: Sequence[Sequence[float]]) -> Side:
    ids = {e.row.result_id for e in chosen}
    return Side({m: [e for e in entries if e.row.result_id in ids]
                 for m, entries in histories.items()}, sessions)


def _runs(entries: Sequence[HistoryEntry]) -> list[list[float]]:
    return [list(p.samples) for p in session_points(entries)]


def _is(row: HistoryRow, version: str) -> bool:
    return version in (row.engine_version, row.engine_build)


def stored_version(store: ResultStore, label: str | None) -> str | None:
    """The stored engine version a user's label names: as stored (``b9093`` or
    ``b9093-pypi-sdist``), or in any form ``install-engine --version`` takes (``9093``,
    ``9093.0.0``); None stays None (every version)."""
    from pytest_tokperf.builds.releases import release_number

    if label is None:
        return None
    stored = store.tuples("SELECT DISTINCT engine_version, engine_build FROM environments")
    if any(label in pair for pair in stored):
        return label

    def number(text: str | None) -> int | None:
        try:
            return release_number(text.split("-", 1)[0]) if text else None
        except ConfigError:
            return None

    wanted = number(label)
    matches: list[str] = sorted({str(v) for v, b in stored if wanted is not None and v
                                 and wanted in (number(v), number(b))})
    if len(matches) == 1:
        return matches[0]
    known = sorted({v or b or "?" for v, b in stored})
    raise ConfigError(f"no stored results of engine version {label!r}"
                      + (f" (it matches {matches!r}: name one)" if matches else "")
                      + f"; the DB holds {', '.join(known) or 'no results'}: "
                      f"`tokperf history` shows each series' build")


def _two_dbs(base_store: ResultStore, current_store: ResultStore, args: argparse.Namespace
             ) -> dict[str, Pair]:
    """Per series: the baseline DB's runs since its last step (a settled window), and the
    second DB's latest run."""
    metrics = series_metrics(base_store, current_store)
    base_version = stored_version(base_store, args.baseline)
    current_version = stored_version(current_store, args.current)
    current_keys = {r.series_key for r in current_store.latest_per_series()}
    out: dict[str, Pair] = {}
    for row in base_store.latest_per_series():
        key, metric = row.series_key, metrics[row.series_key]
        if key not in current_keys:
            continue
        base = _histories(base_store, key, metric, base_version)
        current = _histories(current_store, key, metric, current_version)
        judged, latest = base[metric.name], current[metric.name]
        settled = settled_baseline([e.point for e in judged], metric) if judged else []
        if not (settled and latest):
            continue
        chosen = judged[len(judged) - len(settled):]
        out[key] = (_side(base, chosen, [list(p.samples) for p in settled]),
                    _side(current, latest[-1:], [list(latest[-1].point.samples)]), [])
    return out


def _two_versions(store: ResultStore, baseline: str, current: str
                  ) -> dict[str, Pair]:
    """Per series: the baseline's and the current version's runs (one session each), and
    the other builds' runs grouped by build (they inform the spread, not the levels)."""
    metrics = series_metrics(store)
    out: dict[str, Pair] = {}
    for row in store.latest_per_series():
        metric = metrics[row.series_key]
        histories = _histories(store, row.series_key, metric)
        entries = histories[metric.name]
        b = [e for e in entries if _is(e.row, baseline)]
        c = [e for e in entries if _is(e.row, current)]
        if not (b and c):
            continue
        others: dict[str, list[list[float]]] = {}
        for point in session_points([e for e in entries if not (
                _is(e.row, baseline) or _is(e.row, current))]):
            others.setdefault(point.version, []).append(list(point.samples))
        out[row.series_key] = (_side(histories, b, _runs(b)), _side(histories, c, _runs(c)),
                               list(others.values()))
    return out


def _test_names(store: ResultStore, keys: Sequence[str]) -> dict[str, dict[str, str]]:
    """Per series key, llama-bench's test name of each figure: decode ``tg128``, prefill
    ``pp512``, aggregate ``pp512+tg128``; ``@d4096`` at a depth, `` x4`` concurrent."""
    from pytest_tokperf.storage.rows import Series

    texts = dict(store.tuples("SELECT series_key, series_text FROM series"))
    out: dict[str, dict[str, str]] = {}
    for key in keys:
        if key not in texts:
            out[key] = {}
            continue
        s = Series.from_text(texts[key])
        tail = (f"@d{s.depth_tokens}" if s.depth_tokens else "") + (
            f" x{s.concurrency}" if s.concurrency > 1 else "")
        out[key] = {"decode": f"tg{s.generate_tokens}{tail}",
                    "prefill": f"pp{s.prompt_tokens}{tail}",
                    "aggregate": f"pp{s.prompt_tokens}+tg{s.generate_tokens}{tail}"}
    return out


def compared(args: argparse.Namespace) -> Compared:
    """Both sides of every series the two versions (or DBs) share, judged as one family
    (Holm across series); each stored run a session, its repetitions nested in it."""
    dbs = ([args.db] if args.db else []) + list(args.dbs)
    if len(dbs) > 2:
        raise ConfigError(f"compare takes at most two DBs, got {[shown_db(d) for d in dbs]!r}: "
                          f"the baseline DB (--db "
                          f"or the first) and a second one whose latest runs are 'current'")
    if len(dbs) == 2 and same_db(db_location(dbs[0]), db_location(dbs[1])):
        raise ConfigError(f"compare {shown_db(dbs[0])!r} with {shown_db(dbs[1])!r}: that is "
                          f"one DB twice, so its "
                          "latest run would sit on both sides; give a second DB, or one DB "
                          "with --baseline VERSION --current VERSION")
    base_db = dbs[0] if dbs else chosen_db(args)
    base_store = open_db(base_db)
    cur_store = base_store
    if len(dbs) == 2:
        cur_store = open_db(dbs[1])
        sides = _two_dbs(base_store, cur_store, args)
        names = [_db_name(dbs[0], [v[0] for v in sides.values()]),
                 _db_name(dbs[1], [v[1] for v in sides.values()])]
    else:
        if not (args.baseline and args.current):
            raise ConfigError("compare needs --baseline VERSION and --current VERSION, or a second DB")
        baseline = stored_version(base_store, args.baseline)
        current = stored_version(base_store, args.current)
        assert baseline is not None and current is not None
        if baseline == current:
            raise ConfigError(f"--baseline {args.baseline!r} and --current {args.current!r} "
                              f"are both {baseline}: a build compared with itself has no "
                              "change to judge; name two versions `tokperf history` lists")
        sides = _two_versions(base_store, baseline, current)
        names = [baseline, current]
    if not sides:
        raise ConfigError("no series has results on both sides; check the versions with "
                          "`tokperf history`")
    common = sorted(sides)
    metrics = series_metrics(base_store)
    rows = {r.series_key: r for r in base_store.latest_per_series()}
    metric_of = {k: metrics[k] for k in common}
    verdicts: dict[str, Comparison] = compare_many(
        {k: sides[k][0].sessions for k in common}, {k: sides[k][1].sessions for k in common},
        metric_of, spread={k: sides[k][2] for k in common})
    verdicts = {k: _machine(v, metric_of[k], sides[k][0], sides[k][1], base_store, cur_store)
                for k, v in verdicts.items()}
    labels = series_labels(base_store, [rows[k] for k in common])
    tests = _test_names(base_store, common)
    return Compared(names[0], names[1], tuple(
        SeriesComparison(k, labels[k], tests[k], metric_of[k], sides[k][0], sides[k][1], v)
        for k, v in verdicts.items()))


def _machine(verdict: Comparison, metric: Metric, base: Side, cur: Side,
             base_store: ResultStore, cur_store: ResultStore) -> Comparison:
    """A flag withheld when every current run's bandwidth probe lies outside the
    baseline's and the change goes the way the memory went (``stats.moved``)."""
    if not verdict.flagged:
        return verdict
    ids = [[e.row.result_id for e in side.entries.get(metric.name, ())] for side in (base, cur)]
    return moved_verdict(verdict, list(cur_store.probed_bandwidths(ids[1]).values()),
                         list(base_store.probed_bandwidths(ids[0]).values()))


def _db_name(db: str, sides: Sequence[Side]) -> str:
    """A DB by its file name (a URL as shown), with the builds its compared runs are of:
    ``runner.db b9093``, ``main.db b9080..b9093``."""
    shown = shown_db(db)
    name = shown if "://" in shown else Path(shown).name
    versions = list(dict.fromkeys(e.point.version for side in sides
                                  for entries in side.entries.values() for e in entries))
    if not versions:
        return name
    return f"{name} {versions[0]}" + (f"..{versions[-1]}" if len(versions) > 1 else "")


def compare(args: argparse.Namespace) -> int:
    """The verdict table (or ``--json``, or ``-o md``); ``--fail``: exit 1 on a regression."""
    if args.json and args.output == "md":
        raise ConfigError("--json and -o md both choose what compare prints; give one")
    result = compared(args)
    verdicts = {s.series_key: s.verdict for s in result.series}
    if args.output == "md":
        print("\n".join(markdown_table(result)))
    else:
        tests = {s.series_key: s.label for s in result.series}
        rows = [(k[:12], tests[k], v.verdict, v.metric, pct(v.relative_change))
                for k, v in verdicts.items()]
        emit(args, {k: asdict(v) for k, v in verdicts.items()},
             [*table(("series", "test", "verdict", "metric", "change"), rows), "",
              *(f"{k[:12]} {v.verdict}: {v.reason}" for k, v in verdicts.items())])
    return 1 if args.fail and any(v.verdict == "regression" for v in verdicts.values()) else 0


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _level(confidence: float) -> str:
    """``95%``, ``99.75%``: a confidence to the digits that tell Holm's levels apart."""
    return f"{confidence * 100:.6g}%"


def _ms(seconds: float | None) -> str:
    return _num(None if seconds is None else seconds * 1e3, ".1f")


def _ratio(a: float | None, b: float | None) -> str:
    return _num(b / a if a and b is not None else None)


def markdown_table(result: Compared) -> list[str]:
    """compare-llama-bench's table: per series a row per figure (tg: decode, pp: prefill),
    both sides' median t/s and B/A, TTFT where measured; the verdict and its interval
    (the judged figure's row only) last."""
    a, b = result.baseline_name, result.current_name
    ttft = any(s.baseline.median("ttft") is not None or s.current.median("ttft") is not None
               for s in result.series)
    levels = {s.verdict.confidence for s in result.series if math.isfinite(s.verdict.confidence)}
    one_level = len(levels) == 1
    interval = f"change [{_level(levels.pop())} interval]" if one_level else "change [interval]"
    header = ["Test id", "Test", "t/s A", "t/s B", "B/A",
              *(["TTFT ms A", "TTFT ms B"] if ttft else []), "verdict", interval]
    align = ["---", "---", "---:", "---:", "---:", *(["---:", "---:"] if ttft else []),
             "---", "---"]
    lines = [f"**A**: {_cell(a)}, **B**: {_cell(b)}. t/s: the median of the compared runs' "
             "repetitions; verdict: the judge's (as `tokperf compare`), on one figure per "
             "series (decode; prefill for a prompt-only series).", "",
             "| " + " | ".join(_cell(h) for h in header) + " |", "|" + "|".join(align) + "|"]
    for s in sorted(result.series, key=lambda s: (s.label, s.series_key)):
        shown = [s.metric.name] + [m for m in ("decode", "prefill")
                                   if m != s.metric.name and s.baseline.median(m) is not None
                                   and s.current.median(m) is not None]
        for i, name in enumerate(shown):
            base, cur = s.baseline.median(name), s.current.median(name)
            cells = [s.label, s.tests.get(name, name), _num(base), _num(cur), _ratio(base, cur)]
            if ttft and i == 0:
                cells += [_ms(s.baseline.median("ttft")), _ms(s.current.median("ttft"))]
            elif ttft:
                cells += ["", ""]
            v = s.verdict
            if i == 0:
                word = f"**{v.verdict}**" if v.verdict == "regression" else v.verdict
                at = "" if one_level or not math.isfinite(v.confidence) else (
                    f" at {_level(v.confidence)}")
                cells += [word, f"{pct(v.relative_change)} "
                          f"{interval_text(v.ci_low, v.ci_high)}{at}"]
            else:
                cells += ["", ""]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines


def add_parser(verbs: Any) -> None:
    """Add ``compare`` to the ``tokperf`` parser."""
    p = verbs.add_parser(
        "compare", parents=[DB, JSON], help="tok/s of two engine versions, or two DBs "
        "(decode; prefill for a prompt-only series)",
        description="Per series, each stored run a session (its repetitions nested in it): "
        "significant AND at least 5% -> regression or improvement; too noisy or "
        "phase-dominated -> inconclusive. Holm across series. A version is written "
        "as install-engine takes it (9093, b9093, 9093.0.0) or as stored (b9093-pypi-sdist). "
        "-o md prints compare-llama-bench's table for a pull request: each series' tg "
        "(decode) and pp (prefill) rows with both sides' median t/s and B/A, TTFT where "
        "measured, then the same verdict and its interval.",
        usage="tokperf compare [--db PATH] [OTHER_DB] [--baseline V --current V] "
        "[-o text|md] [--fail]")
    p.add_argument("dbs", nargs="*", metavar="OTHER_DB",
                   help="a second DB: its latest run per series is 'current' (the old form "
                   "DB OTHER_DB still works)")
    p.add_argument("--baseline", help="baseline engine version or build")
    p.add_argument("--current", help="current engine version or build")
    p.add_argument("--output", "-o", choices=["text", "md"], default="text",
                   help="text: the verdict table (default); md: a GitHub table to paste into "
                   "a pull request (as compare-llama-bench.py prints)")
    p.add_argument("--fail", action="store_true", help="exit 1 when a series regressed")
    p.set_defaults(func=compare)
