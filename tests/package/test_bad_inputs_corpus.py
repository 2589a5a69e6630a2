"""Bad input and bad luck, tried as a user would: one clear line each, bounded, nothing lost.

* options and URLs (``tests/support/bad_options.py``): ``tokperf`` verbs and ``pytest``
  sessions with bad options, ini values, marker arguments, model files, URLs and report
  paths end with a non-zero status and one line naming the value, never a traceback;
* faults (``tests/support/fault_corpus.py``): each misbehaving fake engine ends within its
  own limit + 2 s with one clear line and no secret in it (``tests/transport/
  test_faults_corpus.py`` checks the words without the clock);
* storage: a full disk and a database locked by another process lose no measured result
  (each is in the database or in an importable journal), with no traceback;
* processes: nothing is left after stop() of a wrapper script or after the helper runs of a
  binary that never answers.
No engine is needed: every server here is a fake on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.storage.test_storage_journal import BENCH  # the same two-test session
from tests.support.bad_options import PYTEST, Case, cases
from tests.support.fault_corpus import PASSWORD, SECRET, Fault, fault_corpus

pytestmark = pytest.mark.slow

with tempfile.TemporaryDirectory() as _name:
    NAMES = [case.name for case in cases(Path(_name))]

LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Case]]]:
    """The option cases and their files; ``locked.db`` held by another process throughout."""
    tmp = tmp_path_factory.mktemp("bad-options")
    by_name = {case.name: case for case in cases(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(tmp / "locked.db")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    try:
        yield tmp, by_name
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.stdout.close()
        proc.wait()


@pytest.mark.parametrize("name", NAMES)
def test_each_bad_option_ends_in_one_line_naming_the_value(
        name: str, corpus: tuple[Path, dict[str, Case]]) -> None:
    tmp, by_name = corpus
    case = by_name[name]
    work = Path(tempfile.mkdtemp(dir=tmp))
    (work / "test_bad.py").write_text(case.test)
    if case.ini:
        (work / "pytest.ini").write_text(f"[pytest]\n{case.ini}\n")
    done = subprocess.run(case.argv, check=False, cwd=work, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **dict(case.env)})
    text = done.stdout + done.stderr
    errors = [line for line in text.splitlines()
              if line.startswith(("ERROR: ", "tokperf ", "E   ")) or "Error:" in line
              or "error" in line.lower() and case.value in line]
    line = next((e for e in errors if case.value in e), errors[0] if errors else "")
    assert done.returncode not in (0, 5), text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    assert case.value in line, f"no error line names {case.value!r}:\n{text[-3000:]}"


FAULTS = fault_corpus()


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_ends_within_its_limit_plus_2_s(fault: Fault) -> None:
    from pytest_tokperf.errors import TokperfError

    box: dict[str, object] = {}
    with fault.server() as server:  # type: ignore[attr-defined]
        url = server.url

        def work() -> None:
            try:
                box["value"] = fault.call(url)
            except BaseException as exc:  # noqa: BLE001 - classified below
                box["error"] = exc

        started = time.perf_counter()
        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        thread.join(fault.limit_s + 30.0)
        took = time.perf_counter() - started
    error = box.get("error")
    text = str(error)
    assert not thread.is_alive(), f"still running {took:.1f} s in"
    assert took <= fault.limit_s + 2.0, f"took {took:.2f} s against a {fault.limit_s:g} s limit"
    assert isinstance(error, TokperfError) and "\n" not in text, repr(error)
    assert fault.expect.lower() in text.lower(), text
    assert SECRET not in text and PASSWORD not in text and "hunter2" not in text


@pytest.mark.parametrize("transport", ["stdlib", "httpx"])
def test_a_password_echoed_in_two_chunks_is_never_shown(transport: str) -> None:
    import httpx

    from pytest_tokperf.engines.llama_server.adapter import LlamaServer
    from pytest_tokperf.errors import TokperfError
    from tests.support.fake_faults import FakeFaultyLlama

    with FakeFaultyLlama("props_split_secret") as fake:
        url = fake.url.replace("http://", f"http://tokperf:{PASSWORD}@")
        engine = LlamaServer(url, timeout_s=5.0,
                             transport=httpx.HTTPTransport() if transport == "httpx" else None)
        try:
            with pytest.raises(TokperfError) as caught:
                engine.info()
        finally:
            engine.close()
    assert PASSWORD not in str(caught.value) and "hunter2" not in str(caught.value)


FULL_DISK = """
import sqlite3, pytest
from pytest_tokperf.storage import store

@pytest.fixture(autouse=True)
def _disk_full(monkeypatch):
    def full(*args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")
    monkeypatch.setattr(store.ResultStore, "add_result", full)
"""
LOCKED = """
import subprocess, sys, pytest
from pytest_tokperf.storage import store
store.BUSY_TIMEOUT_S = 1.0

@pytest.fixture(autouse=True, scope="session")
def _locker():
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, "r.db"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield
    proc.stdin.close(); proc.stdout.close(); proc.wait()

LOCKER = %r
"""


@pytest.mark.parametrize("conftest", [FULL_DISK, LOCKED % LOCKER], ids=["full disk", "locked DB"])
def test_no_measured_result_is_lost(conftest: str, tmp_path: Path) -> None:
    from pytest_tokperf.storage.exchange import import_datasets
    from pytest_tokperf.storage.store import ResultStore
    from tests.support.fake_faults import FakeFaultyLlama

    (tmp_path / "test_bench.py").write_text(BENCH)
    (tmp_path / "conftest.py").write_text(conftest)
    with FakeFaultyLlama("ok") as fake:
        done = subprocess.run([*PYTEST, "--tokperf-url", fake.url, "--tokperf-bandwidth",
                               "30GB/s", "--tokperf-db", "r.db"], check=False, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    passed = re.search(r"(\d+) passed", text)
    measured = int(passed.group(1)) if passed else 0  # each test measures one result
    assert measured == 2, text[-3000:]
    with ResultStore.open(tmp_path / "r.db") as store:
        in_db = len(store.db.execute("SELECT id FROM results").fetchall())
    recovered = sum(import_datasets(tmp_path / "recovered.db", [journal]).results
                    for journal in tmp_path.glob("*.journal.jsonl"))
    assert in_db + recovered >= measured
    if in_db < measured:
        assert any("could not be stored" in line for line in text.splitlines()), text[-3000:]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_no_process_is_left_behind(tmp_path: Path) -> None:
    from pytest_tokperf import helper_runs as helpers
    from pytest_tokperf.launch.process import start_server

    pids = tmp_path / "pids"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text('#!/bin/sh\nsleep 300 &\necho $! >> "$1"\nwait\n')
    never = tmp_path / "never.sh"
    never.write_text(f"#!/bin/sh\nsleep 300 &\necho $! >> {pids}\nsleep 300\n")
    for script in (wrapper, never):
        script.chmod(0o755)
    for index in range(5):
        mine = tmp_path / f"pids{index}"
        server = start_server([str(wrapper), str(mine)], "http://127.0.0.1:9",
                              tmp_path / "log", mine.exists, 10.0)
        server.stop(grace_s=5.0)
    started = time.perf_counter()
    for flag in ("--help", "--version", "--list-devices"):
        helpers.run_helper([str(never), flag], 3.0)
    took = time.perf_counter() - started
    time.sleep(1.0)
    children = [int(x) for f in tmp_path.glob("pids*") for x in f.read_text().split()]
    left = [pid for pid in children if _alive(pid)]
    for pid in left:
        os.kill(pid, 9)
    assert len(children) >= 6
    assert left == []
    assert took <= 3 * 3.0 + 2.0, f"3 helper runs with a 3 s timeout took {took:.1f} s"
