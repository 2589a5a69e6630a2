"""Bad input and bad luck, tried as a user would: one clear line each, bounded, nothing lost.

Six parts, each printing one line per case and a count (issue 24's targets):

- faults: misbehaving fake engines on 127.0.0.1 (stalls, trickles, endless or huge
  bodies, streams past n_predict or cut short or cut mid-chunk, wrong engines, TLS on an
  http port, an https engine and HTTP proxies that trickle their answer's head),
  each through both readers where both apply: bounded = ended within its own limit
  + 2 s with one line (no traceback);
- hostile GGUFs: ``bench_gguf``'s corpus (crafted counts, block counts, a FIFO),
  each in a subprocess: read or refused within 2 s and 200 MB;
- options and URLs: ``tokperf`` verbs and ``pytest`` sessions with bad options, ini
  values, marker arguments, model files, URLs and report paths (no engine needed):
  a one-line error naming the value, never a traceback;
- storage: a full disk and a database locked by another process during a session:
  measured results that are neither in the database nor in an importable journal;
- processes: what is left after stop() of a wrapper script and after helper runs of a
  binary that never answers;
- secrets: an API key or URL password shown in any message (whole or split).

    .venv/bin/python benchmarks/perf/bench_bad_inputs.py [--only faults,gguf,options,storage,processes]
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.support: the fault corpus and fakes the suite uses

TOKPERF = [sys.executable, "-m", "pytest_tokperf.cli.main"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
TEST = "def test_x(tok_bench):\n    tok_bench(prompt_tokens=8, generate_tokens=4)\n"
URL = ["--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", "off"]
STARTED = ["--tokperf-engine", "llama-server", "--tokperf-server-bin", "/bin/true"]
"""A started llama-server whose binary exists, so the model file is what is checked."""


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    value: str
    """A fragment the error line must name (the bad value)."""
    ini: str = ""
    test: str = TEST
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set for the run."""


def cases(tmp: Path) -> list[Case]:
    junk = tmp / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 not a model")
    huge = tmp / "huge.gguf"
    huge.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little")
                     + bytes(16))
    notdb = tmp / "notdb.db"
    notdb.write_text("hello")
    fifo = tmp / "fifo.gguf"
    os.mkfifo(fifo)
    layers = tmp / "layers.gguf"
    from tests.support.gguf_bytes import QT, kv_str, kv_u32, write_tensors

    write_tensors(layers, [kv_str("general.architecture", "llama"),
                           kv_u32("llama.block_count", 2**32 - 1)],
                  [("output_norm.weight", [8], QT.F32)])
    nested = tmp / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    nested_lines = tmp / "nested.jsonl"
    nested_lines.write_text("[" * 100_000 + "]" * 100_000)
    locked = tmp / "locked.db"
    sqlite3.connect(locked).close()
    out: list[Case] = []
    for flag, value in [
        ("--tokperf-request-timeout", "inf"), ("--tokperf-request-timeout", "-1"),
        ("--tokperf-idle-timeout", "0"), ("--tokperf-startup-timeout", "soon"),
        ("--tokperf-port", "70000"), ("--tokperf-port", "0"), ("--tokperf-threads", "0"),
        ("--tokperf-ctx-size", "lots"), ("--tokperf-parallel", "-2"),
        ("--tokperf-repetitions", "0"), ("--tokperf-warmup", "-1"),
        ("--tokperf-min-effect", "50"), ("--tokperf-min-effect", "0"),
        ("--tokperf-min-efficiency", "2"), ("--tokperf-agreement", "nan"),
        ("--tokperf-bandwidth", "fast"), ("--tokperf-bandwidth", "-5GB/s"),
        ("--tokperf-device", "tpu:0"), ("--tokperf-baseline", "nope.db"),
        ("--tokperf-baseline", "engine="), ("--tokperf-engine", "llamaserver"),
        ("--tokperf-api-key-env", "sk-123"), ("--tokperf-speculative-url", "localhost:1"),
        ("--tokperf-bandwidth", "8Tb/s"), ("--tokperf-bandwidth", "1008Gb/s"),
        ("--tokperf-bandwidth", "100Gbps"), ("--tokperf-bandwidth", "1e-30GB/s"),
        ("--tokperf-bandwidth", "1e30GB/s"), ("--tokperf-bandwidth", "0.01"),
        ("--tokperf-bandwidth", "200TB/s"), ("--tokperf-bandwidth", "nan"),
        ("--tokperf-bandwidth", "inf"), ("--tokperf-request-timeout", "1e309"),
        ("--tokperf-idle-timeout", "nan"), ("--tokperf-startup-timeout", "0"),
        ("--tokperf-max-body", "1"), ("--tokperf-max-body", "lots"),
        ("--tokperf-max-body", "99GiB"), ("--tokperf-threads", "1e3"),
        ("--tokperf-ctx-size", "-1"), ("--tokperf-parallel", "0x10"),
        ("--tokperf-repetitions", "1.5"), ("--tokperf-target-interval", "2"),
        ("--tokperf-min-repetitions", "1"), ("--tokperf-max-cv", "-0.1"),
        ("--tokperf-agreement", "-1"), ("--tokperf-device", "cuda:-1"),
        ("--tokperf-device", "tpu"), ("--tokperf-engine-version", "latest"),
        ("--tokperf-engine", "LLAMA-SERVER"), ("--tokperf-baseline", "engine"),
        ("--tokperf-fail-on-regression", "maybe"),
        # a value after a space that starts with '-': pytest's parser took it for an option
        ("--tokperf-max-body", "-8MiB"), ("--tokperf-request-timeout", "-inf"),
        ("--tokperf-idle-timeout", "-nan"), ("--tokperf-min-efficiency", "-0.5"),
        ("--tokperf-columns", "-5"), ("--tokperf-startup-timeout", "-1e3"),
        # empty, whitespace, unicode, units
        ("--tokperf-bandwidth", ""), ("--tokperf-bandwidth", " "),
        ("--tokperf-bandwidth", "1,008GB/s"),
        ("--tokperf-bandwidth", "1008GB/s/s"), ("--tokperf-agreement", "5%"),
        ("--tokperf-min-effect", "5%"), ("--tokperf-max-body", "8 MiB/s"),
        ("--tokperf-device", "cuda:0 cuda:1"), ("--tokperf-api-key-env", ""),
        ("--tokperf-threads", "99999"), ("--tokperf-columns", "59"),
        ("--tokperf-target-interval", "0"), ("--tokperf-max-repetitions", "0"),
        ("--tokperf-ab-min-effect", "1"), ("--tokperf-baseline-engine-version", "latest"),
        ("--tokperf-engine", ""),
    ]:
        out.append(Case(f"pytest {flag} {value}", [*PYTEST, flag, value, *URL], value))
    out += [
        Case("pytest --tokperf-bandwidth=-5GB/s", [*PYTEST, "--tokperf-bandwidth=-5GB/s", *URL],
             "-5GB/s"),
        Case("pytest --tokperf-url ftp://x", [*PYTEST, "--tokperf-url", "ftp://x"], "ftp://x"),
        *[Case(f"pytest --tokperf-url {url!r}", [*PYTEST, "--tokperf-url", url, "--tokperf-db",
                                               "off"], shown)
          for url, shown in [("http://[::1", "http://[::1"),
                             ("http://127.0.0.1:99999", "99999"),
                             ("http://127.0.0.1:8080\r\n", "127.0.0.1:8080"),
                             ("http://127.0.0.1 :8080", "127.0.0.1 :8080"),
                             ("http://127.0.0.1:0", "127.0.0.1:0"),
                             ("http://host:port", "host:port"), ("http://", "http://"),
                             ("127.0.0.1:8080", "127.0.0.1:8080"), ("", "''"),
                             ("http://user:pw@[::1", "[::1")]],
        Case("pytest --tokperf-bandwidth '1008GB/s' + zero-width space",
             [*PYTEST, *URL, "--tokperf-bandwidth", "1008GB/s\u200b"], "1008GB/s\\u200b"),
        Case("pytest --tokperf-server-arg --flash-attn",
             [*PYTEST, *URL, "--tokperf-server-arg", "--flash-attn"], "--flash-attn"),
        *[Case(f"pytest --tokperf-url {url!r}", [*PYTEST, "--tokperf-url", url, "--tokperf-db",
                                               "off"], shown)
          for url, shown in [("file:///etc/passwd", "file:///etc/passwd"),
                             ("javascript:alert(1)", "javascript:alert(1)"),
                             ("http://:8080", "http://:8080"),
                             ("http://127.0.0.1:-1", "127.0.0.1:-1"),
                             ("http://127.0.0.1:8080\t", "127.0.0.1:8080"),
                             ("http://user:pw@127.0.0.1:99999", "99999")]],
        Case("pytest --tokperf-baseline-url ftp://x", [*PYTEST, *URL, "--tokperf-baseline-url",
             "ftp://x"], "ftp://x"),
        Case("pytest --tokperf-baseline-url http://[::1", [*PYTEST, *URL,
             "--tokperf-baseline-url", "http://[::1"], "[::1"),
        Case("env PYTEST_TOKPERF_URL=http://[::1", [*PYTEST, "--tokperf-db", "off"], "[::1",
             env=(("PYTEST_TOKPERF_URL", "http://[::1"),)),
        Case("env PYTEST_TOKPERF_BANDWIDTH=8Tb/s", [*PYTEST, *URL], "8Tb/s",
             env=(("PYTEST_TOKPERF_BANDWIDTH", "8Tb/s"),)),
        Case("env PYTEST_TOKPERF_MAX_BODY=-1", [*PYTEST, *URL], "-1",
             env=(("PYTEST_TOKPERF_MAX_BODY", "-1"),)),
        Case("ini tokperf_bandwidth = -5GB/s", [*PYTEST, *URL], "-5GB/s",
             ini="tokperf_bandwidth = -5GB/s"),
        Case("ini tokperf_request_timeout = inf", [*PYTEST, *URL], "inf",
             ini="tokperf_request_timeout = inf"),
        *[Case(f"marker {kwargs}", [*PYTEST, *URL], shown,
               test=f"import pytest\n@pytest.mark.tokperf({kwargs})\n" + TEST)
          for kwargs, shown in [("min_efficiency=1.6", "1.6"), ("depth_tokens=-1", "-1"),
                                ("prompt_tokens=0", "prompt_tokens"),
                                ("cached_prefix_tokens='x'", "'x'"), ("chat=2", "chat"),
                                ("warmup=-1", "-1"), ("repetitions=True", "True"),
                                ("repetitions=float('nan')", "nan")]],
        Case("tokperf bench --bandwidth -5GB/s", [*TOKPERF, "bench", "--bandwidth", "-5GB/s",
             "--url", "http://127.0.0.1:9"], "-5GB/s"),
        Case("tokperf bench --warmup -1e3", [*TOKPERF, "bench", "--warmup", "-1e3", "--url",
             "http://127.0.0.1:9"], "-1e3"),
        Case("tokperf predict --hardware -5GB/s", [*TOKPERF, "predict", "--hardware", "-5GB/s",
             "--params", "8e9"], "-5GB/s"),
        Case("pytest --tokperf-speculative-url http://[::1", [*PYTEST, *URL,
             "--tokperf-speculative-url", "http://[::1"], "[::1"),
        Case("pytest --tokperf-model missing.gguf --tokperf-url", [*PYTEST, *URL,
             "--tokperf-model", "missing.gguf"], "missing.gguf"),
        Case("pytest --tokperf-model <folder> --tokperf-url", [*PYTEST, *URL,
             "--tokperf-model", str(tmp)], str(tmp)),
        Case("pytest --tokperf-model fifo.gguf", [*PYTEST, *STARTED,
             "--tokperf-model", str(fifo)], "fifo.gguf"),
        Case("pytest --tokperf-model block_count 2^32", [*PYTEST, *STARTED, "--tokperf-model", str(layers)], "4294967295"),

        Case("pytest --tokperf-server-bin ./missing.sh", [*PYTEST, "--tokperf-engine",
             "llama-server", "--tokperf-server-bin", "./missing.sh"], "./missing.sh"),
        Case("pytest --tokperf-server-bin <folder>", [*PYTEST, *STARTED, "--tokperf-server-bin", str(tmp)], str(tmp)),
        Case("pytest --tokperf-report-json /etc/hostname/r.json", [*PYTEST, *URL,
             "--tokperf-report-json", "/etc/hostname/r.json"], "/etc/hostname/r.json"),
        Case("pytest --tokperf-report-md <folder>", [*PYTEST, *URL, "--tokperf-report-md",
             str(tmp)], str(tmp)),
        Case("pytest --tokperf-report-html /proc/x.html", [*PYTEST, *URL,
             "--tokperf-report-html", "/proc/x.html"], "/proc/x.html"),
        Case("pytest --tokperf-db <folder>", [*PYTEST, "--tokperf-url", "http://127.0.0.1:9",
             "--tokperf-db", str(tmp)], str(tmp)),
        Case("pytest --tokperf-db /proc/r.db", [*PYTEST, "--tokperf-url", "http://127.0.0.1:9",
             "--tokperf-db", "/proc/r.db"], "/proc/r.db"),
        Case("pytest --tokperf-db locked.db", [*PYTEST, "--tokperf-url", "http://127.0.0.1:9",
             "--tokperf-db", str(locked)], "locked"),
        Case("marker tokperf(3)", [*PYTEST, *URL], "[3]",
             test="import pytest\n@pytest.mark.tokperf(3)\n" + TEST),
        Case("marker tokperf('fast', repetitions=2)", [*PYTEST, *URL], "'fast'",
             test="import pytest\n@pytest.mark.tokperf('fast', repetitions=2)\n" + TEST),
        Case("marker generate_tokens=1", [*PYTEST, *URL], "generate_tokens",
             test="import pytest\n@pytest.mark.tokperf(generate_tokens=1)\n" + TEST),
        Case("marker concurrency=0", [*PYTEST, *URL], "concurrency",
             test="import pytest\n@pytest.mark.tokperf(concurrency=0)\n" + TEST),
        Case("ini tokperf_bandwidth = 8Tb/s", [*PYTEST, *URL], "8Tb/s",
             ini="tokperf_bandwidth = 8Tb/s"),
        Case("ini tokperf_url = http://[::1", [*PYTEST, "--tokperf-db", "off"], "[::1",
             ini="tokperf_url = http://[::1"),
        Case("tokperf predict --model fifo", [*TOKPERF, "predict", "--hardware", "1000GB/s",
             "--model", str(fifo)], "fifo.gguf"),
        Case("tokperf predict --model block_count 2^32", [*TOKPERF, "predict", "--hardware",
             "1000GB/s", "--model", str(layers)], "4294967295"),
        Case("tokperf predict --hardware 8Tb/s", [*TOKPERF, "predict", "--hardware", "8Tb/s",
             "--params", "8e9"], "8Tb/s"),
        Case("tokperf predict --hardware 1e30GB/s", [*TOKPERF, "predict", "--hardware",
             "1e30GB/s", "--params", "8e9"], "1e30GB/s"),
        Case("tokperf import DB nested.json", [*TOKPERF, "import", str(tmp / "i.db"),
             str(nested)], "nested.json"),
        Case("tokperf import DB nested.jsonl", [*TOKPERF, "import", str(tmp / "i.db"),
             str(nested_lines)], "nested.jsonl"),
        Case("tokperf import DB notjson.json", [*TOKPERF, "import", str(tmp / "i.db"),
             str(notdb)], "notdb.db"),
        Case("tokperf import DB missing.jsonl", [*TOKPERF, "import", str(tmp / "i.db"),
             "missing.jsonl"], "missing.jsonl"),
        Case("tokperf history locked.db", [*TOKPERF, "history", str(locked)], "locked"),
        Case("tokperf bench --url http://[::1", [*TOKPERF, "bench", "--url", "http://[::1"],
             "[::1"),
        Case("tokperf bench --url http://127.0.0.1:99999", [*TOKPERF, "bench", "--url",
             "http://127.0.0.1:99999"], "99999"),
        Case("pytest --tokperf-model junk.gguf", [*PYTEST, *STARTED,
             "--tokperf-model", str(junk)], "junk.gguf"),
        Case("pytest --tokperf-model missing.gguf", [*PYTEST, *STARTED, "--tokperf-model", "missing.gguf"], "missing.gguf"),
        Case("pytest --tokperf-model 2^40 tensors", [*PYTEST, *STARTED, "--tokperf-model", str(huge)], "1099511627776"),
        Case("pytest --tokperf-db not-a-db", [*PYTEST, "--tokperf-url", "http://127.0.0.1:9",
             "--tokperf-db", str(notdb)], "notdb.db"),
        Case("ini tokperf_fail_on_regression = maybe", [*PYTEST, *URL], "maybe",
             ini="tokperf_fail_on_regression = maybe"),
        Case("ini tokperf_repetitions = many", [*PYTEST, *URL], "many",
             ini="tokperf_repetitions = many"),
        Case("marker repetitions='abc'", [*PYTEST, *URL], "abc",
             test="import pytest\n@pytest.mark.tokperf(repetitions='abc')\n" + TEST),
        Case("marker repetitons=3", [*PYTEST, *URL], "repetitons",
             test="import pytest\n@pytest.mark.tokperf(repetitons=3)\n" + TEST),
        Case("marker chat='maybe'", [*PYTEST, *URL], "maybe",
             test="import pytest\n@pytest.mark.tokperf(chat='maybe')\n" + TEST),
        Case("pytest -n 2 with an engine", [*PYTEST, "-n", "2", *URL], "-n"),
        Case("tokperf predict --hardware 'RTX 9999'", [*TOKPERF, "predict", "--hardware",
             "RTX 9999", "--params", "8e9"], "RTX 9999"),
        Case("tokperf predict --quant Q9_X", [*TOKPERF, "predict", "--hardware", "1000GB/s",
             "--params", "8e9", "--quant", "Q9_X"], "Q9_X"),
        Case("tokperf predict --model junk.gguf", [*TOKPERF, "predict", "--hardware",
             "1000GB/s", "--model", str(junk)], "junk.gguf"),
        Case("tokperf history missing.db", [*TOKPERF, "history", "missing.db"], "missing.db"),
        Case("tokperf history not-a-db", [*TOKPERF, "history", str(notdb)], "notdb.db"),
        Case("tokperf bench -p 0", [*TOKPERF, "bench", "-p", "0", "--url",
             "http://127.0.0.1:9"], "'0'"),
        Case("tokperf bench -n x", [*TOKPERF, "bench", "-n", "x", "--url",
             "http://127.0.0.1:9"], "'x'"),
        Case("tokperf make-model --size lots", [*TOKPERF, "make-model", "--size", "lots"],
             "lots"),
        Case("tokperf accept --reason ''", [*TOKPERF, "accept", str(notdb), "--reason", ""],
             "notdb.db"),
    ]
    return out


def run(case: Case, tmp: Path) -> tuple[int, str, bool]:
    work = Path(tempfile.mkdtemp(dir=tmp))
    (work / "test_bad.py").write_text(case.test)
    if case.ini:
        (work / "pytest.ini").write_text(f"[pytest]\n{case.ini}\n")
    done = subprocess.run(case.argv, cwd=work, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **dict(case.env)})
    text = done.stdout + done.stderr
    errors = [line for line in text.splitlines()
              if line.startswith(("ERROR: ", "tokperf ", "E   ")) or "Error:" in line
              or "error" in line.lower() and case.value in line]
    line = next((e for e in errors if case.value in e), errors[0] if errors else "")
    clear = (done.returncode not in (0, 5) and "Traceback" not in text
             and "INTERNALERROR" not in text and case.value in line)
    return done.returncode, line.strip(), clear


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
"""


def hold_lock(db: Path) -> subprocess.Popen[str]:
    """A second process holding ``BEGIN EXCLUSIVE`` on ``db`` until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.stdout.close()
    proc.wait()


def options() -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        all_cases = cases(tmp)
        locker = hold_lock(tmp / "locked.db")
        good = 0
        try:
            for case in all_cases:
                code, line, clear = run(case, tmp)
                good += clear
                mark = "ok " if clear else "BAD"
                print(f"{mark} exit {code:>2}  {case.name[:46]:46}  {line[:140]}")
        finally:
            release(locker)
    print(f"options and URLs: {good}/{len(all_cases)} ended with one clear line naming the "
          "value (no traceback)")
    return good, len(all_cases)


# -- faults: misbehaving engines, both readers ------------------------------------------

from tests.support.fault_corpus import PASSWORD, SECRET, fault_corpus  # noqa: E402


def faults() -> tuple[int, int, int]:
    from pytest_tokperf.errors import TokperfError

    good = shown = 0
    cases = fault_corpus()
    for fault in cases:
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
        text = str(error) if error is not None else "(no error)"
        one_line = isinstance(error, TokperfError) and "\n" not in text
        secret = SECRET in text or PASSWORD in text or "hunter2" in text
        shown += secret
        ok = (not thread.is_alive() and took <= fault.limit_s + 2.0 and one_line
              and fault.expect.lower() in text.lower() and not secret)
        good += ok
        print(f"{'ok ' if ok else 'BAD'} {took:6.2f} s (limit {fault.limit_s:g})  "
              f"{fault.name[:40]:40}  {type(error).__name__ if error else '-'}: {text[:110]}")
    print(f"faults: {good}/{len(cases)} bounded (within the limit + 2 s) with one clear line")
    return good, len(cases), shown


def secrets_split() -> int:
    """Secrets shown by the /props error that echoes the URL password in two chunks."""
    from tests.support.fake_faults import FakeFaultyLlama

    from pytest_tokperf.engines.llama_server.adapter import LlamaServer
    from pytest_tokperf.errors import TokperfError

    shown = 0
    for transport in (None, "httpx"):
        import httpx

        with FakeFaultyLlama("props_split_secret") as fake:
            url = fake.url.replace("http://", f"http://tokperf:{PASSWORD}@")
            engine = LlamaServer(url, timeout_s=5.0,
                                 transport=httpx.HTTPTransport() if transport else None)
            try:
                engine.info()
            except TokperfError as exc:
                shown += PASSWORD in str(exc) or "hunter2" in str(exc)
            finally:
                engine.close()
    return shown


# -- hostile GGUFs ----------------------------------------------------------------------


def ggufs() -> tuple[int, int]:
    import bench_gguf

    good = total = 0
    with tempfile.TemporaryDirectory() as name:
        for index, case in enumerate(bench_gguf.corpus()):
            path = case.build(Path(name) / f"case{index:02d}.gguf")
            row = bench_gguf.measure(path)
            total += 1
            ok = (row["result"] == case.expect and float(row["parse_s"]) <= 2.0  # type: ignore[arg-type]
                  and float(row["peak_mb"]) <= 200.0)  # type: ignore[arg-type]
            good += ok
            print(f"{'ok ' if ok else 'BAD'} {row['result']:>8} {float(row['parse_s']):6.3f} s "  # type: ignore[arg-type]
                  f"{float(row['peak_mb']):6.0f} MB  {case.name[:60]}")  # type: ignore[arg-type]
            bench_gguf.cleanup(path)
    print(f"hostile GGUFs: {good}/{total} read or refused as expected within 2 s and 200 MB")
    return good, total


# -- storage ----------------------------------------------------------------------------

BENCH = """
def test_a(tok_bench):
    tok_bench(prompt_tokens=4, generate_tokens=8, repetitions=2, warmup=0)

def test_b(tok_bench):
    tok_bench(prompt_tokens=8, generate_tokens=8, repetitions=2, warmup=0)
"""
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


def storage() -> tuple[int, int, int]:
    """(measured, lost, tracebacks) over a full-disk and a locked-DB session."""
    from tests.support.fake_faults import FakeFaultyLlama

    from pytest_tokperf.storage.exchange import import_dataset
    from pytest_tokperf.storage.store import ResultStore

    measured = lost = tracebacks = 0
    for name, conftest in (("full disk", FULL_DISK), ("locked DB", LOCKED % LOCKER)):
        with tempfile.TemporaryDirectory() as folder, FakeFaultyLlama("ok") as fake:
            work = Path(folder)
            (work / "test_bench.py").write_text(BENCH)
            (work / "conftest.py").write_text(conftest)
            done = subprocess.run([*PYTEST, "--tokperf-url", fake.url, "--tokperf-bandwidth",
                                   "30GB/s", "--tokperf-db", "r.db"], cwd=work,
                                  capture_output=True, text=True, timeout=300)
            text = done.stdout + done.stderr
            tracebacks += "Traceback" in text or "INTERNALERROR" in text
            passed = re.search(r"(\d+) passed", text)
            ran = int(passed.group(1)) if passed else 0  # each test measures one result
            with ResultStore.open(work / "r.db") as store:
                in_db = len(store.db.execute("SELECT id FROM results").fetchall())
            recovered = sum(import_dataset(work / "recovered.db", j).results
                            for j in work.glob("*.journal.jsonl"))
            lines = [line for line in text.splitlines() if "could not be stored" in line]
            measured += ran
            lost += max(ran - in_db - recovered, 0)
            print(f"{name}: {ran} measured, {in_db} in the DB, {recovered} imported from the "
                  f"journal; {lines[0][:170] if lines else '(no message)'}")
    print(f"storage: {lost} of {measured} measured results lost (full disk + locked DB), "
          f"{tracebacks} traceback(s)")
    return measured, lost, tracebacks


# -- processes --------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def processes() -> int:
    from pytest_tokperf import helper_runs as helpers
    from pytest_tokperf.launch.process import start_server

    left = 0
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        pids = tmp / "pids"
        wrapper = tmp / "wrapper.sh"
        wrapper.write_text('#!/bin/sh\nsleep 300 &\necho $! >> "$1"\nwait\n')
        never = tmp / "never.sh"
        never.write_text(f"#!/bin/sh\nsleep 300 &\necho $! >> {pids}\nsleep 300\n")
        for script in (wrapper, never):
            script.chmod(0o755)
        for index in range(5):
            mine = tmp / f"pids{index}"
            server = start_server([str(wrapper), str(mine)], "http://127.0.0.1:9", tmp / "log",
                                  mine.exists, 10.0)
            server.stop(grace_s=5.0)
        started = time.perf_counter()
        for flag in ("--help", "--version", "--list-devices"):
            helpers.run_helper([str(never), flag], 3.0)
        took = time.perf_counter() - started
        time.sleep(1.0)
        children = [int(x) for f in tmp.glob("pids*") for x in f.read_text().split()]
        left = sum(_alive(p) for p in children)
        for p in children:
            if _alive(p):
                os.kill(p, 9)
    print(f"processes: {left} of {len(children)} children left after 5 wrapper stops and 3 "
          f"helper runs of a binary that never answers (the helpers took {took:.1f} s for a "
          f"3 s timeout)")
    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="faults,gguf,options,storage,processes")
    parts = set(parser.parse_args().only.split(","))
    summary: list[str] = []
    if "faults" in parts:
        good, total, shown = faults()
        shown += secrets_split()
        summary += [f"faults {good}/{total} bounded with one clear line",
                    f"secrets shown {shown}"]
    if "gguf" in parts:
        good, total = ggufs()
        summary.append(f"hostile GGUFs {good}/{total}")
    if "options" in parts:
        good, total = options()
        summary.append(f"options and URLs {good}/{total}")
    if "storage" in parts:
        measured, lost, tracebacks = storage()
        summary.append(f"full disk + locked DB: {lost} of {measured} results lost, "
                       f"{tracebacks} tracebacks")
    if "processes" in parts:
        summary.append(f"processes left {processes()}")
    print("\nSUMMARY: " + "; ".join(summary))


if __name__ == "__main__":
    main()
