"""Every GGUF file of up to 100 MB is read or refused within 2 s and 200 MB.

Each file of the hostile corpus (``tests/support/gguf_corpus.py``) is loaded in a fresh
process the way ``tokperf predict`` loads a model (``load_gguf``, then ``footprint`` at
depth 32768): the answer must be the expected one, the parse must take at most 2 s of CPU
(CPU, not wall time, so a busy neighbour does not fail it; wall time only turns a hang
into a failure) and the process's peak RSS (``VmHWM``, imports included) at most 200 MB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gguf_corpus import Case, cleanup, corpus

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S, LIMIT_MB = 2.0, 200.0

CHILD = r"""
import json, sys, time
def hwm_mb():  # this process image's peak RSS (ru_maxrss would include the parent's)
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:")) / 1024
from pytest_tokperf.errors import ModelFileError
from pytest_tokperf.model.footprint import footprint
from pytest_tokperf.model.gguf_file import load_gguf
wall, cpu = time.perf_counter(), time.process_time()
try:
    model = load_gguf(sys.argv[1])
    fp = footprint(model, depth_tokens=32768)
    result, note = "accepted", f"{len(model.tensors)} tensors, {fp.total_bytes / 1e9:.2f} GB/token"
except ModelFileError as exc:
    result, note = "refused", str(exc)
print(json.dumps({"result": result, "note": note, "cpu_s": time.process_time() - cpu,
                  "wall_s": time.perf_counter() - wall, "peak_mb": hwm_mb()}))
"""

CORPUS = corpus()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM needs /proc"),
]


@pytest.mark.parametrize("case", CORPUS, ids=[c.name for c in CORPUS])
def test_each_file_is_read_or_refused_within_2_s_and_200_mb(case: Case, tmp_path: Path) -> None:
    path = case.build(tmp_path / "model.gguf")
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(path)], check=False,
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
    finally:
        if path.parent == tmp_path:  # the test model is the cached one: keep it
            cleanup(path)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout)
    assert row["result"] == case.expect, row["note"]
    if case.expect == "refused":
        assert "\n" not in row["note"], row["note"]
    assert row["cpu_s"] <= LIMIT_S, f"parse took {row['cpu_s']:.2f} s of CPU"
    assert row["peak_mb"] <= LIMIT_MB, f"peak RSS {row['peak_mb']:.0f} MB"


def test_the_corpus_is_the_one_documented() -> None:
    assert len(CORPUS) >= 77
    assert {c.expect for c in CORPUS} == {"accepted", "refused"}
