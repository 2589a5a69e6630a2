"""pytest glue only: options and ini keys, the ``tok_bench`` fixture, header, summary.

Everything it calls lives in the library (settings, session, measure, storage,
report); this module resolves settings once, keeps session state in
``config.stash`` and turns our errors into usage errors or clean test failures.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TypeVar
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_tokperf import settings as settings_mod
from pytest_tokperf.bench.ceilings import CeilingSource, kv_type_from_args
from pytest_tokperf.engines.registry import EngineRegistry
from pytest_tokperf.errors import ConfigError, StorageError, TokperfError
from pytest_tokperf.bench.fixture import WORKLOAD_DEFAULTS, SpeculativeOutcome, TokBench, TokBenchResult
from pytest_tokperf.bench.gate import Baseline, GateFinding, describe, judge, parse_baseline
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.bench.recorder import Recorder
from pytest_tokperf.report.table import Row, summary_table
from pytest_tokperf.report.formats import junit_properties
from pytest_tokperf.bench.session import EngineSession, check_model_file
from pytest_tokperf.settings import BUILTIN_MODELS, OPTIONS, Settings


@dataclass
class PluginState:
    settings: Settings
    session: EngineSession
    recorder: Recorder
    ceilings: CeilingSource
    baseline: Baseline
    rows: list[Row] = field(default_factory=list)
    findings: list[GateFinding] = field(default_factory=list)


STATE = pytest.StashKey[PluginState]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_tokperf import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def _help(spec: settings_mod.OptionSpec) -> str:
    text = spec.help
    if spec.default is not None and "default" not in text:
        text += f" (default {spec.default})"
    if spec.env:
        text += f" [env {spec.env_var}]"
    return text.replace("%", "%%")  # argparse %-formats help strings


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tokperf", "LLM engine performance (pytest-tokperf)")
    for spec in OPTIONS:
        group.addoption(spec.flag, dest=f"tokperf_{spec.name}", default=None,
                        metavar=spec.metavar, help=_help(spec))
        parser.addini(spec.ini, spec.help, default=None)
    group.addoption(
        "--tokperf-fail-on-regression", dest="tokperf_fail_on_regression", action="store_true",
        default=None, help="fail a test whose decode or TTFT regressed against the baseline "
        "(significant AND at least --tokperf-min-effect); noisy series are reported, not failed",
    )
    parser.addini("tokperf_fail_on_regression", "fail tests on regressions", type="bool",
                  default=False)
    group.addoption(
        "--tokperf-server-arg", dest="tokperf_server_arg", action="append", default=[],
        metavar="ARG", help="extra argument for a started llama-server (repeatable), "
        "e.g. --tokperf-server-arg=--flash-attn --tokperf-server-arg=on",
    )


def _project_dir(config: pytest.Config) -> Path:
    """Where .tokperf/ goes: the rootdir when an ini file fixed it, else the cwd."""
    if config.inipath is not None:
        return Path(config.rootpath)
    return Path(config.invocation_params.dir)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tokperf(repetitions=N, warmup=N, min_efficiency=F, prompt_tokens=N, generate_tokens=N, "
        "depth_tokens=N, concurrency=N, cached_prefix_tokens=N): per-test settings and "
        "workload defaults for tok_bench",
    )
    registry = EngineRegistry()
    try:
        config.hook.pytest_tokperf_add_engines(register=registry.register)
        settings = settings_mod.resolve(
            cli=lambda name: config.getoption(f"tokperf_{name}"),
            ini=config.getini,
            env=os.environ,
            rootdir=_project_dir(config),
            server_args=tuple(config.getoption("tokperf_server_arg") or ()),
            fail_on_regression=bool(config.getoption("tokperf_fail_on_regression")
                                    or config.getini("tokperf_fail_on_regression")),
            engine_names=registry.names(),
        )
        baseline = parse_baseline(settings.baseline)
        if settings.active and settings.url is None and settings.engine in (None, "llama-server"):
            from pytest_tokperf.engines.launcher import resolve_server_binary

            resolve_server_binary(settings.server_bin, settings.engine_version)
            if settings.model not in BUILTIN_MODELS:
                check_model_file(Path(settings.model).expanduser(),
                                 source=f"--tokperf-model {settings.model!r}")
        recorder = Recorder.open(settings.db) if settings.active else Recorder.disabled()
    except (ConfigError, StorageError) as exc:
        raise pytest.UsageError(str(exc)) from exc
    log_dir = _project_dir(config) / ".tokperf" / "logs"
    session = EngineSession(settings=settings, log_dir=log_dir, registry=registry)
    ceilings = CeilingSource(
        explicit_bandwidth=settings.bandwidth,
        threads=settings.threads,
        kv_type=kv_type_from_args(settings.server_args),
    )
    config.stash[STATE] = PluginState(
        settings=settings, session=session, recorder=recorder, ceilings=ceilings,
        baseline=baseline,
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None:
        return
    try:
        state.session.close()
    finally:
        state.recorder.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active:
        return []
    from pytest_tokperf.hardware.units import format_bandwidth

    s = state.settings
    db = str(s.db) if s.db else "off"
    lines = [f"tokperf: engine {s.engine}, {_engine_line(state)}; results db {db}"]
    hw = state.ceilings.detect()
    bw = hw.bandwidth
    source = (f"{format_bandwidth(bw.bytes_per_s)} ({bw.source})" if bw is not None
              else "read probe before each measurement" if hw.kind == "cpu" else "unknown")
    lines.append(f"tokperf: hardware {hw.name} ({hw.kind}"
                 + (f", driver {hw.driver}" if hw.driver else "") + f"); bandwidth {source}")
    return lines


def _engine_line(state: PluginState) -> str:
    """What will be measured: the attached server's build, or the binary and model to start."""
    s = state.settings
    if s.url is not None:
        try:
            info = state.session.engine().info()
        except TokperfError as exc:
            return f"attach {s.url} (not answering yet: {exc})"
        return f"attach {s.url}, build {info.build or info.version or '?'}, model {info.model_name}"
    if s.engine != "llama-server":
        return f"start from PATH, model {s.model}, threads {s.threads}"
    from pytest_tokperf.engines.launcher import binary_version, resolve_server_binary

    binary = resolve_server_binary(s.server_bin, s.engine_version)
    model = (f"generated '{s.model}' model" if s.model in BUILTIN_MODELS
             else f"model {s.model} ({Path(s.model).expanduser().stat().st_size / 1e9:.2f} GB)")
    return (f"start {binary.name} {binary_version(binary) or '(unknown build)'}, {model}, "
            f"threads {s.threads}")


T = TypeVar("T")


class _PytestTokBench(TokBench):
    """TokBench whose engine errors become clean test failures, not tracebacks."""

    def __call__(self, *args: object, **kwargs: object) -> TokBenchResult:
        __tracebackhide__ = True
        return _or_fail(TokBench.__call__, self, *args, **kwargs)

    def speculative(self, *args: object, **kwargs: object) -> SpeculativeOutcome:
        __tracebackhide__ = True
        return _or_fail(TokBench.speculative, self, *args, **kwargs)


def _or_fail(method: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``method(...)``, with a tokperf error turned into a clean test failure."""
    __tracebackhide__ = True
    try:
        return method(*args, **kwargs)
    except TokperfError as exc:
        message = f"{type(exc).__name__}: {exc}"
    pytest.fail(message, pytrace=False)


@pytest.fixture
def tok_bench(request: pytest.FixtureRequest) -> Iterator[TokBench]:
    """Measure TTFT, prefill and decode tok/s of the configured engine.

    ``result = tok_bench(prompt_tokens=64, generate_tokens=128)``; the
    ``tokperf(repetitions=..., warmup=..., depth_tokens=..., ...)`` marker overrides the
    session defaults and sets the workload a bare ``tok_bench()`` measures.
    """
    state = request.config.stash[STATE]
    s = state.settings
    if not s.active:
        pytest.skip("no engine configured: pass --tokperf-engine llama-server or --tokperf-url URL")
    marker = request.node.get_closest_marker("tokperf")
    kwargs = dict(marker.kwargs) if marker else {}
    known = ("repetitions", "warmup", "min_efficiency", *WORKLOAD_DEFAULTS)
    unknown = set(kwargs) - set(known)
    if unknown:
        pytest.fail(
            f"@pytest.mark.tokperf got unknown argument(s) {sorted(unknown)!r}; "
            f"known: {', '.join(known)}",
            pytrace=False,
        )
    test_id = request.node.nodeid

    def record(result, ceiling, verdict):  # type: ignore[no-untyped-def]
        row = Row(test_id=test_id, result=result, ceiling=ceiling, verdict=verdict)
        state.rows.append(row)
        request.node.user_properties.extend(junit_properties(row))  # JUnit XML carries them
        state.recorder.hardware = state.ceilings.hardware
        stored = state.recorder.record(test_id, result, ceiling, verdict, state.session.model_path)
        if stored is None or verdict == "error":
            return
        _gate(state, test_id, stored[1], result)

    min_efficiency = kwargs.get("min_efficiency", s.min_efficiency)
    yield _PytestTokBench(
        engine=state.session.engine,
        record=record,
        repetitions=int(kwargs.get("repetitions", s.repetitions)),
        warmup=int(kwargs.get("warmup", s.warmup)),
        options=MeasureOptions(agreement_tolerance=s.agreement, timeout_s=s.request_timeout),
        ceiling_for=lambda result: state.ceilings.ceiling_for(result, state.session.model_path),
        before_measure=state.ceilings.probe,
        min_efficiency=None if min_efficiency is None else float(min_efficiency),
        progress=_progress(request.config, test_id),
        workload_defaults=tuple((k, v) for k, v in kwargs.items() if k in WORKLOAD_DEFAULTS),
        speculative_engine=lambda draft: state.session.speculative_engine(draft)[0],
    )


def _gate(state: PluginState, test_id: str, series_key: str, result) -> None:  # type: ignore[no-untyped-def]
    """Judge the result against its baseline; fail the test on a regression if asked."""
    __tracebackhide__ = True
    store = state.recorder.store
    if store is None:
        return
    findings = judge(
        store, state.baseline, test_id=test_id, series_key=series_key, samples=result.samples,
        current_build=result.engine.build or result.engine.version or "?",
        run_id=state.recorder.run_id, min_effect=state.settings.min_effect,
    )
    state.findings.extend(findings)
    regressions = [f for f in findings if f.comparison.verdict == "regression"]
    if regressions and state.settings.fail_on_regression:
        raise AssertionError("\n".join(describe(f) for f in regressions))


def _progress(config: pytest.Config, test_id: str) -> Callable[[str], None] | None:
    """With -v, a line per repetition (test, i of n, tok/s) outside output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or config.get_verbosity() < 1:
        return None

    def show(message: str) -> None:
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(f"tokperf {test_id}: {message}")
        else:
            reporter.write_line(f"tokperf {test_id}: {message}")

    return show


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(STATE, None)
    if state is None or not state.rows:
        return
    terminalreporter.section("tokperf")
    for line in summary_table(state.rows):
        terminalreporter.write_line(line)
    judged = [f for f in state.findings if f.comparison.verdict != "inconclusive"]
    if judged:
        terminalreporter.write_line(f"against {state.baseline.label}:")
        for finding in judged:
            terminalreporter.write_line(f"  {describe(finding)}")
    noisy = [f for f in state.findings if f.comparison.verdict == "inconclusive"
             and f.comparison.n_baseline > 0]
    for finding in noisy:
        terminalreporter.write_line(f"  too noisy to gate: {finding.test_id}: {finding.comparison.reason}")
    for problem in dict.fromkeys(state.ceilings.problems):
        terminalreporter.write_line(f"note: {problem}")
    where = state.recorder.location
    terminalreporter.write_line(f"results: {len(state.rows)} stored in {where}" if where
                                else "results: not stored (--tokperf-db off)")
    _write_reports(state, terminalreporter)
    server = state.session.server
    if server is not None:
        terminalreporter.write_line(f"server: {server.url} (stopped at session end)")
        terminalreporter.write_line(f"server log: {server.log_path}")


def _write_reports(state: PluginState, terminalreporter: pytest.TerminalReporter) -> None:
    from pytest_tokperf.report.files import ReportPaths, write_session_reports

    s = state.settings
    paths = ReportPaths(*(Path(p) if p else None for p in (s.report_md, s.report_json, s.report_html)))
    try:
        written = write_session_reports(
            state.rows, state.findings, paths, os.environ,
            db=state.recorder.location, run=state.recorder.run,
        )
    except TokperfError as exc:
        terminalreporter.write_line(f"tokperf: report not written: {exc}", red=True)
        return
    for path in written:
        terminalreporter.write_line(f"report: {path}")
