"""How a user's words name stored things: a results DB to read (a file or a
``postgresql://`` URL, opened read-only), the series a pattern matches, a label per
series that tells it from the other series of its test; and a level accepted on purpose."""

from __future__ import annotations

import getpass
from dataclasses import asdict
from pathlib import Path

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.storage.location import DEFAULT_DB_HELP, DbLocation, db_location
from pytest_tokperf.storage.records import Acceptance
from pytest_tokperf.storage.rows import Series
from pytest_tokperf.storage.store import HistoryRow, ResultStore


def readable(path: str, flag: str = "--db") -> DbLocation:
    """``path`` as a DB to read: a checked ``PgUrl``, or a file that exists."""
    db = db_location(path, flag)
    if isinstance(db, Path) and not db.is_file():
        raise ConfigError(f"results DB {path!r} does not exist; pytest and `tokperf bench` "
                          f"write one ({DEFAULT_DB_HELP}), or pass {flag} PATH")
    return db


def writable(path: str, flag: str = "--db") -> DbLocation:
    """``path`` as a DB to write: a checked ``PgUrl``, a new file, or an existing file that
    is a tokperf DB (another program's file is refused before anything is written)."""
    db = db_location(path, flag)
    if isinstance(db, Path) and db.is_file():
        ResultStore.open_read_only(db).close()
    return db


def open_for_reading(path: str, flag: str = "--db") -> ResultStore:
    """The DB at ``path``, read-only: a tokperf DB, or refused and left untouched."""
    return ResultStore.open_read_only(readable(path, flag))


def find_series(store: ResultStore, pattern: str | None) -> list[HistoryRow]:
    """The latest result of each series whose key starts with ``pattern`` or whose test
    id contains it (every series for None)."""
    rows = store.latest_per_series()
    if pattern:
        rows = [r for r in rows if r.series_key.startswith(pattern) or pattern in r.test_id]
        if not rows:
            raise ConfigError(f"no stored series matches {pattern!r} (a series key prefix or "
                              f"part of a test id); `tokperf history` lists them")
    return rows


def series_labels(store: ResultStore, rows: list[HistoryRow]) -> dict[str, str]:
    """Per series key, its test id, with what tells it apart from the other series of the
    same test (``+draft``, ``depth_tokens=4096``...): two rows never read alike."""
    texts = dict(store.tuples("SELECT series_key, series_text FROM series"))
    by_test: dict[str, list[str]] = {}
    for r in rows:
        by_test.setdefault(r.test_id, []).append(r.series_key)
    labels: dict[str, str] = {}
    for test_id, keys in by_test.items():
        if len(keys) == 1:
            labels[keys[0]] = test_id
            continue
        fields = {k: asdict(Series.from_text(texts[k])) for k in keys}
        differ = sorted({name for f in fields.values() for name, value in f.items()
                         if any(o.get(name) != value for o in fields.values())})
        for key in keys:
            f = fields[key]
            parts = ["+draft"] if "speculative" in differ and f["speculative"] else []
            parts += [f"{name}={_short(f[name])}" for name in differ
                      if name not in ("speculative", "draft_model") and f[name] is not None]
            labels[key] = " ".join([test_id, *parts])
        if len(set(labels[k] for k in keys)) < len(keys):  # alike still: name the key
            for key in keys:
                labels[key] += f" [{key[:8]}]"
    return labels


def _short(value: object, width: int = 24) -> str:
    text = str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


UNKNOWN_USER = "unknown user"


def accepted_by(given: str | None) -> str:
    """Who accepts a level: ``given``, else the login name (``getpass.getuser``: $LOGNAME,
    $USER, ... then the account), else ``unknown user``."""
    if given is not None:
        if not given.strip():
            raise ConfigError("--by is empty: name who accepts the new level, or leave --by "
                              "out for your login name")
        return given.strip()
    try:
        return getpass.getuser() or UNKNOWN_USER
    except (KeyError, OSError, ImportError):  # no such variable and no account entry
        return UNKNOWN_USER


def accept_levels(store: ResultStore, pattern: str | None, *, every: bool,
                  result_id: int | None, by: str | None, reason: str
                  ) -> list[tuple[HistoryRow, Acceptance]]:
    """Record a deliberate new level of the series ``pattern`` matches (``every``: all of
    them) from their latest result, or from ``result_id``: the gate's baseline starts
    there."""
    if not reason.strip():
        raise ConfigError("--reason is empty: say why the new level is accepted (it is stored "
                          "with who and when)")
    if every and pattern:
        raise ConfigError(f"--all and SERIES {pattern!r} both choose the series; give one")
    rows = find_series(store, pattern)
    if not (pattern or every or result_id is not None):
        raise ConfigError(f"accept moves a series' baseline: name the series (a key prefix "
                          f"or part of a test id; `tokperf history` lists them), or --result "
                          f"ID, or --all for every one of the {len(rows)} series")
    who = accepted_by(by)
    done = []
    for row in rows:
        if result_id is not None and result_id not in [
                h.result_id for h in store.history(row.series_key)]:
            continue
        chosen = row.result_id if result_id is None else result_id
        done.append((row, store.accept(row.series_key, chosen, accepted_by=who, reason=reason)))
    if not done:
        raise ConfigError(f"result {result_id!r} belongs to none of the series matched by "
                          f"{pattern!r}; `tokperf history SERIES` lists result times")
    return done
