"""The machine's load in the JSON report and the JUnit properties."""

from __future__ import annotations

import dataclasses

from pytest_tokperf.report.report_data import figures_from_result
from pytest_tokperf.report.formats import junit_properties, result_json
from pytest_tokperf.results import MachineLoad
from tests.support.storage_factory import make_ceiling, make_result

BUSY = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                   steal=0.0, run_queue=5.0, run_queue_max=7, samples=10)


def _figures(load: MachineLoad | None):  # type: ignore[no-untyped-def]
    return figures_from_result("t::decode", dataclasses.replace(make_result(), load=load),
                               ceiling=make_ceiling(), verdict="fail")


def test_json_and_junit_carry_the_machine_load() -> None:
    fig = _figures(BUSY)
    load = result_json(fig)["machine_load"]
    assert load["others_cpus"] == 1.6 and load["loaded"] is True and load["run_queue"] == 5.0
    props = dict(junit_properties(fig))
    assert props["tokperf_machine_others_cpus"] == 1.6
    assert props["tokperf_machine_loaded"] == "yes"


def test_no_proc_reads_unknown_and_not_sampled_reads_nothing() -> None:
    unknown = _figures(MachineLoad.unknown("no /proc/stat on this platform"))
    assert result_json(unknown)["machine_load"] == "unknown"
    assert dict(junit_properties(unknown))["tokperf_machine_load"] == "unknown"
    plain = _figures(None)
    assert result_json(plain)["machine_load"] is None
    assert not any(k.startswith("tokperf_machine") for k, _ in junit_properties(plain))
