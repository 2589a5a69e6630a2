"""One DB locator: ``project_root`` is the rootdir pytest itself takes (checked against a
real ``pytest`` run), and a PostgreSQL DB's name cannot steer its journal out of
``.tokperf/``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_tokperf.environment import collect_run_info
from pytest_tokperf.errors import ConfigError, StorageError
from pytest_tokperf.storage.journal import Journal
from pytest_tokperf.storage.location import (
    PgUrl,
    default_db,
    file_name,
    local_base,
    parse_pg_url,
    project_root,
)

LAYOUTS = {
    # files (path: text) under the top folder, and the rootdir relative to it
    "an ini above beats a nearer setup.py": ({"pytest.ini": "", "a/setup.py": ""}, "."),
    "a section makes the file count": (
        {"tox.ini": "[tox]\n", "a/setup.cfg": "[metadata]\n[tool:pytest]\n"}, "a"),
    "pyproject.toml with pytest's table": (
        {"pyproject.toml": "[tool.pytest.ini_options]\n", "a/pyproject.toml": "[tool.x]\n"},
        "."),
    "a plain pyproject.toml before a nearer setup.py": (
        {"pyproject.toml": "[project]\n", "a/b/setup.py": ""}, "."),
    "setup.py when nothing else": ({"tox.ini": "[tox]\n", "a/setup.py": ""}, "a"),
    "nothing: the folder itself": ({"a/b/x.txt": ""}, "a/b"),
}


def _pytest_rootdir(start: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-p", "no:cacheprovider"],
                          cwd=start, capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r"^rootdir: (.+)$", done.stdout, re.MULTILINE)
    assert found, done.stdout + done.stderr
    return Path(found.group(1))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_project_root_is_the_rootdir_pytest_takes(layout: str, tmp_path: Path) -> None:
    files, expected = LAYOUTS[layout]
    top = tmp_path / "top"
    for name, text in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)
    start = top / "a" / "b"
    start.mkdir(parents=True, exist_ok=True)
    assert project_root(start) == (top / expected).resolve()
    assert _pytest_rootdir(start) == project_root(start)
    assert default_db(project_root(start)) == (top / expected / ".tokperf" / "results.db").resolve()


@pytest.mark.parametrize("name", ["../../x/pwned", "..", ".hidden", "a/b", "a\\b", "/etc/x",
                                  "é:*?\n"])
def test_a_db_name_maps_to_one_file_name_in_the_folder(name: str) -> None:
    safe = file_name(name)
    assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", safe), safe
    assert Path(safe).name == safe and safe not in (".", "..")
    assert file_name("results") == "results" and file_name("a_b") != file_name("a/b")


@pytest.mark.parametrize("name", ["../../x/pwned", "../../../../pwned"])
def test_a_pg_journal_is_kept_under_the_project_root_whatever_the_db_name(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "x" / "y" / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.chdir(project / "tests")
    url = parse_pg_url(f"postgresql://me@localhost/{name}")  # a legal database name
    assert url.name == name
    journal = Journal.beside(local_base(url), collect_run_info())
    journal.append({"x": 1})
    assert journal.path.parent == project / ".tokperf"
    assert {p for p in tmp_path.rglob("*") if p.is_file()} == {project / "pytest.ini",
                                                               journal.path}


def test_postgresql_without_psycopg_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_tokperf.storage.postgres import PostgresBackend

    for name in [n for n in sys.modules if n == "psycopg" or n.startswith("psycopg.")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"^--db 'postgresql://localhost/x': PostgreSQL "
                       r"support needs psycopg: pip install 'pytest-tokperf\[postgres\]'$"):
        parse_pg_url("postgresql://localhost/x", "--db")
    with pytest.raises(StorageError, match=r"needs psycopg: pip install 'pytest-tokperf"):
        PostgresBackend(PgUrl("postgresql://localhost/x"))
