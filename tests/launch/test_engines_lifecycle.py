"""pytest killed -> no llama-server left behind.

Each trial starts a Python process that starts llama-server (the small 'test' model)
through ``start_llama_server`` and streams a generation from it, as a pytest session
does; the trial then kills that process (SIGKILL and SIGTERM in turn) while the
generation runs, and checks that the server is gone within 10 s. With SIGTERM as the
death signal about one server in ten survived this (llama-server's signal handler
deadlocks against the request cancelled by the dropped connection); SIGKILL cannot.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TRIALS = 50
BUDGET_S = 60.0
"""Stop early (after at least 10 trials) on a slow machine."""

CHILD = """
import sys, threading, time
from pathlib import Path
import httpx
from pytest_tokperf.launch.process import LaunchSpec, start_llama_server

spec = LaunchSpec(binary=Path(sys.argv[1]), model=Path(sys.argv[2]), log_path=Path(sys.argv[3]),
                  threads=1, context_size=512, startup_timeout_s=60)
server = start_llama_server(spec)

def stream():
    body = {"prompt": [300] * 8, "n_predict": 400, "ignore_eos": True, "stream": True}
    try:
        with httpx.stream("POST", server.url + "/completion", json=body, timeout=60) as r:
            for _ in r.iter_bytes():
                pass
    except Exception:
        pass

threading.Thread(target=stream, daemon=True).start()
print(server.process.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for a reaper that may never come."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.engine
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killing_the_parent_leaves_no_server(
    server_binary: Path, test_model: Path, tmp_path: Path
) -> None:
    survivors: list[int] = []
    trials = 0
    started = time.monotonic()
    rng = random.Random(14)
    while trials < TRIALS and (trials < 10 or time.monotonic() - started < BUDGET_S):
        log = tmp_path / f"llama-server-{trials}.log"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(server_binary), str(test_model), str(log)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        if not line.isdigit():
            child.kill()
            _, err = child.communicate(timeout=30)
            pytest.fail(f"trial {trials}: the child did not start llama-server:\n{err[-2000:]}")
        pid = int(line)
        time.sleep(rng.uniform(0.02, 0.3))  # mid-generation
        child.send_signal(signal.SIGKILL if trials % 2 == 0 else signal.SIGTERM)
        child.communicate(timeout=30)
        deadline = time.monotonic() + 10.0
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            survivors.append(pid)
            os.kill(pid, signal.SIGKILL)
        trials += 1
    print(f"llama-server survivors after killing its parent: {len(survivors)} of {trials}")
    assert survivors == [], f"{len(survivors)} of {trials} servers outlived their parent"
