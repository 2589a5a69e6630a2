"""versions.paired: compare-builds' sessions pooled as server starts of one paired judgement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_tokperf.errors import ConfigError
from pytest_tokperf.versions.paired import judge_documents

WORKLOAD = {"prompt_tokens": 64, "generate_tokens": 24, "depth_tokens": 0, "concurrency": 1,
            "repetitions": 4, "warmup": 1, "cached_prefix_tokens": 0, "chat": False}


def _doc(decode: list[tuple[float, float]], ttft: list[tuple[float, float]]) -> dict[str, Any]:
    rounds = [{"control": [b, None, tb], "candidate": [c, None, tc]}
              for (b, c), (tb, tc) in zip(decode, ttft)]
    return {"ab": [{"test_id": "t.py::test_x", "workload": WORKLOAD,
                    "metrics": ["decode", "prefill", "ttft"], "rounds": rounds}]}


def test_sessions_are_the_unit_of_the_pooled_pairs() -> None:
    # each session's ratio is tight, but the sessions disagree: the interval must say so
    docs = [_doc([(50.0, 49.0), (40.0, 39.3), (51.0, 50.0), (39.0, 38.2)],
                 [(0.5, 0.5), (0.6, 0.601), (0.5, 0.502), (0.6, 0.6)]),
            _doc([(50.0, 46.0), (40.0, 36.9), (51.0, 47.0), (39.0, 35.8)],
                 [(0.5, 0.501), (0.6, 0.6), (0.5, 0.5), (0.6, 0.602)])]
    found = {f.metric: f for f in judge_documents(docs, ["decode", "ttft"])}
    decode = found["decode"]
    assert (decode.pairs, decode.starts) == (8, 2)
    assert decode.comparison.shift is not None and decode.comparison.shift.df == 1
    assert decode.comparison.verdict == "inconclusive"
    assert "the limit is the few starts (2, 1 df)" in decode.comparison.reason
    assert decode.median_a == pytest.approx(45.0)


def test_sessions_that_stopped_at_different_counts_are_one_workload() -> None:
    # an adaptive or time-budgeted session stores the pairs it measured as its
    # repetitions: 6 in one session, 4 in the other, still one test's pairs
    rows = [(50.0, 47.5), (40.0, 38.0), (51.0, 48.5), (39.0, 37.0), (45.0, 42.8), (44.0, 41.7)]
    six, four = _doc(rows, [(0.5, 0.5)] * 6), _doc(rows[:4], [(0.5, 0.5)] * 4)
    six["ab"][0]["workload"] = {**WORKLOAD, "repetitions": 6}
    found = judge_documents([six, four], ["decode"])
    assert len(found) == 1
    assert (found[0].pairs, found[0].starts) == (10, 2)


def test_one_session_judges_its_pairs() -> None:
    docs = [_doc([(50.0, 47.0), (40.0, 37.7), (51.0, 48.1), (39.0, 36.7), (45.0, 42.4),
                  (44.0, 41.5)], [(0.5, 0.5)] * 3 + [(0.6, 0.601)] * 3)]
    found = {f.metric: f for f in judge_documents(docs, ["decode", "ttft"])}
    assert found["decode"].comparison.verdict == "regression"
    assert found["decode"].starts == 1


def test_the_table_judges_the_family_the_session_judged() -> None:
    # the session judged decode and TTFT together (Bonferroni over 2); the table shows
    # decode alone and must give the session's verdict, not one over a smaller family
    from pytest_tokperf.stats.metric import Metric
    from pytest_tokperf.stats.paired import Pairs, judge_ab

    decode = [(50.0, 46.9), (40.0, 37.9), (51.0, 48.1), (39.0, 36.2), (45.0, 42.6), (44.0, 41.1)]
    ttft = [(0.5, 0.51), (0.6, 0.59), (0.5, 0.5), (0.6, 0.61), (0.5, 0.49), (0.6, 0.6)]
    table = judge_documents([_doc(decode, ttft)], ["decode"])[0].comparison
    session = judge_ab({
        "decode": Pairs.of(Metric("decode", True, 0.02), *zip(*decode)),
        "ttft": Pairs.of(Metric("ttft", False, 0.02), *zip(*ttft))})["decode"]
    assert (table.verdict, table.ci_low, table.ci_high) == (
        session.verdict, session.ci_low, session.ci_high)
    assert table.correction == "Bonferroni over 2 metrics"


def test_no_ab_in_the_documents_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no test made a same-run A/B"):
        judge_documents([{"ab": []}], ["decode"])
    with pytest.raises(ConfigError, match="choose from decode, prefill, ttft"):
        judge_documents([{"ab": []}], ["tokens"])


def test_a_bad_start_level_is_refused_before_anything_is_built(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_tokperf.cli.main import main

    for bad in ("-1", "nan", "150"):
        assert main(["compare-builds", "11292", "11434", "--start-sd", bad,
                     "--db", str(tmp_path / "c.db")]) == 2
        err = capsys.readouterr().err
        assert f"--start-sd {float(bad)!r}: give a percent from 0 to 100" in err
    assert not (tmp_path / "c.db").exists()


def _started(decode: list[tuple[float, float]], starts: int) -> dict[str, Any]:
    doc = _doc(decode, [(0.5, 0.5)] * len(decode))
    for i, row in enumerate(doc["ab"][0]["rounds"]):
        row["start"] = i * starts // len(decode)
    return doc


def test_the_server_starts_of_every_session_are_the_unit() -> None:
    # two sessions that agree (-5.0% and -5.3%), each tight: as two starts (1 df) they
    # cannot settle it; with 6 starts in each, 12 starts (11 df) find the step
    rows = [(50.0, 47.5), (40.0, 38.0), (51.0, 48.5), (39.0, 37.0), (45.0, 42.8), (44.0, 41.7)]
    rows += [(b * 1.01, c * 1.0105) for b, c in rows]
    second = [(b, c * 0.997) for b, c in rows]
    docs = [_doc(rows, [(0.5, 0.5)] * 12), _doc(second, [(0.5, 0.5)] * 12)]
    two = {f.metric: f for f in judge_documents(docs, ["decode"])}["decode"]
    assert two.starts == 2 and two.comparison.verdict == "inconclusive"
    started = [_started(rows, 6), _started(second, 6)]
    found = {f.metric: f for f in judge_documents(started, ["decode"])}["decode"]
    assert found.starts == 12
    assert found.comparison.verdict == "regression"
    assert "from 12 server starts a side" in found.comparison.reason
    assert found.comparison.shift is not None and found.comparison.shift.df == 11


def test_a_session_measured_busy_marks_its_rows() -> None:
    rows = [(50.0, 47.5), (40.0, 38.0), (51.0, 48.5), (39.0, 37.0), (45.0, 42.8), (44.0, 41.7)]
    rows += [(b * 1.01, c * 1.0105) for b, c in rows]
    doc = _doc(rows, [(0.5, 0.5)] * 12)
    quiet = judge_documents([doc], ["decode"])[0]
    assert quiet.busy == ""
    doc["ab"][0].update(busy=True, load="machine: control others 1.6 of 2 CPUs, busy")
    busy = judge_documents([doc], ["decode"])[0]
    assert busy.busy.startswith("session 1: machine: control others 1.6")
    assert busy.comparison == quiet.comparison  # the figures are the figures

    from pytest_tokperf.busy import BusyPolicy

    def decides(found: Any, outcome: Any) -> bool:
        return BusyPolicy(outcome).fails(bool(found.busy), found.comparison.verdict == "regression")

    assert busy.comparison.verdict == "regression"
    assert decides(quiet, "skip") and not decides(busy, "skip")
    assert decides(busy, "judge") and decides(busy, "fail")


def test_a_session_measured_busy_is_measured_again_after_a_quiet_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # compare-builds on a shared runner: the first session ran beside a neighbour that
    # slowed the candidate 20% (busy); after a quiet window it is measured again, and
    # only the quiet session is judged
    import json
    import random
    from types import SimpleNamespace

    from pytest_tokperf.builds.specs import Build
    from pytest_tokperf.versions import paired

    sessions: list[Path] = []

    def session(runner: Any, a: Build, b: Build, number: int) -> Path:
        busy = not sessions
        rng = random.Random(len(sessions))
        rounds = [{"control": [30.0 * (x := rng.gauss(1, 0.02)), None, 0.2],
                   "candidate": [30.0 * x * (0.8 if busy else 1.0) * rng.gauss(1, 0.005),
                                 None, 0.2]} for _ in range(60)]
        doc = {"ab": [{"test_id": "t.py::test_x", "workload": WORKLOAD, "rounds": rounds,
                       "metrics": ["decode", "prefill", "ttft"], "busy": busy,
                       "load": "machine: others 1.8 of 2 CPUs" if busy else ""}]}
        path = tmp_path / f"ab-{number}-{len(sessions)}.json"
        path.write_text(json.dumps(doc))
        sessions.append(path)
        return path

    monkeypatch.setattr(paired, "run_paired_session", session)
    lines: list[str] = []
    runner = SimpleNamespace(progress=lines.append, metrics=("decode",))
    a, b = (Build(name, tmp_path / name, None) for name in ("a", "b"))
    for build in (a, b):
        build.binary.write_text(f"#!/bin/sh\n# {build.label}\n")
    waits: list[float] = []
    found = paired.compare_builds_paired(
        runner, a, b, 1, busy_wait=60.0,  # type: ignore[arg-type]
        wait_quiet=lambda budget: waits.append(budget) or 7.0)
    assert waits == [60.0] and found.documents == (sessions[1],)
    assert found.busy_first == (sessions[0],)
    (decode,) = found.results
    assert not decode.busy and decode.comparison.verdict != "regression"
    assert lines == [
        "A/B session 1 measured busy (machine: others 1.8 of 2 CPUs): waiting up to 60 s "
        "for a quiet window to measure it again (--busy-wait)",
        "quiet after 7 s: measuring A/B session 1 again"]
    # no quiet window: the busy session stands and says so; 0: never waited
    sessions.clear()
    lines.clear()
    busy = paired.compare_builds_paired(runner, a, b, 1, busy_wait=60.0,  # type: ignore[arg-type]
                                               wait_quiet=lambda budget: None)
    assert busy.documents == (sessions[0],) and busy.busy_first == ()
    assert busy.results[0].busy and lines[-1] == (
        "no quiet window within 60 s: A/B session 1 stands as measured busy")
    sessions.clear()
    never = paired.compare_builds_paired(runner, a, b, 1,  # type: ignore[arg-type]
                                                wait_quiet=lambda budget: pytest.fail("waited"))
    assert never.results[0].busy and len(sessions) == 1


def test_busy_wait_must_be_seconds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pytest_tokperf.cli.main import main

    for bad in ("-5", "inf"):
        assert main(["compare-builds", "11292", "11434", "--busy-wait", bad,
                     "--db", str(tmp_path / "x.db")]) == 2
        assert f"--busy-wait {float(bad)!r}: give seconds, 0 or more" in capsys.readouterr().err
