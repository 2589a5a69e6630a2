"""Property-based fuzzing (hypothesis) of ``tokperf import``: run files (JSON lines) and
JSON exports, made from a real run with hostile values, keys, structure and bytes.

The property: the file is imported, or refused with one ``StorageError`` line before any
DB is made; what was imported reads back through ``tokperf history`` without a
traceback; nothing is written outside the folder the DB is in. Small example counts (the
file runs in well under 30 s on 2 cores); ``deadline=None``: a shared core is noisy.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pytest_tokperf.cli.main import main
from pytest_tokperf.errors import StorageError
from pytest_tokperf.report.files import export_results
from pytest_tokperf.storage.exchange import dump_run, import_datasets
from pytest_tokperf.storage.store import ResultStore
from tests.support.storage_factory import make_result, make_run, record_kwargs

FAST = settings(max_examples=250, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
    st.text(max_size=6), st.sampled_from(["\x00", "\ud800", "../../x", "/etc/passwd", ""]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8)


@pytest.fixture(scope="module")
def source() -> Iterator[tuple[list[Any], list[Any]]]:
    """A real run as text-form lines and as export rows."""
    with tempfile.TemporaryDirectory() as name:
        db = Path(name) / "a.db"
        with ResultStore.open(db) as store:
            store.begin_run(make_run("run-a"))
            for i in range(2):
                store.record("run-a", f"t{i}", make_result(), **record_kwargs())
            store.finish_run("run-a")
        export_results(db, "json", Path(name) / "out.json")
        yield ([json.loads(line) for line in dump_run(db, "run-a").splitlines()],
               json.loads((Path(name) / "out.json").read_text()))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``value`` a fuzzer may change: dict keys and list positions."""
    found = [prefix]
    if len(prefix) > 8:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, document: Any) -> Any:
    doc = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(0, 3))):
        places = [p for p in _paths(doc) if p]
        if not places:
            break
        place = draw(st.sampled_from(places))
        parent = doc
        for step in place[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["set", "set", "drop", "add", "nest"]))
        if action == "set":
            parent[place[-1]] = draw(VALUES)
        elif action == "drop" and isinstance(parent, dict):
            del parent[place[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(SCALARS)
        elif action == "nest":
            depth = draw(st.sampled_from([2, 70, 200]))
            value: Any = parent[place[-1]]
            for _ in range(depth):
                value = [value]
            parent[place[-1]] = value
    return doc


@st.composite
def run_files(draw: st.DrawFn, lines: list[Any], rows: list[Any]) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["jsonl", "jsonl", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.sampled_from([".jsonl", ".json"])), draw(st.binary(max_size=200))
    if kind == "json":
        return ".json", json.dumps(draw(mutated(rows))).encode()
    text = [json.dumps(line) for line in draw(mutated(lines))]
    if draw(st.booleans()):
        depth = draw(st.sampled_from([0, 5000]))
        text.insert(draw(st.integers(0, len(text))), draw(st.one_of(
            st.text(max_size=20), st.just('{"series": ' + "[" * depth + "]" * depth + "}"))))
    return ".jsonl", "\n".join(text).encode("utf-8", "surrogatepass")


@FAST
@given(data=st.data())
def test_any_import_file_is_imported_and_readable_or_refused_in_one_line(
    data: st.DataObject, source: tuple[list[Any], list[Any]],
    capsys: pytest.CaptureFixture[str]
) -> None:
    suffix, content = data.draw(run_files(*source))
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        path = folder / f"in{suffix}"
        path.write_bytes(content)
        db = folder / "db" / "r.db"
        try:
            added = import_datasets(db, [path])
        except StorageError as exc:
            event("refused")
            message = str(exc)
            assert message and "\n" not in message and len(message) < 800, message
            assert not db.parent.exists(), "a refused import made a DB"
        else:
            event("imported" if added.runs else "nothing to add")
            if db.exists():
                capsys.readouterr()
                assert main(["history", "--db", str(db)]) in (0, 2)
                assert main(["export", "--db", str(db), "--format", "json", "-o",
                             str(db.parent / "out.json")]) in (0, 2)
                assert "Traceback" not in capsys.readouterr().err
        written = {p for p in folder.rglob("*") if p != path and p.parent != db.parent}
        assert written <= {db.parent}, written
