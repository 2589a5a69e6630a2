"""compare-builds and bisect with a PostgreSQL results DB (real llama-server behind wrapper
"releases"): the sessions' results go to the server and nowhere else; bisect's journal goes
to ``.tokperf/postgresql-<dbname>.builds.jsonl`` in the current folder, and the same
command again reads both back and measures nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_tokperf.cli.main import main
from tests.versions.test_bisect import (
    PAIRED_ARGS,
    SELECTION,
    SESSION_ARGS,
    fake_releases,
    two_builds,
)

pytestmark = pytest.mark.engine


def _journal(tmp_path: Path, pg_url: str) -> Path:
    return tmp_path / ".tokperf" / f"postgresql-{pg_url.rsplit('/', 1)[1]}.builds.jsonl"


def _runs(pg_url: str) -> int:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM runs").fetchone()  # type: ignore[misc]
    return int(count)


def test_compare_builds_paired_on_postgres(server_binary: Path, tmp_path: Path, pg_url: str,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    a, b = two_builds(tmp_path, server_binary, monkeypatch)
    args = ["compare-builds", a, b, "--rounds", "1", "--metric", "ttft", "--db", pg_url,
            "--json", "--", "test_selection.py", *PAIRED_ARGS]
    assert main(args) == 0
    found = json.loads(capsys.readouterr().out)
    (ttft,) = found["results"]
    assert ttft["comparison"]["verdict"] == "regression" and ttft["pairs"] == 6
    # the session wrote to the server, not to the default SQLite file beside it (it did:
    # the paired session was started without the URL, so pytest fell back to its default)
    assert not (tmp_path / ".tokperf" / "results.db").exists()
    assert _runs(pg_url) == 1


def test_bisect_on_postgres_finds_the_step_and_resumes(server_binary: Path, tmp_path: Path,
                                                       pg_url: str,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_selection.py").write_text(SELECTION)
    folder = fake_releases(tmp_path / "releases", server_binary, 4, slow_from=3)
    args = ["bisect", "--good", "1", "--bad", "4", "--binaries", str(folder), "--metric", "ttft",
            "--db", pg_url, "--json", "--", "test_selection.py", *SESSION_ARGS]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["status"], result["last_good"], result["first_bad"]) == ("found", 2, 3)
    journal = _journal(tmp_path, pg_url).read_text().splitlines()
    stored = _runs(pg_url)
    assert stored == len(journal) > 0
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out) == result
    assert _runs(pg_url) == stored
