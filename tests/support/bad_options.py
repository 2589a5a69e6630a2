"""The bad-options corpus: ``tokperf`` verbs and ``pytest`` sessions with bad options,
ini values, environment variables, marker arguments, model files, URLs and report paths,
each with the fragment (the bad value) its one-line error must name. No engine is needed.
``tests/package/test_bad_inputs_corpus.py`` runs each and holds it to one clear line.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

TOKPERF = [sys.executable, "-m", "pytest_tokperf.cli.main"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
TEST = "def test_x(tok_bench):\n    tok_bench(prompt_tokens=8, generate_tokens=4)\n"
URL = ["--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", "off"]
STARTED = ["--tokperf-engine", "llama-server", "--tokperf-server-bin", "/bin/true"]
"""A started llama-server whose binary exists, so the model file is what is checked."""


@dataclass(frozen=True)
class Case:
    """One command line that must end in one clear line naming ``value``."""

    name: str
    argv: list[str]
    value: str
    """A fragment the error line must name (the bad value)."""
    ini: str = ""
    test: str = TEST
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set for the run."""


def cases(tmp: Path) -> list[Case]:
    """The corpus, its files written into ``tmp`` (a FIFO, junk and crafted GGUFs, ...)."""
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
        ("--tokperf-startup-timeout", "soon"),
        ("--tokperf-port", "70000"), ("--tokperf-port", "0"), ("--tokperf-threads", "0"),
        ("--tokperf-ctx-size", "lots"), ("--tokperf-parallel", "-2"),
        ("--tokperf-repetitions", "0"), ("--tokperf-warmup", "-1"),
        ("--tokperf-min-effect", "50"), ("--tokperf-min-effect", "0"),
        ("--tokperf-min-efficiency", "2"),
        ("--tokperf-bandwidth", "fast"), ("--tokperf-bandwidth", "-5GB/s"),
        ("--tokperf-device", "tpu:0"), ("--tokperf-baseline", "nope.db"),
        ("--tokperf-baseline", "engine="), ("--tokperf-engine", "llamaserver"),
        ("--tokperf-speculative-url", "localhost:1"),
        ("--tokperf-bandwidth", "8Tb/s"), ("--tokperf-bandwidth", "1008Gb/s"),
        ("--tokperf-bandwidth", "100Gbps"), ("--tokperf-bandwidth", "1e-30GB/s"),
        ("--tokperf-bandwidth", "1e30GB/s"), ("--tokperf-bandwidth", "0.01"),
        ("--tokperf-bandwidth", "200TB/s"), ("--tokperf-bandwidth", "nan"),
        ("--tokperf-bandwidth", "inf"), ("--tokperf-request-timeout", "1e309"),
        ("--tokperf-startup-timeout", "0"), ("--tokperf-threads", "1e3"),
        ("--tokperf-ctx-size", "-1"), ("--tokperf-parallel", "0x10"),
        ("--tokperf-repetitions", "1.5"), ("--tokperf-repetitions", "1-10"),
        ("--tokperf-device", "cuda:-1"),
        ("--tokperf-device", "tpu"), ("--tokperf-engine-version", "latest"),
        ("--tokperf-engine", "LLAMA-SERVER"), ("--tokperf-baseline", "engine"),
        ("--tokperf-fail-on-regression", "maybe"),
        # a value after a space that starts with '-': pytest's parser took it for an option
        ("--tokperf-request-timeout", "-inf"), ("--tokperf-min-efficiency", "-0.5"),
        ("--tokperf-warmup", "-1e3"), ("--tokperf-startup-timeout", "-1e3"),
        # empty, whitespace, unicode, units
        ("--tokperf-bandwidth", ""), ("--tokperf-bandwidth", " "),
        ("--tokperf-bandwidth", "1,008GB/s"),
        ("--tokperf-bandwidth", "1008GB/s/s"),
        ("--tokperf-min-effect", "5%"),
        ("--tokperf-device", "cuda:0 cuda:1"),
        ("--tokperf-threads", "99999"), ("--tokperf-repetitions", "3-0"),
        ("--tokperf-ab-min-effect", "1"), ("--tokperf-ab-engine", "latest"),
        ("--tokperf-engine", ""),
    ]:
        out.append(Case(f"pytest {flag} {value}", [*PYTEST, flag, value, *URL], value))
    for variable, value in [  # settings a project sets once: no flag, a variable or ini key
        ("PYTEST_TOKPERF_IDLE_TIMEOUT", "0"), ("PYTEST_TOKPERF_IDLE_TIMEOUT", "nan"),
        ("PYTEST_TOKPERF_IDLE_TIMEOUT", "-nan"), ("PYTEST_TOKPERF_AGREEMENT", "nan"),
        ("PYTEST_TOKPERF_AGREEMENT", "-1"), ("PYTEST_TOKPERF_AGREEMENT", "5%"),
        ("PYTEST_TOKPERF_API_KEY_ENV", "sk-123"), ("PYTEST_TOKPERF_MAX_BODY", "1"),
        ("PYTEST_TOKPERF_MAX_BODY", "lots"), ("PYTEST_TOKPERF_MAX_BODY", "99GiB"),
        ("PYTEST_TOKPERF_MAX_BODY", "-8MiB"), ("PYTEST_TOKPERF_MAX_BODY", "8 MiB/s"),
        ("PYTEST_TOKPERF_TARGET_INTERVAL", "2"), ("PYTEST_TOKPERF_TARGET_INTERVAL", "0"),
        ("PYTEST_TOKPERF_MAX_CV", "-0.1"), ("PYTEST_TOKPERF_COLUMNS", "-5"),
        ("PYTEST_TOKPERF_COLUMNS", "59"),
    ]:
        out.append(Case(f"env {variable}={value}", [*PYTEST, *URL], value,
                        env=((variable, value),)))
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
        Case("pytest --tokperf-ab-engine ftp://x", [*PYTEST, *URL, "--tokperf-ab-engine",
             "ftp://x"], "ftp://x"),
        Case("pytest --tokperf-ab-engine http://[::1", [*PYTEST, *URL,
             "--tokperf-ab-engine", "http://[::1"], "[::1"),
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
        Case("pytest --tokperf-report /etc/hostname/r.json", [*PYTEST, *URL,
             "--tokperf-report", "/etc/hostname/r.json"], "/etc/hostname/r.json"),
        Case("pytest --tokperf-report <folder>", [*PYTEST, *URL, "--tokperf-report",
             str(tmp)], str(tmp)),
        Case("pytest --tokperf-report /proc/x.html", [*PYTEST, *URL,
             "--tokperf-report", "/proc/x.html"], "/proc/x.html"),
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
        Case("tokperf import DB nested.json", [*TOKPERF, "import", "--db", str(tmp / "i.db"),
             str(nested)], "nested.json"),
        Case("tokperf import DB nested.jsonl", [*TOKPERF, "import", "--db", str(tmp / "i.db"),
             str(nested_lines)], "nested.jsonl"),
        Case("tokperf import DB notjson.json", [*TOKPERF, "import", "--db", str(tmp / "i.db"),
             str(notdb)], "notdb.db"),
        Case("tokperf import DB missing.jsonl", [*TOKPERF, "import", "--db", str(tmp / "i.db"),
             "missing.jsonl"], "missing.jsonl"),
        Case("tokperf history --db locked.db", [*TOKPERF, "history", "--db", str(locked)],
             "locked"),
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
        Case("tokperf history --db missing.db", [*TOKPERF, "history", "--db", "missing.db"],
             "missing.db"),
        Case("tokperf history --db not-a-db", [*TOKPERF, "history", "--db", str(notdb)],
             "notdb.db"),
        Case("tokperf bench -p -1", [*TOKPERF, "bench", "-p", "-1", "--url",
             "http://127.0.0.1:9"], "'-1'"),
        Case("tokperf bench -ngl -2,x", [*TOKPERF, "bench", "-ngl", "-2,x", "--url",
             "http://127.0.0.1:9"], "-2,x"),
        Case("tokperf bench -n x", [*TOKPERF, "bench", "-n", "x", "--url",
             "http://127.0.0.1:9"], "'x'"),
        Case("tokperf make-model --size lots", [*TOKPERF, "make-model", "--size", "lots"],
             "lots"),
        Case("tokperf accept --reason ''", [*TOKPERF, "accept", "--db", str(notdb), "--reason",
                                            ""], "notdb.db"),
    ]
    return out
