"""Bad input, tried as a user would: does each get one clear line, never a traceback?

Runs `tokperf` verbs and `pytest` sessions with bad options, ini values, marker
arguments, model files and databases (no engine is needed: every case must be refused
before one would start) and prints, per case, the exit status and the error line; the
last line counts the cases that ended with a one-line error naming the bad value.

    .venv/bin/python benchmarks/perf/bench_bad_inputs.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TOKPERF = [sys.executable, "-m", "pytest_tokperf.cli.main"]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
TEST = "def test_x(tok_bench):\n    tok_bench(prompt_tokens=8, generate_tokens=4)\n"
URL = ["--tokperf-url", "http://127.0.0.1:9", "--tokperf-db", "off"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    value: str
    """A fragment the error line must name (the bad value)."""
    ini: str = ""
    test: str = TEST


def cases(tmp: Path) -> list[Case]:
    junk = tmp / "junk.gguf"
    junk.write_bytes(b"PK\x03\x04 not a model")
    huge = tmp / "huge.gguf"
    huge.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little")
                     + bytes(16))
    notdb = tmp / "notdb.db"
    notdb.write_text("hello")
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
    ]:
        out.append(Case(f"pytest {flag} {value}", [*PYTEST, flag, value, *URL], value))
    out += [
        Case("pytest --tokperf-bandwidth=-5GB/s", [*PYTEST, "--tokperf-bandwidth=-5GB/s", *URL],
             "-5GB/s"),
        Case("pytest --tokperf-url ftp://x", [*PYTEST, "--tokperf-url", "ftp://x"], "ftp://x"),
        Case("pytest --tokperf-model junk.gguf", [*PYTEST, "--tokperf-engine", "llama-server",
             "--tokperf-model", str(junk)], "junk.gguf"),
        Case("pytest --tokperf-model missing.gguf", [*PYTEST, "--tokperf-engine",
             "llama-server", "--tokperf-model", "missing.gguf"], "missing.gguf"),
        Case("pytest --tokperf-model 2^40 tensors", [*PYTEST, "--tokperf-engine",
             "llama-server", "--tokperf-model", str(huge)], "1099511627776"),
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
    done = subprocess.run(case.argv, cwd=work, capture_output=True, text=True, timeout=120)
    text = done.stdout + done.stderr
    errors = [line for line in text.splitlines()
              if line.startswith(("ERROR: ", "tokperf ", "E   ")) or "Error:" in line
              or "error" in line.lower() and case.value in line]
    line = next((e for e in errors if case.value in e), errors[0] if errors else "")
    clear = (done.returncode not in (0, 5) and "Traceback" not in text
             and "INTERNALERROR" not in text and case.value in line)
    return done.returncode, line.strip(), clear


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        all_cases = cases(tmp)
        good = 0
        for case in all_cases:
            code, line, clear = run(case, tmp)
            good += clear
            mark = "ok " if clear else "BAD"
            print(f"{mark} exit {code:>2}  {case.name:42}  {line[:150]}")
        print(f"{good} of {len(all_cases)} bad inputs ended with one clear line naming the "
              "value (no traceback)")


if __name__ == "__main__":
    main()
