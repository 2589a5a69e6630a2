"""bench.ab: the same-run paired A/B: ABBA order, the paired verdict, refusal, a side dying."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_tokperf.bench.ab import like_for_like, run_paired_ab
from pytest_tokperf.bench.measure import MeasureOptions, to_sample
from pytest_tokperf.busy import BusyPolicy
from pytest_tokperf.errors import ConfigError, EngineUnavailable, MeasurementError
from pytest_tokperf.hardware.process_clock import ThreadTimes
from pytest_tokperf.results import (
    EngineInfo,
    EngineTimings,
    Generation,
    GenerationRequest,
    Workload,
)

PHASES = (1.0, 1.6, 1.0, 1.6, 1.6, 1.0, 1.6, 1.6, 1.0, 1.0, 1.6, 1.0)
"""The machine's phase, per request index: a slow phase makes every step 1.6x longer."""


class Machine:
    """Both engines run on it: its phase moves with the pair, not with the engine."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []

    def phase(self) -> float:
        return PHASES[(len(self.log) // 2) % len(PHASES)]


class _Engine:
    """Engine timings only (deterministic): ``step_s`` per token times the machine phase,
    with a little jitter by request so the pairs have a spread."""

    def __init__(self, name: str, machine: Machine, step_s: float, prefill_s: float = 0.05,
                 fail_at: int | None = None, model: str = "/m/model.gguf",
                 threads: str = "2") -> None:
        self.name, self.machine, self.step_s, self.prefill_s = name, machine, step_s, prefill_s
        self.fail_at = fail_at
        self.base_url = f"http://{name}"
        self.info_value = EngineInfo(name="llama-server", version="b1", build=f"b1-{name}",
                                     base_url=self.base_url, model_path=model,
                                     settings=(("threads", threads),))
        self.calls = 0

    def info(self) -> EngineInfo:
        return self.info_value

    def generate(self, request: GenerationRequest) -> Generation:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise EngineUnavailable(f"{self.name} went away")
        phase = self.machine.phase()
        self.machine.log.append((self.name, request.salt))
        jitter = 1 + 0.004 * ((len(self.machine.log) * 7) % 5 - 2)
        step = self.step_s * phase * jitter
        n = request.generate_tokens
        prefill = self.prefill_s * phase * jitter
        timings = EngineTimings(prompt_tokens=request.prompt_tokens, cached_prompt_tokens=0,
                                prefill_s=prefill, generated_tokens=n, decode_s=step * (n - 1))
        return Generation(request=request, sent_s=0.0,
                          chunk_times_s=tuple(prefill + step * i for i in range(n)),
                          chunk_tokens=(1,) * n, generated_tokens=n,
                          prompt_tokens=request.prompt_tokens, text="ab" * n,
                          stop_reason="limit", engine=timings)


def _pair(step_b: float = 0.01, step_c: float = 0.01, **kw: object) -> tuple[_Engine, _Engine, Machine]:
    m = Machine()
    return _Engine("base", m, step_b), _Engine("cand", m, step_c, **kw), m  # type: ignore[arg-type]


def _orders_run(salt: int) -> tuple[tuple[str, ...], tuple[str, ...], list[tuple[str, int]]]:
    base, cand, machine = _pair()
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=8, warmup=1),  # type: ignore[arg-type]
                       MeasureOptions(salt_base=salt))
    measured = machine.log[2:]
    ran = tuple("AB" if measured[2 * i][0] == "base" else "BA" for i in range(8))
    return ran, ab.orders, measured


def test_pairs_run_in_random_abba_blocks_on_the_same_prompts() -> None:
    seen = set()
    for salt in (7, 8, 9, 10, 11, 12):
        ran, recorded, measured = _orders_run(salt)
        assert ran == recorded  # the order each pair ran in is recorded
        assert all(ran[i] != ran[i + 1] for i in range(0, 8, 2))  # every block AB BA or BA AB
        assert [s for n, s in measured if n == "base"] == [s for n, s in measured if n == "cand"] \
            == list(range(salt, salt + 8))
        seen.add(ran)
    assert len(seen) > 1  # drawn per run, not one fixed order
    assert _orders_run(9)[1] == _orders_run(9)[1]  # the same salt replays the same order


def test_a_slower_candidate_is_a_regression_through_the_phases() -> None:
    base, cand, _ = _pair(step_c=0.0106)  # 5.7% slower decode
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=8, warmup=0))  # type: ignore[arg-type]
    decode = ab.verdict("decode")
    assert decode is not None and decode.verdict == "regression"
    assert ab.decode_ratio == pytest.approx(1 / 1.06, abs=0.01)
    ttft = ab.verdict("ttft")
    # one start a side cannot exclude a start's own level (1%), so never "unchanged" at 2%
    assert ttft is not None and ttft.verdict == "inconclusive" and not ttft.flagged
    assert "allowed a level of 1.0% of its own" in ttft.reason
    assert ab.regressed and ab.pairs == 8
    assert ab.candidate.notes[-1] == ab.describe()
    assert ab.describe().startswith("same-run A/B against control b1-base: decode regression")
    assert len(ab.control.samples) == len(ab.candidate.samples) == 8


def test_the_same_engine_twice_is_not_flagged() -> None:
    base, cand, _ = _pair()
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=8, warmup=0))  # type: ignore[arg-type]
    assert not any(v.flagged for v in ab.verdicts)


def test_adaptive_pairs_stop_when_the_ratio_is_known() -> None:
    base, cand, _ = _pair()
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=20, warmup=0),  # type: ignore[arg-type]
                       MeasureOptions(adaptive=True, target_interval=0.02))
    assert 4 <= ab.pairs < 20 and ab.pairs % 2 == 0
    assert "decode ratio known to" in ab.stopped


class _Clock:
    """``time`` for bench.ab: every reading is ``step`` seconds after the last."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def test_a_time_budget_stops_the_pairs_at_an_even_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_tokperf.bench.ab as ab_module

    monkeypatch.setattr(ab_module, "time", _Clock(10.0))  # a pair every 10 s
    base, cand, _ = _pair()
    # under a budget the clock decides, not the repetitions (4 here)
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=4, warmup=0),  # type: ignore[arg-type]
                       MeasureOptions(budget_s=55.0))
    # 50 s after 5 pairs (odd: one more), 60 s after 6: stopped there
    assert ab.pairs == 6
    assert ab.stopped == "the time budget of 55 s was spent (60 s)"
    assert ab.stopped in ab.describe()


def test_the_budget_is_split_over_server_starts_each_restarted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_tokperf.bench.ab as ab_module

    monkeypatch.setattr(ab_module, "time", _Clock(5.0))
    base, cand, machine = _pair()
    restarts: list[bool] = []

    def restart(candidate_first: bool) -> tuple[_Engine, _Engine, tuple[int, ...]]:
        restarts.append(candidate_first)
        return base, cand, (100 + len(restarts),)

    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=4, warmup=1),  # type: ignore[arg-type]
                       MeasureOptions(budget_s=120.0), starts=3,
                       restart=restart)  # type: ignore[arg-type]
    assert len(restarts) == 2  # before the second and the third start
    assert sorted(set(ab.starts)) == [0, 1, 2] and len(ab.starts) == ab.pairs
    assert all(ab.starts.count(s) >= 2 and ab.starts.count(s) % 2 == 0 for s in range(3))
    warmups = [salt for _, salt in machine.log if salt >= 10**6]
    assert len(warmups) == 6  # each start warmed up anew, both sides
    decode = ab.verdict("decode")
    assert decode is not None and "from 3 server starts a side" in decode.reason
    assert "over 3 server starts a side" in ab.describe()
    # no way to restart (an attached engine): one start, whatever was asked
    one = run_paired_ab(base, cand, Workload(16, 11, repetitions=4, warmup=0),  # type: ignore[arg-type]
                        MeasureOptions(budget_s=40.0), starts=3)
    assert set(one.starts) == {0}


def test_the_budget_holds_however_dear_a_start_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_tokperf.bench.ab as ab_module

    clock = _Clock(0.1)
    monkeypatch.setattr(ab_module, "time", clock)
    base, cand, _ = _pair()

    def restart(candidate_first: bool) -> tuple[_Engine, _Engine, tuple[int, ...]]:
        clock.now += load  # a model that takes this long to load
        return base, cand, ()

    work = Workload(16, 11, repetitions=4, warmup=0)
    for load, budget, starts in ((0.0, 10.0, {4}), (0.0, 240.0, {32}), (30.0, 240.0, {8, 9})):
        clock.now = 0.0
        ab = run_paired_ab(base, cand, work, MeasureOptions(budget_s=budget),  # type: ignore[arg-type]
                           starts=32, restart=restart)  # type: ignore[arg-type]
        # 4 starts in 10 s (2.5 s each at least), 32 in 240 s; with 30 s loads, what fits
        assert len(set(ab.starts)) in starts, (load, budget, sorted(set(ab.starts)))
        assert clock.now <= budget + load + 1.0


def test_a_failed_restart_keeps_the_pairs_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_tokperf.bench.ab as ab_module

    monkeypatch.setattr(ab_module, "time", _Clock(5.0))
    base, cand, _ = _pair()

    def restart(candidate_first: bool) -> tuple[_Engine, _Engine, tuple[int, ...]]:
        raise EngineUnavailable("llama-server did not come up")

    with pytest.raises(MeasurementError, match=r"restarting the servers for start 2 of 4 "
                                               r"failed: llama-server did not come up") as info:
        run_paired_ab(base, cand, Workload(16, 11, repetitions=4, warmup=0),  # type: ignore[arg-type]
                      MeasureOptions(budget_s=100.0), starts=4,
                      restart=restart)  # type: ignore[arg-type]
    partial = info.value.partial
    assert partial is not None and partial.pairs >= 4  # type: ignore[attr-defined]


@pytest.mark.parametrize("budget", [0.0, -5.0, float("nan"), float("inf")])
def test_a_budget_that_is_not_a_positive_time_is_refused(budget: float) -> None:
    base, cand, _ = _pair()
    with pytest.raises(ConfigError, match=f"not {budget!r}"):
        run_paired_ab(base, cand, Workload(16, 11, repetitions=4, warmup=0),  # type: ignore[arg-type]
                      MeasureOptions(budget_s=budget))
    assert base.calls == 0  # refused before anything was measured


def test_different_models_are_refused_naming_what_differs() -> None:
    base, cand, _ = _pair(model="/m/other.gguf", threads="4")
    with pytest.raises(ConfigError, match=r"not a like-for-like pair: model: control 'model.gguf', "
                                          r"candidate 'other.gguf'; threads: control '2', candidate '4'"):
        run_paired_ab(base, cand, Workload(16, 11, repetitions=4))  # type: ignore[arg-type]
    assert base.calls == cand.calls == 0


def test_a_named_control_model_is_compared_and_said_to_differ() -> None:
    base, cand, _ = _pair(model="/m/other.gguf")
    assert like_for_like(base.info(), cand.info(), control_model_given=True) == (
        "the models differ: control 'model.gguf', candidate 'other.gguf' (each side reads "
        "its own weights, so one server start can carry a level of its own: repeat over "
        "starts before trusting a few percent, docs/ci-and-builds.md)")
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=4, warmup=0),  # type: ignore[arg-type]
                       control_model_given=True)
    assert "the models differ" in ab.describe()


def test_a_side_dying_names_it_and_keeps_the_pairs() -> None:
    base, cand, _ = _pair(fail_at=4)
    with pytest.raises(MeasurementError, match=r"same-run A/B, candidate side \(http://cand\) "
                       r"failed at pair 4: .*cand went away; 3 pair\(s\) measured before are kept") as info:
        run_paired_ab(base, cand, Workload(16, 11, repetitions=6, warmup=0))  # type: ignore[arg-type]
    partial = info.value.partial
    assert partial is not None and partial.pairs == 3  # type: ignore[attr-defined]
    assert "the candidate side failed" in partial.stopped  # type: ignore[attr-defined]


def test_the_same_engine_object_on_both_sides_is_refused() -> None:
    base, _, _ = _pair()
    with pytest.raises(ConfigError, match="same engine object"):
        run_paired_ab(base, base, Workload(16, 11))  # type: ignore[arg-type]


class _Crowded(_Engine):
    """An engine whose process clock is read: on every ``crowd``-th request a neighbour
    holds the CPU for half of its decode (the wall time doubles, the clock says so)."""

    def __init__(self, *args: object, crowd: int = 0, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.crowd = crowd

    def generate(self, request: GenerationRequest) -> Generation:
        g = super().generate(request)
        crowded = self.crowd and self.calls % self.crowd == 0
        span = g.chunk_times_s[-1] - g.chunk_times_s[0]
        wait = span if crowded else 0.0  # the neighbour doubles the decode window
        assert g.engine is not None and g.engine.decode_s is not None
        timings = replace(g.engine, decode_s=g.engine.decode_s + wait)
        first = g.chunk_times_s[0]
        times = (first, *(first + (t - first) * (2 if crowded else 1) for t in g.chunk_times_s[1:]))
        run_ns = int(span * 1e9)
        marks = ((0.0, ThreadTimes({1: (0, 0)})), (first, ThreadTimes({1: (int(first * 1e9), 0)})),
                 (times[-1], ThreadTimes({1: (int(first * 1e9) + run_ns, int(wait * 1e9))})))
        return replace(g, chunk_times_s=times, engine=timings, clock_marks=marks)


def test_a_neighbour_taking_the_cpu_is_not_the_candidates_regression() -> None:
    """Every second candidate request loses half its decode to another process: on the
    wall clock that is a large regression; net of the engine's wait for a CPU the two
    builds are the same, and the A/B says which clock it judged."""
    m = Machine()
    base = _Crowded("base", m, 0.01)
    cand = _Crowded("cand", m, 0.01, crowd=2)
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=8, warmup=0))  # type: ignore[arg-type]
    decode = ab.verdict("decode")
    assert decode is not None and not decode.flagged, decode.reason
    assert abs(decode.relative_change) < 0.01
    assert "decode, prefill, ttft judged net of the engines' wait for a CPU" in ab.describe()
    assert "0% of the control's and 25% of the candidate's decode time" in ab.describe()
    wall = [t.engine_decode_tokens_per_s / s.engine_decode_tokens_per_s
            for s, t in zip(ab.control.samples, ab.candidate.samples)
            if s.engine_decode_tokens_per_s and t.engine_decode_tokens_per_s]
    assert min(wall) < 0.55  # what the wall clock would have judged


def test_a_starved_client_keeps_the_decode_net_of_the_wait() -> None:
    """The client got the first token late and the other ten in a burst, after the
    engine's thread had done most of its decode (it ran 1 ms of the client's 40 ms window
    and waited 6 ms): the repetition still has a net decode, from the request's working
    threads, so an A/B does not fall back to wall time for decode (it did, under a build
    running beside the suite: "prefill, ttft judged net ...")."""
    g = _Engine("base", Machine(), 0.01).generate(GenerationRequest(16, 11))
    first = g.chunk_times_s[0]
    times = (first, *(first + 0.004 * i for i in range(1, 11)))
    marks = ((0.0, ThreadTimes({1: (0, 0), 2: (0, 0)})),
             (first, ThreadTimes({1: (40 * 10**6, 4 * 10**6), 2: (10**5, 0)})),
             (times[-1], ThreadTimes({1: (41 * 10**6, 10 * 10**6), 2: (10**5, 0)})))
    sample = to_sample(replace(g, chunk_times_s=times, clock_marks=marks))
    assert sample.decode_wait_s == pytest.approx(0.006)
    assert sample.net_decode_tokens_per_s is not None
    assert sample.net_decode_tokens_per_s > sample.engine_decode_tokens_per_s  # type: ignore[operator]


def test_without_the_engines_clock_the_a_b_judges_wall_time() -> None:
    base, cand, _ = _pair(step_c=0.0106)
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=8, warmup=0))  # type: ignore[arg-type]
    assert ab.clock == "" and "judged net" not in ab.describe()


def test_a_verdict_measured_busy_says_so_and_decides_no_gate() -> None:
    from pytest_tokperf.report.formats import ab_document
    from pytest_tokperf.results import MachineLoad

    base, cand, _ = _pair(step_c=0.0106)
    ab = run_paired_ab(base, cand, Workload(16, 11, repetitions=8, warmup=0))  # type: ignore[arg-type]
    assert ab.regressed and not ab.busy and ab.decides() and ab.decides(BusyPolicy("judge"))
    busy = MachineLoad(wall_s=1.0, cpus=2, busy_cpus=2.0, engine_cpus=0.4, own_cpus=0.0,
                       steal=0.0, run_queue=3.0)
    loaded = replace(ab, candidate=replace(ab.candidate, load=busy))
    assert loaded.busy and loaded.regressed
    assert not loaded.decides() and loaded.decides(BusyPolicy("judge"))
    assert loaded.decides(BusyPolicy("fail"))
    assert "decode regression (measured busy)" in loaded.describe()
    assert "a reading, not a gate's verdict" in loaded.describe()
    doc = ab_document([("t::x", loaded)])["ab"][0]
    assert doc["busy"] is True and "others 1.6 of 2 CPUs" in doc["load"]
