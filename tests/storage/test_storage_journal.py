"""Nothing measured is lost: a result the database cannot take stays in the journal,
one line says how to import it, and the session ends without a traceback.

Full disk is SQLite's own "database or disk is full" from the insert (a conftest
patches ``ResultStore.add_result``); a locked database is a second process holding
``BEGIN EXCLUSIVE`` (the busy timeout is shortened by the conftest). Each session is a
pytester run against a fake llama-server on 127.0.0.1.
"""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.fake_faults import FakeFaultyLlama

from pytest_tokperf.errors import StorageError
from pytest_tokperf.storage import store as store_mod
from pytest_tokperf.storage.exchange import import_datasets
from pytest_tokperf.storage.store import ResultStore

BENCH = """
def test_a(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)

def test_b(tok_bench):
    tok_bench(prompt_tokens=8, generate_tokens=8, repetitions=2, warmup=0)
"""

FULL_DISK = """
import sqlite3
import pytest
from pytest_tokperf.storage import store

def _full(*args, **kwargs):
    raise sqlite3.OperationalError("database or disk is full")

@pytest.fixture(autouse=True)
def _disk_full(monkeypatch):
    monkeypatch.setattr(store.ResultStore, "add_result", _full)
"""

SHORT_BUSY = """
from pytest_tokperf.storage import store
store.BUSY_TIMEOUT_S = 0.5
"""

LOCKER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def fake() -> Iterator[FakeFaultyLlama]:
    with FakeFaultyLlama("ok") as server:
        yield server


def journals(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.journal.jsonl"))


def run(pytester: pytest.Pytester, fake: FakeFaultyLlama, *args: str) -> pytest.RunResult:
    pytester.makepyfile(BENCH)
    return pytester.runpytest("--tokperf-url", fake.url, "--tokperf-bandwidth", "30GB/s",
                              "--tokperf-db", "r.db", *args)


def check_kept(pytester: pytest.Pytester, result: pytest.RunResult, why: str) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text
    result.assert_outcomes(passed=2)
    (journal,) = journals(pytester.path)
    result.stdout.fnmatch_lines([
        f"*tokperf: 2 result(s) could not be stored in 'r.db' (*{why}*); they are kept in "
        f"the journal '{journal.name}': import them with `tokperf import --db r.db {journal.name}`*"])
    added = import_datasets(pytester.path / "elsewhere.db", [journal])
    assert (added.runs, added.results, added.samples) == (1, 2, 4)


def test_a_full_disk_keeps_every_result_in_the_journal(pytester: pytest.Pytester,
                                                       fake: FakeFaultyLlama) -> None:
    pytester.makeconftest(FULL_DISK)
    check_kept(pytester, run(pytester, fake), "database or disk is full")


def test_a_database_locked_mid_run_keeps_every_result_in_the_journal(
        pytester: pytest.Pytester, fake: FakeFaultyLlama) -> None:
    pytester.makeconftest(SHORT_BUSY + """
import subprocess, sys, pytest

@pytest.fixture(autouse=True, scope="session")
def _locker():
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, "r.db"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield
    proc.stdin.close()
    proc.stdout.close()
    proc.wait()

LOCKER = %r
""" % LOCKER)
    pytester.makepyfile(BENCH)  # a subprocess: the shortened busy timeout stays in it
    result = pytester.runpytest_subprocess("--tokperf-url", fake.url, "--tokperf-bandwidth",
                                           "30GB/s", "--tokperf-db", "r.db")
    check_kept(pytester, result, "locked by another process")


def test_every_result_stored_leaves_no_journal(pytester: pytest.Pytester,
                                               fake: FakeFaultyLlama) -> None:
    result = run(pytester, fake)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["results: 2 stored in r.db"])
    assert journals(pytester.path) == []


def test_a_journal_imported_after_the_database_took_it_adds_nothing(
        pytester: pytest.Pytester, fake: FakeFaultyLlama) -> None:
    pytester.makeconftest("""
from pytest_tokperf.storage import journal
journal.Journal.discard = lambda self: None  # a subprocess: nothing else sees it
""")
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--tokperf-url", fake.url, "--tokperf-bandwidth",
                                           "30GB/s", "--tokperf-db", "r.db")
    result.assert_outcomes(passed=2)
    (kept,) = journals(pytester.path)
    added = import_datasets(pytester.path / "r.db", [kept])
    assert (added.runs, added.results) == (0, 0)


def test_a_locked_database_is_not_called_corrupt(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.db"
    ResultStore.open(db).close()
    monkeypatch.setattr(store_mod, "BUSY_TIMEOUT_S", 0.3)
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        with pytest.raises(StorageError) as caught:
            ResultStore.open(db, check_writable=True)
    finally:
        assert locker.stdin is not None and locker.stdout is not None
        locker.stdin.close()
        locker.stdout.close()
        locker.wait()
    message = str(caught.value)
    assert "is locked by another process" in message and "do not move it" in message
    assert "Move it aside" not in message and "not a readable" not in message


def test_a_corrupt_database_is_still_called_corrupt(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16)
    with pytest.raises(StorageError, match="is not a readable SQLite results database"):
        ResultStore.open(db)


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda p: p / "out.json", "is a folder"),
    (lambda p: Path("/etc/hostname/r.json"), "its folder cannot be made"),
], ids=["folder", "under-a-file"])
def test_a_report_path_is_checked_before_measuring(
        pytester: pytest.Pytester, fake: FakeFaultyLlama, make: object, fragment: str) -> None:
    (pytester.path / "out.json").mkdir()
    target = make(pytester.path)  # type: ignore[operator]
    result = run(pytester, fake, "--tokperf-report", str(target))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--tokperf-report {str(target)!r}*{fragment}*"])
    assert not any(method == "POST" for method, _, _ in fake.requests), "measured anyway"


def test_enospc_from_the_journal_falls_back_to_the_temporary_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tokperf.environment import collect_run_info
    from pytest_tokperf.storage import journal

    real = journal.Journal._append
    calls: list[Path] = []

    def full_beside_db(self: journal.Journal, text: str) -> None:
        calls.append(self.path)
        if self.path.parent == tmp_path:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, text)

    monkeypatch.setattr(journal.Journal, "_append", full_beside_db)
    monkeypatch.setattr(journal.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    kept = journal.Journal.beside(tmp_path / "r.db", collect_run_info())
    kept.append({"x": 1})
    assert kept.paths == [tmp_path / "tmp" / kept.path.name]
    assert kept.path.read_text().count("\n") == 2
