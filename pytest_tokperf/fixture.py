"""``TokBench``: what a benchmark test calls, and the result it gets back.

The fixture gets its collaborators injected (an engine getter, a recorder, a
progress callback) and never reaches back into pytest, as pytest-benchmark's
``BenchmarkFixture`` does. Each call is recorded the moment it finishes, before any
assertion runs, so a failing floor never loses the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_tokperf.engines.base import Engine
from pytest_tokperf.errors import MeasurementError
from pytest_tokperf.measure import MeasureOptions, Progress, run_workload, validate_workload
from pytest_tokperf.results import BenchResult, Ceiling, Verdict, Workload

Recorder = Callable[[BenchResult, "Ceiling | None", Verdict], None]


@dataclass(frozen=True, slots=True)
class TokBenchResult:
    """A measured workload with its ceiling; offers the assertions tests want."""

    result: BenchResult
    ceiling: Ceiling | None = None

    @property
    def decode_tokens_per_s(self) -> float | None:
        s = self.result.decode_tokens_per_s
        return s.median if s else None

    @property
    def prefill_tokens_per_s(self) -> float | None:
        s = self.result.prefill_tokens_per_s
        return s.median if s else None

    @property
    def ttft_s(self) -> float:
        return self.result.ttft_s.median

    @property
    def efficiency(self) -> float | None:
        if self.ceiling is None or self.decode_tokens_per_s is None:
            return None
        return self.decode_tokens_per_s / self.ceiling.decode_tokens_per_s

    def assert_ttft(self, max_s: float) -> None:
        """Fail when the median time to first token is above ``max_s`` seconds."""
        __tracebackhide__ = True
        if self.ttft_s > max_s:
            raise AssertionError(
                f"TTFT {self.ttft_s * 1e3:.0f} ms (median of {self.result.ttft_s.n}) is above "
                f"the {max_s * 1e3:.0f} ms limit for a {self.result.workload.prompt_tokens}-token prompt"
            )

    def assert_usable(self, min_tokens_per_s: float = 5.0) -> None:
        """Fail when decode is slower than a reader can bear (default 5 tok/s)."""
        __tracebackhide__ = True
        decode = self.decode_tokens_per_s
        if decode is None or decode < min_tokens_per_s:
            shown = "no" if decode is None else f"{decode:.1f} tok/s"
            raise AssertionError(
                f"decode {shown} is below the usability floor of {min_tokens_per_s:g} tok/s "
                f"(reading speed is ~5-10 tok/s; below 2-3 tok/s streaming feels broken)"
            )


@dataclass
class TokBench:
    """Callable fixture value: ``tok_bench(prompt_tokens=..., generate_tokens=...)``."""

    engine: Callable[[], Engine]
    record: Recorder
    repetitions: int = 5
    warmup: int = 1
    options: MeasureOptions = MeasureOptions()
    progress: Progress | None = None
    ceiling_for: Callable[[BenchResult], Ceiling | None] | None = None
    calls: int = 0

    def __call__(
        self,
        prompt_tokens: int = 64,
        generate_tokens: int = 128,
        *,
        repetitions: int | None = None,
        warmup: int | None = None,
    ) -> TokBenchResult:
        __tracebackhide__ = True
        workload = Workload(
            prompt_tokens=prompt_tokens,
            generate_tokens=generate_tokens,
            repetitions=self.repetitions if repetitions is None else repetitions,
            warmup=self.warmup if warmup is None else warmup,
        )
        options = MeasureOptions(
            agreement_tolerance=self.options.agreement_tolerance,
            timeout_s=self.options.timeout_s,
            salt_base=self.options.salt_base + 1000 * self.calls,
        )
        self.calls += 1
        validate_workload(workload)
        try:
            result = run_workload(self.engine(), workload, options, self.progress)
        except MeasurementError as exc:
            if isinstance(exc.partial, BenchResult):
                self.record(exc.partial, None, "error")
            raise
        ceiling = self.ceiling_for(result) if self.ceiling_for is not None else None
        self.record(result, ceiling, "unchecked")
        return TokBenchResult(result=result, ceiling=ceiling)
