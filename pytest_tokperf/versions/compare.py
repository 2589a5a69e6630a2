"""Two engine versions compared from stored results: two versions in one DB, or the
latest runs of a second DB against the first DB's settled window.

``compare_stored`` gathers both sides per series and judges them once
(``stats.compare_many``, Holm across series; a flag the machine's memory move explains is
withheld, ``stats.moved``); ``tokperf compare`` prints it as a verdict table, JSON or
compare-llama-bench's markdown (``report.verdicts``), and the reports judge a DB's two
latest builds through ``compare_versions`` (one rule at every door).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_tokperf.builds.releases import release_number
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.stats.changepoints import settled_baseline
from pytest_tokperf.stats.comparing import Comparison, compare_many
from pytest_tokperf.stats.metric import Metric
from pytest_tokperf.stats.moved import HostExponents, moved_verdict
from pytest_tokperf.storage.history import (
    HistoryEntry,
    entries_exponent,
    series_histories,
    series_metric,
    session_points,
)
from pytest_tokperf.storage.location import db_location, same_db, shown_db
from pytest_tokperf.storage.lookup import open_for_reading, series_labels
from pytest_tokperf.storage.rows import Series
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

    def mean(self, metric: str) -> float | None:
        """llama-bench's figure: each result's mean over its repetitions (``avg_ts``),
        averaged over the results (compare-llama-bench's ``AVG(avg_ts)``)."""
        means = [statistics.fmean(e.point.samples) for e in self.entries.get(metric, ())
                 if e.point.samples]
        return statistics.fmean(means) if means else None


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
    picked: str = ""
    """How the versions were chosen when not named (``latest_builds``); empty: named."""


Pair = tuple[Side, Side, list[list[list[float]]]]
"""A series' baseline and current side, and the other builds' sessions (the spread)."""


def series_metrics(*stores: ResultStore) -> dict[str, Metric]:
    """Per series key, the metric it is judged on (``series_metric`` of its latest
    result); a series in several stores takes the first store's."""
    out: dict[str, Metric] = {}
    for store in reversed(stores):
        out.update({r.series_key: series_metric(r, r.test_id)
                    for r in store.latest_per_series()})
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


def _release(text: str | None) -> int | None:
    """The release number a stored version or build starts with (``b9093-pypi-sdist``)."""
    try:
        return release_number(text.split("-", 1)[0]) if text else None
    except ConfigError:
        return None


def stored_version(store: ResultStore, label: str | None) -> str | None:
    """The stored engine version a user's label names: as stored (``b9093`` or
    ``b9093-pypi-sdist``), or in any form ``install-engine --version`` takes (``9093``,
    ``9093.0.0``); None stays None (every version)."""
    if label is None:
        return None
    stored = store.tuples("SELECT DISTINCT engine_version, engine_build FROM environments")
    if any(label in pair for pair in stored):
        return label
    wanted = _release(label)
    matches: list[str] = sorted({str(v) for v, b in stored if wanted is not None and v
                                 and wanted in (_release(v), _release(b))})
    if len(matches) == 1:
        return matches[0]
    known = sorted({v or b or "?" for v, b in stored})
    raise ConfigError(f"no stored results of engine version {label!r}"
                      + (f" (it matches {matches!r}: name one)" if matches else "")
                      + f"; the DB holds {', '.join(known) or 'no results'}: "
                      f"`tokperf history` shows each series' build")


def measured_builds(store: ResultStore) -> list[tuple[str, tuple[str | None, str | None]]]:
    """Every stored build by when it was last measured, latest last: its name (the engine
    version, or the build where two builds share a version) and its (version, build)."""
    found = store.tuples(
        "SELECT e.engine_version, e.engine_build, MAX(r.created_at) FROM results r "
        "JOIN environments e ON e.id = r.environment_id "
        "GROUP BY e.engine_version, e.engine_build")
    versions = [v for v, _, _ in found]
    return [(str(b) if (versions.count(v) > 1 or not v) and b else str(v or b), (v, b))
            for v, b, _ in sorted(found, key=lambda f: str(f[2])) if v or b]


def latest_builds(store: ResultStore, baseline: str | None = None,
                  current: str | None = None) -> tuple[str, str, str]:
    """The baseline and the current build, and how they were picked ('' when both are
    named): one not named is the build measured last of the others, as
    compare-llama-bench picks its commits; two picked go oldest release first."""
    names = [stored_version(store, baseline), stored_version(store, current)]
    if names[0] and names[1]:
        return names[0], names[1], ""
    builds = measured_builds(store)
    named = {n for n in names if n}
    others = list(dict.fromkeys(n for n, pair in builds if not named & set(pair)))
    if len(others) < 2 - len(named):
        raise ConfigError(f"compare needs two builds, and the DB holds "
                          f"{', '.join(n for n, _ in builds) or 'no results'}: measure "
                          "another build, or give a second DB")
    if names[0]:
        return names[0], others[-1], "the build measured last besides --baseline"
    if names[1]:
        return others[-1], names[1], "the build measured last besides --current"
    old, new = others[-2:]
    first, second = _release(old), _release(new)
    if first is not None and second is not None and first > second:
        old, new = new, old
    return old, new, "the two builds measured last"


def _two_dbs(base_store: ResultStore, current_store: ResultStore, base_version: str | None,
             current_version: str | None) -> dict[str, Pair]:
    """Per series: the baseline DB's runs since its last step (a settled window), and the
    second DB's latest run (of these versions; None: any)."""
    metrics = series_metrics(base_store, current_store)
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


def compare_stored(db: str, other_db: str | None = None, baseline: str | None = None,
                   current: str | None = None) -> Compared:
    """Both sides of every series two versions of ``db`` (``baseline``, ``current``; not
    named: ``latest_builds``), or ``db`` and ``other_db``, share, judged as one family (Holm
    across series); each stored run a session, its repetitions nested in it. A version is
    named as stored or as ``install-engine --version`` takes it."""
    if other_db is not None and same_db(db_location(db), db_location(other_db)):
        raise ConfigError(f"compare {shown_db(db)!r} with {shown_db(other_db)!r}: that is one DB "
                          "twice, so its latest run would sit on both sides; give a second "
                          "DB, or one DB with --baseline VERSION --current VERSION")
    base_store = open_for_reading(db)
    if other_db is None:
        return compare_versions(base_store, baseline, current)
    cur_store = open_for_reading(other_db)
    sides = _two_dbs(base_store, cur_store, stored_version(base_store, baseline),
                     stored_version(cur_store, current))
    names = (_db_name(db, [v[0] for v in sides.values()]),
             _db_name(other_db, [v[1] for v in sides.values()]))
    return _judged(base_store, cur_store, names, sides)


def compare_versions(store: ResultStore, baseline: str | None = None,
                     current: str | None = None) -> Compared:
    """Two builds of one DB judged as ``tokperf compare`` judges them: named, or picked
    (``latest_builds``); the reports judge the two latest builds through it."""
    base, cur, picked = latest_builds(store, baseline, current)
    if base == cur:
        raise ConfigError(f"--baseline {baseline!r} and --current {current!r} are both "
                          f"{base}: a build compared with itself has no change to judge; "
                          "name two versions `tokperf history` lists")
    return _judged(store, store, (base, cur), _two_versions(store, base, cur), picked)


def _judged(base_store: ResultStore, cur_store: ResultStore, names: tuple[str, str],
            sides: Mapping[str, Pair], picked: str = "") -> Compared:
    """Every series with results on both sides judged as one family (Holm)."""
    if not sides:
        raise ConfigError(f"no series has results of both {names[0]} and {names[1]}; "
                          "check the versions with `tokperf history`")
    common = sorted(sides)
    metrics = series_metrics(base_store)
    metric_of = {k: metrics[k] for k in common}
    verdicts: dict[str, Comparison] = compare_many(
        {k: sides[k][0].sessions for k in common}, {k: sides[k][1].sessions for k in common},
        metric_of, spread={k: sides[k][2] for k in common})
    rows = {r.series_key: r for r in base_store.latest_per_series()}
    labels = series_labels(base_store, [rows[k] for k in common])
    tests = _test_names(base_store, common)
    fits: dict[str | None, HostExponents] = {}
    return Compared(names[0], names[1], tuple(
        SeriesComparison(k, labels[k], tests[k], metric_of[k], sides[k][0], sides[k][1],
                         _machine(v, metric_of[k], sides[k][0], sides[k][1], base_store,
                                  cur_store, fits))
        for k, v in verdicts.items()), picked)


def _machine(verdict: Comparison, metric: Metric, base: Side, cur: Side,
             base_store: ResultStore, cur_store: ResultStore,
             fits: dict[str | None, HostExponents]) -> Comparison:
    """A flag withheld where the current runs' bandwidth probes moved from the baseline
    runs' and that move explains it (``stats.moved``; ``fits``: each host's exponents,
    fitted once a command)."""
    if not verdict.flagged:
        return verdict
    entries = [side.entries.get(metric.name, ()) for side in (base, cur)]
    ids = [[e.row.result_id for e in side] for side in entries]
    return moved_verdict(verdict, list(cur_store.probed_bandwidths(ids[1]).values()),
                         list(base_store.probed_bandwidths(ids[0]).values()),
                         exponent=entries_exponent(cur_store, [*entries[0], *entries[1]],
                                                   metric.name, fits))


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


