"""The machine-load sampler: /proc text parsed, figures over a window, unknown without /proc."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_tokperf.hardware.load import (
    LoadSampler,
    listening_inodes,
    listening_pids,
    parse_loadavg,
    parse_pid_stat,
    parse_proc_stat,
)
from pytest_tokperf.results import MachineLoad, combine_loads

STAT = """cpu  {user} 0 {system} {idle} 10 0 {softirq} {steal} 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
cpu1 1 0 1 1 0 0 0 0 0 0
intr 1234 0 0
ctxt 99
procs_running {running}
procs_blocked 0
"""


def _stat(user: int, system: int, idle: int, steal: int = 0, softirq: int = 0,
          running: int = 1) -> str:
    return STAT.format(user=user, system=system, idle=idle, steal=steal, softirq=softirq,
                       running=running)


def _pid_stat(state: str, utime: int, stime: int, comm: str = "llama-server") -> str:
    fields = [state, "1", "1", "1", "0", "-1", "4194560", "0", "0", "0", "0",
              str(utime), str(stime), "0", "0", "20", "0", "4"]
    return f"4242 ({comm}) " + " ".join(fields) + "\n"


def test_proc_stat_parsed_to_busy_idle_steal_and_cpus() -> None:
    times = parse_proc_stat(_stat(user=300, system=100, idle=500, steal=40, softirq=5,
                                  running=3))
    assert (times.busy, times.idle, times.steal) == (405, 510, 40)
    assert times.cpus == 2 and times.procs_running == 3
    with pytest.raises(ValueError, match="no 'cpu' line"):
        parse_proc_stat("intr 1\n")


def test_loadavg_and_a_pid_stat_whose_name_holds_parentheses() -> None:
    assert parse_loadavg("0.50 0.70 1.09 3/412 2701\n") == (0.5, 3)
    assert parse_pid_stat(_pid_stat("R", 120, 30, comm="a) (b")) == ("R", 150)


def _proc(root: Path, stat: str, engine: str | None = None, running: int = 1) -> None:
    root.mkdir(exist_ok=True)
    (root / "stat").write_text(stat)
    (root / "loadavg").write_text(f"1.50 1.20 1.00 {running}/300 999\n")
    if engine is not None:
        (root / "4242").mkdir(exist_ok=True)
        (root / "4242" / "stat").write_text(engine)


def test_a_window_splits_the_machine_into_engine_tokperf_and_others(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    clock = iter([10.0, 12.0])  # 2 s of wall time
    own = iter([1.0, 1.2])  # tokperf used 0.2 CPU-seconds
    _proc(proc, _stat(user=1000, system=0, idle=1000), _pid_stat("S", 100, 0))
    sampler = LoadSampler([4242], proc=proc, poll_s=None, own_cpu_s=lambda: next(own),
                          clock=lambda: next(clock)).start()
    # 2 s at 100 ticks/s on 2 CPUs: 400 ticks; 360 busy, 20 idle, 20 stolen; the engine 100
    _proc(proc, _stat(user=1360, system=0, idle=1020, steal=20), _pid_stat("S", 200, 0),
          running=5)
    load = sampler.stop()
    assert load.known and load.cpus == 2 and load.wall_s == pytest.approx(2.0)
    assert load.busy_cpus == pytest.approx(1.8)
    assert load.engine_cpus == pytest.approx(0.5)
    assert load.own_cpus == pytest.approx(0.1)
    assert load.others_cpus == pytest.approx(1.2)
    assert load.steal == pytest.approx(0.05)
    assert load.run_queue_max == 5 and load.load_1m == 1.5
    assert load.loaded
    assert load.describe().startswith("other processes used 1.2 of 2 CPUs during the repetitions")


def test_without_proc_the_reading_is_unknown_and_nothing_fails(tmp_path: Path) -> None:
    load = LoadSampler([4242], proc=tmp_path / "absent").start().stop()
    assert not load.known and load.others_cpus is None and not load.loaded
    assert "no " in load.detail and "stat" in load.detail
    assert load.describe().startswith("machine load unknown")


def test_an_attached_engine_gives_machine_wide_figures_only(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    clock = iter([0.0, 1.0])
    _proc(proc, _stat(user=0, system=0, idle=0))
    sampler = LoadSampler((), proc=proc, poll_s=None, own_cpu_s=lambda: 0.0,
                          clock=lambda: next(clock)).start()
    _proc(proc, _stat(user=190, system=0, idle=10))
    load = sampler.stop()
    assert load.busy_cpus == pytest.approx(1.9) and load.others_cpus is None
    assert not load.loaded  # the engine may be all of it: not called the neighbours'
    assert "engine's share unknown" in load.describe()


def test_a_busy_loop_neighbour_shows_up_as_others_cpu() -> None:
    idle_engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # both started
        sampler = LoadSampler([idle_engine.pid]).start()
        time.sleep(1.5)
        load = sampler.stop()
    finally:
        spinner.kill()
        idle_engine.kill()
        spinner.wait()
        idle_engine.wait()
    if not Path("/proc/stat").exists():
        assert not load.known
        return
    assert load.others_cpus is not None and load.others_cpus > 0.5
    assert load.engine_cpus is not None and load.engine_cpus < 0.2
    assert load.run_queue is not None and load.run_queue >= 1.0  # the spinner is always runnable
    assert load.samples >= 3
    assert sampler.cost_s < 0.5 * load.wall_s  # a light poll, however slow the machine


def test_windows_combine_weighted_by_their_wall_time() -> None:
    quiet = MachineLoad(wall_s=3.0, cpus=2, busy_cpus=1.0, engine_cpus=1.0, own_cpus=0.0,
                        steal=0.0, run_queue=0.0, run_queue_max=0, samples=3)
    busy = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                       steal=0.2, run_queue=4.0, run_queue_max=6, samples=1)
    both = combine_loads([quiet, busy, None])
    assert both is not None and both.wall_s == 4.0
    assert both.busy_cpus == pytest.approx(1.25) and both.engine_cpus == pytest.approx(0.85)
    assert both.others_cpus == pytest.approx(0.4) and both.steal == pytest.approx(0.05)
    assert both.run_queue == pytest.approx(1.0) and both.run_queue_max == 6
    assert not quiet.loaded and busy.loaded and both.loaded  # 0.4 of 2 CPUs: 20% + 5% steal
    short = dataclasses.replace(busy, wall_s=0.2, busy_cpus=0.4)  # one stolen tick: 2.5%
    assert short.steal == 0.2 and not short.loaded  # too few ticks to tell steal
    unknown = MachineLoad.unknown("no /proc/stat")
    assert combine_loads([unknown]) == unknown and combine_loads([]) is None


def test_the_process_listening_on_a_port_is_found_for_an_attached_server() -> None:
    text = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
            "timeout inode\n"
            "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
            "        0 4242 1 0000000000000000 100 0 0 10 0\n"
            "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0"
            "        0 4343 1 0000000000000000 100 0 0 10 0\n")
    assert listening_inodes(text, 8080) == {"4242"}  # the listener, not a connection
    assert listening_inodes(text, 8081) == set()
    server = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        found = listening_pids(port)
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()
    assert found == ((server.pid,) if Path("/proc/net/tcp").exists() else ())
