"""The dataset in Datasette: ``db/metadata.json`` describes every column of a results DB,
and a real server shows the series' test ids and the environments' hardware as labels."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_tokperf.storage.exchange import import_datasets
from pytest_tokperf.storage.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
METADATA = ROOT / "db" / "metadata.json"
pytest.importorskip("datasette")


def _tables() -> dict[str, dict[str, object]]:
    tables: dict[str, dict[str, object]] = json.loads(METADATA.read_text())[
        "databases"]["results"]["tables"]
    return tables


def test_every_column_of_a_current_db_is_described(tmp_path: Path) -> None:
    with ResultStore.open(tmp_path / "results.db") as store:
        columns = {t: list(store.db.table(t).columns_dict) for t in store.db.table_names()}
    tables = _tables()
    undescribed = [f"{t}.{c}" for t, cols in columns.items() for c in cols
                   if c not in tables.get(t, {}).get("columns", {})]  # type: ignore[operator]
    assert columns and undescribed == []
    assert tables["series"]["label_column"] == "test_id"
    assert tables["environments"]["label_column"] == "hardware_name"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def datasette(tmp_path: Path) -> Iterator[str]:
    """Datasette serving db/runs (imported) as results.db on a free loopback port."""
    db = tmp_path / "results.db"
    import_datasets(db, [ROOT / "db" / "runs"])
    port = _free_port()
    log = tmp_path / "datasette.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "datasette", "serve", str(db), "-m", str(METADATA),
             "-h", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/-/versions.json", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"datasette did not start: {log.read_text()}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def test_datasette_shows_the_results_with_labels_and_units(datasette: str) -> None:
    page = httpx.get(f"{datasette}/results/results", params={"_size": 50}, timeout=30)
    page.raise_for_status()
    html = page.text
    series = re.findall(r'<td class="col-series_key[^"]*"><a href="/results/series/\w+">(.*?)</a>',
                        html)
    hardware = re.findall(r'<td class="col-environment_id[^"]*"><a href="/results/environments/'
                          r'\d+">(.*?)</a>', html)
    assert series and all(s.startswith("benchmarks/") and "::" in s for s in series)
    assert hardware and all(h and not h.isdigit() for h in hardware)
    assert "time to first token" in html  # the column descriptions
    assert re.search(r'<td class="col-ttft_s_median[^"]*">[\d.]+&nbsp;ms</td>', html)  # units
    about = httpx.get(f"{datasette}/results/environments.json", params={"_shape": "array"},
                      timeout=30).json()
    assert len(about) < len(series)  # one row per environment, not per result
