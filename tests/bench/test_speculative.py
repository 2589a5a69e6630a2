"""Speculative A/B arithmetic and ordering, and the draft flags a started server gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tokperf.launch.process import LaunchSpec, llama_server_command
from pytest_tokperf.errors import EngineUnavailable, MeasurementError
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.results import EngineInfo, EngineTimings, Generation, GenerationRequest, Workload
from pytest_tokperf.bench.speculative import run_speculative_ab


class _Engine:
    """Generates at a fixed rate; a drafting one reports drafted/accepted tokens."""

    def __init__(self, name: str, log: list[tuple[str, int, int]], step_s: float,
                 drafted: int | None = None, accepted: int | None = None,
                 fail_at: int | None = None, one_read: bool = False,
                 timed: bool = True) -> None:
        self.name, self.log, self.step_s = name, log, step_s
        self.one_read, self.timed = one_read, timed
        self.drafted, self.accepted, self.fail_at = drafted, accepted, fail_at
        self.info_value = EngineInfo(name="llama-server", version="b1", build="b1-x",
                                     base_url=f"http://{name}", speculative=drafted is not None)

    def info(self) -> EngineInfo:
        return self.info_value

    def generate(self, request: GenerationRequest) -> Generation:
        self.log.append((self.name, request.salt, request.prompt_tokens))
        if self.fail_at is not None and len([e for e in self.log if e[0] == self.name]) == self.fail_at:
            raise EngineUnavailable(f"{self.name} went away")
        n = request.generate_tokens
        timings = EngineTimings(prompt_tokens=request.prompt_tokens, cached_prompt_tokens=0,
                                prefill_s=0.05, generated_tokens=n, decode_s=self.step_s * (n - 1),
                                draft_tokens=self.drafted, draft_accepted_tokens=self.accepted)
        if not self.timed:
            timings = EngineTimings(prompt_tokens=request.prompt_tokens)
        # A starved client reads the whole answer at once: every event, one arrival time
        arrival = (lambda i: 0.05 + self.step_s * (n - 1)) if self.one_read else (
            lambda i: 0.05 + self.step_s * i)
        return Generation(request=request, sent_s=0.0,
                          chunk_times_s=tuple(arrival(i) for i in range(n)),
                          chunk_tokens=(1,) * n, generated_tokens=n,
                          prompt_tokens=request.prompt_tokens, text="ab" * n,
                          stop_reason="limit", engine=timings)


def test_ab_interleaves_rounds_on_identical_prompts_and_sums_acceptance() -> None:
    log: list[tuple[str, int, int]] = []
    base = _Engine("base", log, step_s=0.010)
    fast = _Engine("spec", log, step_s=0.004, drafted=30, accepted=24)
    ab = run_speculative_ab(base, fast, Workload(16, 11, repetitions=3, warmup=1),  # type: ignore[arg-type]
                            MeasureOptions(salt_base=7))
    measured = log[2:]  # one warm-up round each first
    # the side that goes first alternates, so drift within a round hits both alike
    assert [name for name, _, _ in measured] == ["base", "spec", "spec", "base", "base", "spec"]
    assert [salt for name, salt, _ in measured if name == "base"] == \
        [salt for name, salt, _ in measured if name == "spec"] == [7, 8, 9]
    assert {salt for _, salt, _ in log[:2]}.isdisjoint({7, 8, 9})
    assert ab.multiplier == pytest.approx(2.5) and ab.engine_multiplier == pytest.approx(2.5)
    assert (ab.drafted_tokens, ab.accepted_tokens) == (90, 72)
    assert ab.acceptance_rate == pytest.approx(0.8)
    assert len(ab.base.samples) == len(ab.accelerated.samples) == 3
    assert ab.accelerated.notes[-1] == (
        "speculative A/B: 2.50x the base decode (250.0 vs 100.0 tok/s, engine clock), "
        "draft acceptance 80% (72 of 90)")
    assert not any("speculative" in n for n in ab.base.notes)


def test_ab_without_draft_counts_says_so() -> None:
    log: list[tuple[str, int, int]] = []
    ab = run_speculative_ab(_Engine("a", log, 0.01), _Engine("b", log, 0.02),  # type: ignore[arg-type]
                            Workload(16, 11, repetitions=2, warmup=0))
    assert ab.acceptance_rate is None and ab.multiplier == pytest.approx(0.5)
    assert ab.accelerated.notes[-1].endswith("the engine reported no draft counts")


def test_a_side_read_at_once_is_judged_on_the_engine_clock() -> None:
    # Under two busy loops a starved client read a whole answer in one read: the client
    # timed no decode on that side, and the multiplier was None although the engine had
    # timed every repetition on both sides (the suite's one failure under load).
    log: list[tuple[str, int, int]] = []
    ab = run_speculative_ab(_Engine("base", log, 0.01),  # type: ignore[arg-type]
                            _Engine("spec", log, 0.004, drafted=30, accepted=0, one_read=True),
                            Workload(16, 11, repetitions=2, warmup=0))
    assert ab.accelerated.decode_tokens_per_s is None and ab.client_multiplier is None
    assert ab.engine_clock and ab.multiplier == pytest.approx(2.5)
    assert ab.accelerated.notes[-1].startswith(
        "speculative A/B: 2.50x the base decode (250.0 vs 100.0 tok/s, engine clock)")


def test_without_engine_timings_the_multiplier_is_the_clients_and_names_the_blind_side() -> None:
    log: list[tuple[str, int, int]] = []
    timed_by_us = run_speculative_ab(
        _Engine("base", log, 0.01, timed=False),  # type: ignore[arg-type]
        _Engine("spec", log, 0.004, drafted=30, accepted=30),  # type: ignore[arg-type]
        Workload(16, 11, repetitions=2, warmup=0))
    assert not timed_by_us.engine_clock and timed_by_us.multiplier == pytest.approx(2.5)
    assert "(250.0 vs 100.0 tok/s, client clock)" in timed_by_us.accelerated.notes[-1]
    blind = run_speculative_ab(
        _Engine("base", log, 0.01, timed=False, one_read=True),  # type: ignore[arg-type]
        _Engine("spec", log, 0.004, drafted=30, accepted=30),  # type: ignore[arg-type]
        Workload(16, 11, repetitions=2, warmup=0))
    assert blind.multiplier is None
    assert blind.accelerated.notes[-1].startswith(
        "speculative A/B: no multiplier: the base side timed no decode (its tokens arrived "
        "at once")


def test_ab_failure_keeps_the_base_rounds_measured() -> None:
    log: list[tuple[str, int, int]] = []
    base = _Engine("base", log, step_s=0.01)
    fast = _Engine("spec", log, step_s=0.004, drafted=3, accepted=3, fail_at=2)
    with pytest.raises(MeasurementError, match="speculative A/B, speculative side: .*spec went away") as info:
        run_speculative_ab(base, fast, Workload(16, 11, repetitions=3, warmup=0))  # type: ignore[arg-type]
    partial = info.value.partial  # round 2 began with the drafting side, which failed
    assert partial is not None and len(partial.samples) == 1


def _command(draft: Path | None, help_text: str) -> list[str]:
    spec = LaunchSpec(binary=Path("/bin/llama-server"), model=Path("/m.gguf"),
                      log_path=Path("/tmp/l.log"), threads=2, draft_model=draft)
    return llama_server_command(spec, 8080, help_text)


def test_a_draft_adds_md_and_the_draft_type_where_the_build_has_it() -> None:
    assert "-md" not in _command(None, "--spec-type")
    with_type = _command(Path("/d.gguf"), "--spec-type TYPE --cache-ram N")
    assert with_type[with_type.index("-md") + 1] == "/d.gguf"
    assert with_type[with_type.index("--spec-type") + 1] == "draft-simple"
    older = _command(Path("/d.gguf"), "--cache-ram N")
    assert "-md" in older and "--spec-type" not in older


def test_the_drafting_server_gets_its_own_start_up_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The main server's deadline is long past when a test asks for a drafting server
    # minutes later (the main job's last test timed out at once: "not ready within 120 s").
    import time

    from pytest_tokperf.bench import session as session_module
    from pytest_tokperf.bench.session import EngineSession
    from pytest_tokperf.settings import resolve

    values = {"engine": "llama-server", "db": "off"}
    settings = resolve(lambda name: values.get(name), lambda key: None, {}, tmp_path)
    engine_session = EngineSession(settings=settings, log_dir=tmp_path)
    engine_session._launch = LaunchSpec(binary=Path("/bin/true"), model=tmp_path / "m.gguf",
                                        log_path=tmp_path / "main.log", threads=1,
                                        startup_deadline_s=time.monotonic() - 300)
    started: list[LaunchSpec] = []

    def start(spec: LaunchSpec) -> None:
        started.append(spec)
        raise EngineUnavailable("stop here: the spec is what this test reads")

    monkeypatch.setattr(EngineSession, "engine", lambda self: None)
    monkeypatch.setattr(EngineSession, "draft_path", lambda self, choice=None: tmp_path / "d.gguf")
    monkeypatch.setattr(session_module, "start_llama_server", start)
    with pytest.raises(EngineUnavailable, match="stop here"):
        engine_session.speculative_engine("small")
    assert started and started[0].startup_deadline_s is None
    assert started[0].draft_model == tmp_path / "d.gguf"
