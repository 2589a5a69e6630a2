"""A throwaway PostgreSQL cluster for the tests: initdb and pg_ctl in a temporary folder.

``pg_cluster`` (session scope) starts one server on a Unix socket in its folder and on
127.0.0.1 at a free port, and stops it (``pg_ctl stop -m immediate``) at the end;
``pg_url`` (per test) creates a fresh database and gives its URL for the role
``tokperf`` (password ``PG_PASSWORD``, set in ``PGPASSWORD`` for the test, never in the
URL). initdb and postgres refuse to run as root: as root they run as the ``postgres``
system user (``runuser``), and the folder is that user's. A machine without the server
binaries skips these tests, saying so; ``.ci/install`` installs them.

The fixtures are imported into ``tests/conftest.py``, so every test folder has them.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_tokperf.launch.process import free_port

PG_USER = "tokperf"
PG_PASSWORD = "pg-SECRET-7d41e2"
_names = itertools.count()


def server_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl: by PATH, else the newest
    /usr/lib/postgresql/*/bin; None when there is none."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    return versions[-1].parent if versions else None


@dataclass
class PgCluster:
    """A running throwaway server; ``admin`` runs SQL as its superuser over the socket."""

    bin_dir: Path
    folder: Path
    port: int
    as_user: str | None

    @property
    def socket_dir(self) -> Path:
        return self.folder / "socket"

    def _run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if self.as_user is not None:
            command = ["runuser", "-u", self.as_user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=120,
                              check=False)

    def start(self) -> None:
        pwfile = self.folder / "pwfile"
        pwfile.write_text("postgres\n", encoding="utf-8")
        self._own(pwfile)
        data = self.folder / "data"
        self.socket_dir.mkdir()
        self._own(self.socket_dir)
        done = self._run(str(self.bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                         "--auth-local=trust", "--auth-host=scram-sha-256",
                         f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8")
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr or done.stdout}")
        options = (f"-k {self.socket_dir} -p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c fsync=off -c max_connections=100")
        done = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(data), "-l",
                         str(self.folder / "server.log"), "-o", options, "-w", "-t", "60",
                         "start")
        if done.returncode != 0:
            log = (self.folder / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr or done.stdout} {log}")
        self.admin(f"CREATE ROLE {PG_USER} LOGIN PASSWORD '{PG_PASSWORD}' CREATEDB")

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.folder / "data"), "-m",
                  "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def _own(self, path: Path) -> None:
        if self.as_user is not None:
            entry = pwd.getpwnam(self.as_user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def admin(self, sql: str, dbname: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(host=str(self.socket_dir), port=self.port, user="postgres",
                             dbname=dbname, autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        name = f"tokperf_{os.getpid()}_{next(_names)}"
        self.admin(f"CREATE DATABASE {name} OWNER {PG_USER}")
        return name

    def url(self, dbname: str, *, password: bool = False) -> str:
        secret = f":{PG_PASSWORD}" if password else ""
        return f"postgresql://{PG_USER}{secret}@127.0.0.1:{self.port}/{dbname}"


def start_cluster() -> PgCluster:
    """Start a cluster in a new temporary folder (skips the test when no server exists)."""
    bin_dir = server_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in "
                    "/usr/lib/postgresql/*/bin: run .ci/install (apt-get install postgresql)")
    as_user = "postgres" if os.geteuid() == 0 else None
    folder = Path(tempfile.mkdtemp(prefix="tokperf-pg-"))
    cluster = PgCluster(bin_dir, folder, free_port(), as_user)
    cluster._own(folder)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh, empty database's URL (no password in it: ``PGPASSWORD`` holds it)."""
    monkeypatch.setenv("PGPASSWORD", PG_PASSWORD)
    return pg_cluster.url(pg_cluster.create_database())
