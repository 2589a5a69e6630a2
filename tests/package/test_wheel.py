"""The installed wheel works: CLI verbs and a plugin session from a clean, non-editable venv.

An editable install reads files from the checkout, so it cannot see what a wheel lacks
(the hardware catalog once lived outside the package: ``tokperf predict`` exited 2 and
every Mac run broke). Here the wheel is built offline (``--no-build-isolation``),
installed with ``--no-deps`` into a fresh venv, and run from a directory outside the
checkout. The venv gets its dependencies through a ``.pth`` line naming this
environment's site-packages: no registry is needed, and this project's own editable
hook there stays inert (a ``.pth`` *line* adds a directory to ``sys.path``; the
``.pth`` files inside it are not executed), which the test checks. Every declared
dependency must be importable there, so a dependency missing from ``pyproject.toml``
would still show.

Marked ``wheel`` (about a minute on 2 cores; ``-m "not wheel"`` skips it); the plugin
session also needs the llama-server that ``tokperf install-engine llama-server`` builds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    tokperf: Path
    workdir: Path

    def run(self, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_TOKPERF")}
        env.pop("PYTHONPATH", None)
        return subprocess.run([str(a) for a in args], cwd=self.workdir, capture_output=True,
                              text=True, timeout=timeout, env=env, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next(dist.glob("pytest_tokperf-*.whl"))
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a checkout on the
    # path holds pytest_tokperf.egg-info, and pip would take it as installed already
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300, check=False, env=clean,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path"
                              "('purelib'))"], capture_output=True, text=True, check=True)
    (Path(purelib.stdout.strip()) / "tokperf_test_deps.pth").write_text(
        sysconfig.get_path("purelib") + "\n")
    workdir = base / "work"
    workdir.mkdir()
    yield Installed(wheel, python, env_dir / "bin" / "tokperf", workdir)
    shutil.rmtree(ROOT / "build", ignore_errors=True)


def test_the_wheel_ships_the_catalog(installed: Installed) -> None:
    import zipfile

    names = zipfile.ZipFile(installed.wheel).namelist()
    assert "pytest_tokperf/hardware/hardware.csv" in names
    assert "pytest_tokperf/expected/band_fit.json" in names  # predict's fitted bands
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = zipfile.ZipFile(installed.wheel).read(metadata).decode()
    assert re.search(r"^Requires-Dist: nvidia-ml-py", requires, re.MULTILINE)
    psycopg = re.findall(r"^Requires-Dist: psycopg\b.*$", requires, re.MULTILINE)
    assert 'Requires-Dist: psycopg[binary]>=3.1; extra == "postgres"' in psycopg, psycopg
    assert all("; extra ==" in line for line in psycopg), psycopg  # optional, not required


def test_the_package_comes_from_the_venv_with_every_dependency(installed: Installed) -> None:
    check = textwrap.dedent("""
        import importlib.metadata as md, re, sys
        import pytest_tokperf
        from importlib import resources
        from pytest_tokperf.hardware.catalog import CATALOG_FILE, load_catalog
        print(pytest_tokperf.__file__)
        print(resources.files("pytest_tokperf.hardware").joinpath(CATALOG_FILE))
        print(len(load_catalog()))
        for req in md.requires("pytest-tokperf") or []:
            if "extra ==" in req:
                continue
            name = re.split(r"[<>=!~; \\[]", req, maxsplit=1)[0]
            md.version(name)  # raises PackageNotFoundError when a dependency is missing
        print("deps ok")
    """)
    done = installed.run(installed.python, "-c", check)
    assert done.returncode == 0, done.stderr
    where, catalog, rows, deps = done.stdout.splitlines()[-4:]
    venv_dir = str(installed.python.parent.parent)
    assert where.startswith(venv_dir) and catalog.startswith(venv_dir), (where, catalog)
    assert int(rows) > 100 and deps == "deps ok"


def test_cli_verbs_from_the_installed_wheel(installed: Installed) -> None:
    predicted = installed.run(installed.tokperf, "predict", "--hardware", "1000GB/s",
                              "--params", "8e9", "--quant", "Q4_K_M")
    assert predicted.returncode == 0, predicted.stderr
    assert "decode ceiling: 206.6 tok/s (1000 GB/s / 4.84 GB per token" in predicted.stdout
    catalog = installed.run(installed.tokperf, "predict", "--hardware", "RTX 4090",
                            "--params", "8e9", "--quant", "4.5")
    assert catalog.returncode == 0, catalog.stderr
    assert catalog.stdout.startswith("NVIDIA GeForce RTX 4090: 1008 GB/s")
    model = installed.workdir / "m.gguf"
    made = installed.run(installed.tokperf, "make-model", "--preset", "test", "-o", model)
    assert made.returncode == 0, made.stderr
    assert model.stat().st_size > 1_000_000
    verbs = installed.run(installed.python, "-c", (
        "from pytest_tokperf.cli.main import build_parser\n"
        "sub = next(a for a in build_parser()._actions if a.dest == 'verb')\n"
        "print(' '.join(sub.choices))"))
    assert verbs.returncode == 0, verbs.stderr
    names = verbs.stdout.split()
    assert {"predict", "make-model", "bench", "install-engine"} <= set(names)
    assert installed.run(installed.tokperf, "--help").returncode == 0
    for verb in names:
        helped = installed.run(installed.tokperf, verb, "--help")
        assert helped.returncode == 0 and "usage: tokperf" in helped.stdout, (verb, helped.stderr)


def test_plugin_session_from_the_installed_wheel(installed: Installed) -> None:
    from pytest_tokperf.builds.install import installed_llama_server

    if installed_llama_server() is None and shutil.which("llama-server") is None:
        pytest.skip("no llama-server: run `tokperf install-engine llama-server` first")
    (installed.workdir / "test_smoke.py").write_text(textwrap.dedent("""
        def test_decode(tok_bench):
            result = tok_bench(prompt_tokens=8, generate_tokens=8)
            assert result.decode_tokens_per_s > 0
            assert result.ceiling is not None
    """))
    db = installed.workdir / "results.db"
    session = installed.run(
        installed.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_smoke.py",
        "--tokperf-engine", "llama-server", "--tokperf-model", "test",
        "--tokperf-repetitions", "1", "--tokperf-warmup", "0", "--tokperf-threads", "1",
        "--tokperf-busy", "judge",  # beside the suite's neighbours a busy call is no skip
        "--tokperf-db", db, timeout=300)
    assert session.returncode == 0, session.stdout[-4000:] + session.stderr[-2000:]
    assert "1 passed" in session.stdout
    import sqlite3

    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT e.engine_backend, r.ceiling_decode_tokens_per_s FROM "
                              "results r JOIN environments e ON e.id = r.environment_id").fetchall()
    assert len(stored) == 1 and stored[0][1] > 0
