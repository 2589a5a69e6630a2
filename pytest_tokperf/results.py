"""Frozen value types that cross module boundaries; SI units inside."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

Progress = Callable[[str], None]
"""Receives one human-readable line of progress (a terminal line, a log line)."""

Verdict = Literal["pass", "fail", "suspect", "unchecked", "unstable", "busy", "error"]
"""pass/fail against the efficiency floor; suspect: far above the ceiling (the ceiling is
wrong); unchecked: no floor; unstable: judged decode CV above ``tokperf_max_cv`` (never
stored as pass); error: the measurement broke off (earlier samples still stored)."""


@dataclass(frozen=True, slots=True)
class EngineTimings:
    """The engine's own account of one request: ``decode_s`` spans first to last token (N-1
    intervals), ``prefill_s`` to the first sampled token."""

    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    prefill_s: float | None = None
    generated_tokens: int | None = None
    decode_s: float | None = None
    draft_tokens: int | None = None
    draft_accepted_tokens: int | None = None
    dropped: tuple[str, ...] = ()
    """What the engine sent that could not be used (``timings.predicted_ms=nan (not a
    finite number)``); the figures it would have given are None (``engines.values``)."""

    @property
    def decode_tokens_per_s(self) -> float | None:
        if self.generated_tokens is None or self.decode_s is None or self.decode_s <= 0:
            return None
        if self.generated_tokens < 2:
            return None
        return (self.generated_tokens - 1) / self.decode_s

    @property
    def prefill_tokens_per_s(self) -> float | None:
        if not self.prompt_tokens or self.prefill_s is None or self.prefill_s <= 0:
            return None
        return self.prompt_tokens / self.prefill_s

    @property
    def speculative(self) -> bool:
        return self.draft_tokens is not None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One streamed generation at exact token counts; ``salt`` makes the prompt's start
    unique, ``reuse_prefix`` allows the prefix cache."""

    prompt_tokens: int
    generate_tokens: int
    salt: int = 0
    timeout_s: float = 600.0
    reuse_prefix: bool = False
    chat: bool = False
    """Through the chat endpoint and model template (reasoning separated)."""
    clock: Callable[[], object] | None = field(default=None, compare=False, repr=False)
    """The engine process's own clock, read at the first content chunk and at the end."""
    stop: Callable[[], bool] | None = field(default=None, compare=False, repr=False)
    """Asked between reads, at least every second: True ends the stream (``RequestStopped``)."""


@dataclass(frozen=True, slots=True)
class Generation:
    """What the client saw for one request: content chunks' arrival times and tokens."""

    request: GenerationRequest
    sent_s: float
    chunk_times_s: tuple[float, ...]
    chunk_tokens: tuple[int, ...]
    generated_tokens: int
    prompt_tokens: int | None
    text: str
    stop_reason: str | None
    engine: EngineTimings | None
    chunk_reasoning: tuple[bool, ...] = ()
    """Per chunk, True for reasoning content; empty when the engine does not separate it."""
    client_s_per_event: float | None = None
    """The client's own time per streamed event (near the chunk gap it sets the pace)."""
    clock_marks: tuple[tuple[float, object], tuple[float, object], tuple[float, object]] | None = None
    """(client time, ``request.clock()``) at send, first content and end; or None."""


LOADED_SHARE = 0.25
"""Share of the CPUs used by other processes at which a figure is flagged as loaded."""
LOADED_STEAL = 0.05
"""The hypervisor taking this share of CPU time (or more) flags a figure the same way..."""
STEAL_MIN_CPU_S = 2.0
"""...over a window of at least this many CPU-seconds (wall x CPUs)."""
BUSY_NOTE = "machine busy:"
"""How a flagged figure's note begins (code that lets a busy machine pass matches on it)."""


@dataclass(frozen=True, slots=True)
class MachineLoad:
    """The machine's state while repetitions ran, in CPU-seconds per wall second;
    ``engine_cpus`` None: engine unknown; ``busy_cpus`` None: no /proc (``detail`` says
    why)."""

    wall_s: float
    cpus: int
    busy_cpus: float | None
    engine_cpus: float | None = None
    own_cpus: float | None = None
    steal: float | None = None
    """Share of all CPU time the hypervisor gave to other guests (0.1 = 10%)."""
    run_queue: float | None = None
    """Other processes' runnable threads (mean of the samples)."""
    run_queue_max: int | None = None
    load_1m: float | None = None
    samples: int = 0
    """How many run-queue samples the figures hold."""
    detail: str = ""

    @classmethod
    def unknown(cls, detail: str) -> MachineLoad:
        return cls(wall_s=0.0, cpus=0, busy_cpus=None, detail=detail)

    @property
    def known(self) -> bool:
        return self.busy_cpus is not None

    @property
    def others_cpus(self) -> float | None:
        """Busy CPUs less the engine's and tokperf's (None: engine not known)."""
        if self.busy_cpus is None or self.engine_cpus is None:
            return None
        return max(0.0, self.busy_cpus - self.engine_cpus - (self.own_cpus or 0.0))

    @property
    def loaded(self) -> bool:
        """Did the neighbours (or the hypervisor) take a notable share of the machine?"""
        others = self.others_cpus
        if others is not None and self.cpus and others >= LOADED_SHARE * self.cpus:
            return True
        return (self.steal is not None and self.steal >= LOADED_STEAL
                and self.wall_s * self.cpus >= STEAL_MIN_CPU_S)

    def describe(self, during: str = "during the repetitions") -> str:
        """One clause: what the machine did ``during`` its window."""
        if not self.known:
            return f"machine load unknown ({self.detail})" if self.detail else \
                "machine load unknown"
        queue = f"run queue {self.run_queue:.1f}" if self.run_queue is not None else \
            "run queue unknown"
        steal = f"steal {self.steal:.0%}" if self.steal is not None else "steal unknown"
        others = self.others_cpus
        if others is None:
            busy = self.busy_cpus or 0.0
            return (f"the machine was busy {busy:.1f} of {self.cpus} CPUs, the engine's "
                    f"share unknown ({queue} with the engine's threads, {steal})")
        return f"other processes used {others:.1f} of {self.cpus} CPUs {during} ({queue}, {steal})"

    def brief(self) -> str:
        """The same reading in a few words, for a line that shows two side by side."""
        if not self.known:
            return "unknown"
        others = self.others_cpus
        busy = (f"others {others:.1f} of {self.cpus} CPUs" if others is not None else
                f"all processes {self.busy_cpus or 0:.1f} of {self.cpus} CPUs, the engine's "
                "share unknown")
        queue = f", run queue {self.run_queue:.1f}" if self.run_queue is not None else ""
        flag = ", busy" if self.loaded else ""
        return f"{busy}{queue}, steal {self.steal or 0:.0%}{flag}"

    def warning(self) -> str | None:
        """The sentence a figure measured on a loaded machine carries, else None."""
        if not self.loaded:
            return None
        return (f"{BUSY_NOTE} {self.describe()}: this figure may be the neighbours', not "
                f"the engine's")


def combine_loads(loads: Sequence[MachineLoad | None]) -> MachineLoad | None:
    """One reading for several windows, weighted by wall time (run queue by samples)."""
    known = [x for x in loads if x is not None and x.known and x.wall_s > 0]
    if not known:
        return next((x for x in loads if x is not None), None)
    wall = sum(x.wall_s for x in known)

    def weighted(values: list[tuple[float | None, float]]) -> float | None:
        if not values or any(v is None for v, _ in values):
            return None
        total = sum(w for _, w in values)
        return sum((v or 0.0) * w for v, w in values) / total if total > 0 else None

    def by_wall(name: str) -> float | None:
        return weighted([(getattr(x, name), x.wall_s) for x in known])

    queued = [x for x in known if x.run_queue is not None and x.samples]
    maxima = [x.run_queue_max for x in known if x.run_queue_max is not None]
    return MachineLoad(
        wall_s=wall, cpus=max(x.cpus for x in known), busy_cpus=by_wall("busy_cpus"),
        engine_cpus=by_wall("engine_cpus"), own_cpus=by_wall("own_cpus"),
        steal=by_wall("steal"),
        run_queue=weighted([(x.run_queue, x.samples) for x in queued]) if queued else None,
        run_queue_max=max(maxima) if maxima else None, load_1m=known[-1].load_1m,
        samples=sum(x.samples for x in known), detail=known[-1].detail,
    )


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured repetition: client figures beside the engine's own. ``ttft_s`` and
    ``text_chars`` are None where the source did not measure them (an imported llama-bench
    row has no request, so no first token and no text)."""

    ttft_s: float | None
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    prompt_tokens: int
    generated_tokens: int
    inter_token_s: tuple[float, ...]
    engine_prefill_s: float | None
    engine_prefill_tokens_per_s: float | None
    engine_decode_tokens_per_s: float | None
    cached_prompt_tokens: int | None
    speculative: bool
    text_chars: int | None
    draft_tokens: int | None = None
    draft_accepted_tokens: int | None = None
    reasoning_tokens: int | None = None
    """Generated tokens the engine streamed as reasoning (None: it does not separate)."""
    answer_ttft_s: float | None = None
    """Request sent -> first non-reasoning token (None when there is none)."""
    round_index: int | None = None
    """Which measured round the request belonged to (concurrent streams share a round)."""
    round_wall_s: float | None = None
    """That round's wall time, first send to last token of any stream."""
    load: MachineLoad | None = None
    """The machine during this repetition's round (None: not sampled)."""
    decode_wait_s: float | None = None
    """Time the engine's threads waited for a CPU during decode (None: not readable)."""
    decode_wait_share: float | None = None
    """``decode_wait_s`` over the decode window: 0.3 = neighbours took 30% of it."""
    ttft_wait_s: float | None = None
    """The same wait between sending the request and its first token."""

    @property
    def net_ttft_s(self) -> float | None:
        """TTFT less the time the engine waited for a CPU before its first token."""
        if self.ttft_wait_s is None or self.ttft_s is None:
            return None
        net = self.ttft_s - self.ttft_wait_s
        return net if net > 0 else None

    @property
    def net_prefill_tokens_per_s(self) -> float | None:
        """The prompt over ``net_ttft_s`` (None without the engine's clock)."""
        net = self.net_ttft_s
        return self.prompt_tokens / net if net and self.prompt_tokens else None

    @property
    def net_decode_tokens_per_s(self) -> float | None:
        """Judged decode net of the engine's CPU wait (None without the engine's clock)."""
        rate = (self.engine_decode_tokens_per_s if self.engine_decode_tokens_per_s
                else self.decode_tokens_per_s)
        if rate is None or self.decode_wait_s is None or self.generated_tokens < 2:
            return None
        per_token = 1 / rate - self.decode_wait_s / (self.generated_tokens - 1)
        return 1 / per_token if per_token > 0 else None

    @property
    def chars_per_s(self) -> float | None:
        """Characters a reader sees per second during steady decode."""
        if self.text_chars is None or not self.decode_tokens_per_s or not self.generated_tokens:
            return None
        return self.text_chars / self.generated_tokens * self.decode_tokens_per_s


class DecodeFigures(Protocol):
    """What the judged-decode rule reads of a repetition (a ``Sample`` or a stored one)."""

    @property
    def decode_tokens_per_s(self) -> float | None: ...

    @property
    def engine_decode_tokens_per_s(self) -> float | None: ...


def judged_decode_values(samples: Sequence[DecodeFigures]) -> list[float]:
    """Per repetition, the judged decode: the engine's timing if all have it, else ours."""
    engine = [s.engine_decode_tokens_per_s for s in samples]
    chosen = engine if samples and all(engine) else [s.decode_tokens_per_s for s in samples]
    return [v for v in chosen if v is not None]


@dataclass(frozen=True, slots=True)
class Summary:
    """Median and dispersion of one figure over the repetitions."""

    median: float
    mean: float
    stdev: float
    minimum: float
    maximum: float
    n: int

    @property
    def cv(self) -> float:
        return self.stdev / self.mean if self.mean else float("nan")

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Summary | None:
        clean = [v for v in values if v is not None]
        if not clean:
            return None
        return cls(
            median=statistics.median(clean),
            mean=statistics.fmean(clean),
            stdev=statistics.stdev(clean) if len(clean) > 1 else 0.0,
            minimum=min(clean),
            maximum=max(clean),
            n=len(clean),
        )


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """Who answered: engine name, version/build and what it says about itself."""

    name: str
    version: str | None
    build: str | None
    base_url: str
    backend: str | None = None
    model_path: str | None = None
    model_name: str | None = None
    context_size: int | None = None
    threads: int | None = None
    speculative: bool = False
    settings: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = ()
    """Why this is not a clean base measurement, one sentence each."""


@dataclass(frozen=True, slots=True)
class Workload:
    """The parameters that define what was measured (part of the series key)."""

    prompt_tokens: int
    generate_tokens: int
    depth_tokens: int = 0
    concurrency: int = 1
    repetitions: int = 5
    warmup: int = 1
    cached_prefix_tokens: int = 0
    """The first N tokens were sent just before, for a warm TTFT (0 = cold)."""
    chat: bool = False
    """Through the chat endpoint and model template instead of a raw prompt."""


@dataclass(frozen=True, slots=True)
class BenchResult:
    """Everything one ``tok_bench`` call measured, ready to store and to assert on."""

    workload: Workload
    engine: EngineInfo
    samples: tuple[Sample, ...]
    ttft_s: Summary | None
    """None: not measured (an imported llama-bench row)."""
    decode_tokens_per_s: Summary | None
    prefill_tokens_per_s: Summary | None
    engine_decode_tokens_per_s: Summary | None
    engine_prefill_tokens_per_s: Summary | None
    inter_token_p50_s: float | None
    inter_token_p90_s: float | None
    inter_token_p99_s: float | None
    decode_agreement: float | None
    """Median relative difference client vs engine decode tok/s (0.001 = 0.1%)."""
    ttft_minus_engine_prefill_s: float | None
    notes: tuple[str, ...] = field(default=())
    aggregate_tokens_per_s: Summary | None = None
    """Output tokens of all streams per second of wall time, prefill included."""
    load: MachineLoad | None = None
    """The machine over all measured repetitions (``combine_loads`` of the samples')."""

    @property
    def rounds(self) -> list[tuple[float, float]]:
        """Per measured round: (aggregate output tok/s, requests/s) over its wall time."""
        grouped: dict[int, list[Sample]] = {}
        for s in self.samples:
            if s.round_index is not None and s.round_wall_s:
                grouped.setdefault(s.round_index, []).append(s)
        return [(sum(s.generated_tokens for s in group) / group[0].round_wall_s,
                 len(group) / group[0].round_wall_s)
                for group in grouped.values() if group[0].round_wall_s]

    @property
    def requests_per_s(self) -> Summary | None:
        """Requests completed per second of round wall time (all streams)."""
        return Summary.of([rps for _, rps in self.rounds])

    @property
    def chars_per_s(self) -> Summary | None:
        """Characters a reader sees per second of steady decode (``Sample.chars_per_s``)."""
        return Summary.of([s.chars_per_s for s in self.samples])

    @property
    def judged_decode_tokens_per_s(self) -> Summary | None:
        """The decode figure tokperf judges (``judged_decode_values``)."""
        if self.samples and all(s.engine_decode_tokens_per_s for s in self.samples):
            return self.engine_decode_tokens_per_s
        return self.decode_tokens_per_s


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Identity of a model file: what a stored figure was measured on."""

    file_name: str
    path: str | None = None
    file_bytes: int | None = None
    content_hash: str | None = None
    """sha256 of the GGUF header and the first MiB: cheap, and changes when the file does."""
    architecture: str | None = None
    parameter_count: int | None = None
    quant_types: tuple[str, ...] = ()
    file_type: str | None = None
    context_length: int | None = None


BandwidthSource = Literal[
    "explicit", "nvml", "apple-catalog", "catalog", "dmidecode", "measured", "split"
]
"""``split``: a model read partly from GPU and partly from RAM (``bandwidth_for``)."""


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """A memory bandwidth figure and where it came from."""

    bytes_per_s: float
    source: BandwidthSource
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HardwareInfo:
    """The machine the engine runs on, as far as it can be detected."""

    name: str
    kind: Literal["gpu", "apple", "cpu", "unknown"]
    driver: str | None = None
    memory_bytes: int | None = None
    spec_bandwidth: Bandwidth | None = None
    measured_bandwidth: Bandwidth | None = None
    peak_flops: float | None = None
    detail: str = ""

    @property
    def bandwidth(self) -> Bandwidth | None:
        """The figure a ceiling divides by: explicit beats measured beats spec."""
        for candidate in (self.spec_bandwidth, self.measured_bandwidth):
            if candidate is not None and candidate.source == "explicit":
                return candidate
        return self.measured_bandwidth or self.spec_bandwidth


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes one decode step reads from memory, from the model file's tensors."""

    architecture: str
    weights_bytes: int
    """Weight bytes streamed per generated token (embedding row, active experts only)."""
    kv_bytes_per_position: int
    """KV cache bytes read per earlier token in context (all layers, K and V)."""
    depth_tokens: int
    kv_type: str
    resident_bytes: int
    """All tensors in the file: what must fit in memory (KV not included)."""
    active_parameters: int
    total_parameters: int
    expert_count: int = 0
    experts_used: int = 0
    tied_output: bool = False
    warnings: tuple[str, ...] = ()

    @property
    def kv_bytes(self) -> int:
        return self.kv_bytes_per_position * self.depth_tokens

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes


@dataclass(frozen=True, slots=True)
class Ceiling:
    """How fast decode can be here: bandwidth / bytes per token, with its inputs."""

    bandwidth: Bandwidth
    footprint: Footprint
    decode_tokens_per_s: float
    prefill_tokens_per_s: float | None = None
    """Compute bound for prompt processing, when peak FLOP/s is known."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One invocation (a pytest session or a CLI run) and where it ran."""

    run_id: str
    started_at: str
    """ISO 8601 UTC."""
    host: str
    os: str
    python: str
    plugin_version: str
    pytest_version: str | None = None
    project_commit: str | None = None
    ci_provider: str | None = None
    ci_job: str | None = None
