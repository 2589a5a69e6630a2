"""Hostile import files, identifiers that become file names, keyword DSNs and a disk with
no room: each refused in one line or written only where asked, no secret shown, no DB
made or called corrupt on the way.

Before: random bytes, ``"run": [1, 2]`` and a 3 GiB sparse file gave tracebacks, a FIFO
hung ``tokperf import``, a failed import left a new DB behind, skipped files and runs
went unmentioned ("added 0 runs"), a run id ``../../x`` was imported and then written
outside ``save-reference -d out/``, ``host=... password=...`` became an SQLite file of
that name with the password printed, and a full disk read "Move it aside".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.cli.main import main
from pytest_tokperf.environment import collect_run_info
from pytest_tokperf.errors import StorageError
from pytest_tokperf.storage.exchange import (
    Added,
    dump_run,
    import_datasets,
    write_reference_run,
)
from pytest_tokperf.storage.journal import Journal
from pytest_tokperf.storage.location import PgUrl, db_location, local_base, named_file
from pytest_tokperf.storage.store import ResultStore
from tests.support.storage_factory import make_result, make_run, record_kwargs
from tests.transport.test_engines_faults import bounded

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-Pw"


def fill(db: Path, run_id: str = "run-a", n: int = 2) -> None:
    with ResultStore.open(db) as store:
        store.begin_run(make_run(run_id))
        for i in range(n):
            store.record(run_id, f"t{i}", make_result(), **record_kwargs())
        store.finish_run(run_id)


@pytest.fixture(scope="module")
def run_lines(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    db = tmp_path_factory.mktemp("src") / "a.db"
    fill(db)
    return [json.loads(line) for line in dump_run(db, "run-a").splitlines()]


def one_line_refusal(db: Path, path: Path) -> str:
    with pytest.raises(StorageError) as caught:
        bounded(lambda: import_datasets(db, [path]), 5.0)
    message = str(caught.value)
    assert message and "\n" not in message and len(message) < 600, message
    assert not db.exists(), "a failed import left a new DB behind"
    return message


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def changed(lines: list[dict[str, Any]], where: str, key: str, value: Any) -> list[Any]:
    copy = json.loads(json.dumps(lines))
    if where == "run" and key is None:
        copy[0]["run"] = value
    elif where == "run":
        copy[0]["run"][key] = value
    elif where == "series":
        copy[1]["series"] = value
    else:
        copy[1][where][key] = value
    return copy


HOSTILE = {
    "run a list": (("run", None, [1, 2]), r"the run is \[1, 2\], not an object of runs"),
    "run id out of the folder": (("run", "run_id", "../../../x/pwned"),
                                 r"run id '../../../x/pwned' may hold only letters"),
    "run id absolute": (("run", "run_id", "/etc/x"), r"run id '/etc/x' may hold only"),
    "run id NUL": (("run", "run_id", "a\x00b"), r"holds a NUL character|may hold only"),
    "unknown column": (("result", "pwned", 1), r"has column 'pwned', which the results table"),
    "text for a number": (("result", "ttft_s_median", "fast"),
                          r"column 'ttft_s_median' is 'fast', not a number"),
    "2^70": (("result", "prompt_tokens", 2**70), r"outside the 64-bit range"),
    "NUL in text": (("environment", "engine_name", "llama\x00server"), r"NUL character"),
    "lone surrogate": (("environment", "engine_version", "\ud800"), r"lone UTF-16 surrogate"),
    "settings a list": (("environment", "engine_settings", [1, 2]),
                        r"'engine_settings' is \[1, 2\], not an object of text values"),
    "required null": (("result", "test_id", None), r"'test_id' is null"),
    "series deep": (("series", None, "[" * 50_000 + "]" * 50_000), r"nested too deeply"),
    "series unknown field": (("series", None, json.dumps({"x": 1})),
                             r"series text: .*unexpected keyword argument 'x'"),
    "series a number": (("series", None, 5), r"series is 5, not the series text"),
}


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE)
def test_a_hostile_run_file_is_refused_in_one_line_before_any_db(
    tmp_path: Path, run_lines: list[dict[str, Any]], case: tuple[tuple[Any, ...], str]
) -> None:
    (where, key, value), pattern = case
    path = write_lines(tmp_path / "run.jsonl", changed(run_lines, where, key, value))
    message = one_line_refusal(tmp_path / "new.db", path)
    assert "run.jsonl:" in message and "not a tokperf run line" in message
    assert re.search(pattern, message), message


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
@pytest.mark.parametrize("content", [os.urandom(4096), b"\xff" * 100, b"\x00" * 100,
                                     b'{"format": "tokperf-run/1", "run": [1, 2]}\n',
                                     b'[{"run_id": [1, 2]}]', b"[1, 2]", b"{}"],
                         ids=["random", "ff", "zeros", "run list", "export list", "numbers",
                              "object"])
def test_any_bytes_are_refused_in_one_line(tmp_path: Path, suffix: str, content: bytes) -> None:
    path = tmp_path / f"in{suffix}"
    path.write_bytes(content)
    try:
        added = bounded(lambda: import_datasets(tmp_path / "new.db", [path]), 5.0)
    except StorageError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        assert not (tmp_path / "new.db").exists()
        return
    assert added == Added() and not (tmp_path / "new.db").exists()  # a file of no runs


def test_a_sparse_giant_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "giant.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(3 << 30)
    message = one_line_refusal(tmp_path / "new.db", path)
    assert "holds 3221225472 bytes, more than the" in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "run.jsonl")
    assert "is a FIFO" in one_line_refusal(tmp_path / "new.db", tmp_path / "run.jsonl")
    folder = tmp_path / "runs"
    folder.mkdir()
    os.mkfifo(folder / "x.jsonl")
    added = bounded(lambda: import_datasets(tmp_path / "new.db", [folder]), 5.0)
    assert any("is a FIFO" in note for note in added.skipped)


def test_one_bad_file_imports_nothing_and_makes_no_db(
    tmp_path: Path, run_lines: list[dict[str, Any]]
) -> None:
    good = write_lines(tmp_path / "good.jsonl", run_lines)
    bad = write_lines(tmp_path / "bad.jsonl", changed(run_lines, "result", "verdict", 5))
    with pytest.raises(StorageError, match=r"bad.jsonl:2: .*'verdict' is 5, not text"):
        import_datasets(tmp_path / "new.db", [good, bad])
    assert not (tmp_path / "new.db").exists()
    assert main(["import", "--db", str(tmp_path / "new.db"), str(good), str(bad)]) == 2
    assert not (tmp_path / "new.db").exists()


def test_what_an_import_skips_is_said_with_why(
    tmp_path: Path, run_lines: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "runs"
    (folder / "older").mkdir(parents=True)
    write_lines(folder / "run-a.jsonl", run_lines)
    (folder / "README.md").write_text("# runs\n")
    (folder / "empty.jsonl").write_text("\n")
    db = tmp_path / "r.db"
    assert main(["import", "--db", str(db), str(folder)]) == 0
    out = capsys.readouterr().out
    assert "added 1 runs, 2 results, 6 samples" in out
    assert "skipped" in out and "README.md" in out and "older" in out
    assert "empty.jsonl': holds no runs" in out
    assert main(["import", "--db", str(db), str(folder / "run-a.jsonl"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"] == 0 and printed["skipped"] == [
        f"run 'run-a' from {folder / 'run-a.jsonl'}: already in the DB (2 results)"]
    empty_db = tmp_path / "never.db"
    assert main(["import", "--db", str(empty_db), str(folder / "empty.jsonl")]) == 0
    assert not empty_db.exists() and "holds no runs" in capsys.readouterr().out


IDENTIFIERS = ["..", ".", "../../../outside/pwned", "/abs/pwned", "a/b", "a\\b", "a\x00b",
               "é" * 200, "x" * 5000, "", "-rf", ".hidden", "CON", "\n"]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize("identifier", IDENTIFIERS)
def test_an_identifier_names_a_file_only_inside_the_folder_asked(
    tmp_path: Path, identifier: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "a" / "b" / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.chdir(project / "tests")
    before = _files(tmp_path)
    # a PostgreSQL DB of that name: its journal, named after the DB and the run
    journal = Journal.beside(local_base(PgUrl(f"postgresql://h/{identifier}")),
                             collect_run_info())
    journal.append({"x": 1})
    # an SQLite DB's journal for a run of that id
    run = replace(collect_run_info(), run_id=identifier)
    beside = Journal.beside(project / ".tokperf" / "results.db", run)
    beside.append({"x": 1})
    # save-reference of a run of that id
    db = project / "r.db"
    fill(db, identifier, 1)
    out = project / "out"
    target = write_reference_run(db, identifier, out)
    new = _files(tmp_path) - before - {db.with_name(db.name + x) for x in ("-wal", "-shm")}
    assert new == {journal.path, beside.path, db, target}, new
    assert journal.path.parent == beside.path.parent == project / ".tokperf"
    assert target.parent == out and target.name.endswith(".jsonl")
    assert all(len(p.name.encode()) <= 255 for p in new), new  # NAME_MAX
    assert json.loads(target.read_text().splitlines()[0])["run"]["run_id"] == identifier


def test_save_reference_writes_no_file_through_a_planted_link(tmp_path: Path) -> None:
    db, out = tmp_path / "r.db", tmp_path / "out"
    fill(db, "run-a", 1)
    out.mkdir()
    (out / "run-a.jsonl").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(StorageError, match="is a symbolic link: save-reference writes only"):
        write_reference_run(db, "run-a", out)
    assert not (tmp_path / "elsewhere.txt").exists()
    assert named_file(out, "../x", suffix=".jsonl").parent == out


@pytest.mark.parametrize("dsn", [
    f"host=127.0.0.1 port=1 dbname=tok user=me password={SECRET} connect_timeout=2",
    f"dbname=tok password='{SECRET}' host=127.0.0.1 port=1",
    f"postgresql://me:{SECRET}@/tok?host=127.0.0.1&port=1&sslpassword={SECRET}",
])
def test_a_keyword_dsn_is_a_postgresql_db_and_its_password_is_never_shown(
    tmp_path: Path, dsn: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    location = db_location(dsn)
    assert isinstance(location, PgUrl) and location.name == "tok"
    assert SECRET not in str(location) and SECRET not in repr(location)
    assert main(["history", "--db", dsn]) == 2
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err and "cannot connect" in out.err
    assert list(tmp_path.iterdir()) == [], "a file named after the DSN was written"


FULL_DISK = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))  # no room for the 32 KiB -shm
from pytest_tokperf.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE as a full disk")
@pytest.mark.parametrize("verb", [["history", "--db"], ["import", "--db"]])
def test_no_room_for_the_shm_file_says_the_db_is_intact(
    tmp_path: Path, run_lines: list[dict[str, Any]], verb: list[str]
) -> None:
    db = tmp_path / "r.db"
    fill(db)
    before = db.read_bytes()
    args = [*verb, str(db)] if verb[0] == "history" else [
        *verb, str(db), str(write_lines(tmp_path / "x.jsonl", changed(
            run_lines, "run", "run_id", "run-b")))]
    done = subprocess.run([sys.executable, "-c", FULL_DISK, *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    text = done.stdout + done.stderr
    assert done.returncode == 2 and "Traceback" not in text, text
    assert "disk or folder is full or read-only" in text and "itself is intact" in text, text
    assert "Move it aside" not in text
    assert db.read_bytes() == before


def test_a_keyword_dsn_reaches_postgresql_with_its_password_unshown(
    pg_cluster: Any, run_lines: list[dict[str, Any]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.postgres import PG_PASSWORD, PG_USER

    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.chdir(tmp_path)
    dsn = (f"host=127.0.0.1 port={pg_cluster.port} dbname={pg_cluster.create_database()} "
           f"user={PG_USER} password='{PG_PASSWORD}'")
    path = write_lines(tmp_path / "run.jsonl", run_lines)
    assert main(["import", "--db", dsn, str(path)]) == 0
    assert main(["history", "--db", dsn]) == 0
    out = capsys.readouterr()
    assert "added 1 runs, 2 results" in out.out and "t0" in out.out
    assert PG_PASSWORD not in out.out + out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


@pytest.mark.parametrize("content", [os.urandom(2048), b"[" * 100_000 + b"]" * 100_000,
                                     b"\n".join([b"[" * 5000 + b"]" * 5000] * 2), "fifo",
                                     "sparse"],
                         ids=["random", "deep json", "deep jsonl", "fifo", "sparse giant"])
def test_llama_bench_output_is_read_bounded_or_refused_in_one_line(
    tmp_path: Path, content: bytes | str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / ("out.jsonl" if content != b"[" * 100_000 + b"]" * 100_000 else "o.json")
    if content == "fifo":
        os.mkfifo(path)
    elif content == "sparse":
        with open(path, "wb") as fh:
            fh.truncate(3 << 30)
    else:
        path.write_bytes(content)  # type: ignore[arg-type]
    db = tmp_path / "new.db"
    assert bounded(lambda: main(["import-llama-bench", str(path), "--db", str(db)]), 5.0) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err, err
    assert not db.exists(), "a refused llama-bench import made a DB"


def test_save_reference_of_a_run_id_with_dots_writes_inside_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = tmp_path / "r.db", tmp_path / "deep" / "out"
    fill(db, "../../../pwned", 1)  # as a merge from another tool's DB could store it
    before = _files(tmp_path)
    assert main(["save-reference", "--db", str(db), "-d", str(out)]) == 0
    [written] = [Path(line) for line in capsys.readouterr().out.splitlines()]
    assert written.parent == out and _files(tmp_path) - before - {
        db.with_name(db.name + x) for x in ("-wal", "-shm")} == {written}
