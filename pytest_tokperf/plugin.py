"""pytest glue only: options and ini keys, the ``tok_bench`` fixture, header, summary.

Everything it calls lives in the library (settings, session, measure, storage,
report); this module resolves settings once, keeps session state in
``config.stash`` and turns our errors into usage errors or clean test failures.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar

import pytest

from pytest_tokperf import settings as settings_mod
from pytest_tokperf.errors import ConfigError, MeasuredBusy, StorageError, TokperfError
from pytest_tokperf.settings import BUILTIN_MODELS, OPTIONS, Settings

if TYPE_CHECKING:
    from pytest_tokperf.bench.fixture import SpeculativeOutcome, TokBench, TokBenchResult
    from pytest_tokperf.bench.gate import GateFinding
    from pytest_tokperf.bench.run import BenchRun, Recorded
    from pytest_tokperf.report.table import Row


@dataclass
class PluginState:
    settings: Settings
    run: BenchRun | None
    """The run (engine session, ceilings, store, gate); None when no engine is configured."""


STATE = pytest.StashKey[PluginState]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_tokperf import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def _help(spec: settings_mod.OptionSpec) -> str:
    text = spec.help
    if spec.default is not None and "default" not in text:
        text += f" (default {spec.default})"
    return text + (f" [env {spec.env_var}]" if spec.env else "")


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    _refuse_dash_values(pluginmanager)
    group = parser.getgroup("tokperf", "LLM engine performance (pytest-tokperf)")
    for spec in OPTIONS:
        if not spec.cli:  # set once per project: an ini key and a variable, no flag
            parser.addini(spec.ini, _help(spec), default=None)
            continue
        kind = ({"action": "store_true"} if spec.switch else
                {"action": "append" if spec.repeat else "store", "metavar": spec.metavar})
        group.addoption(spec.flag, dest=f"tokperf_{spec.name}", default=None, **kind,
                        help=_help(spec).replace("%", "%%"))
        parser.addini(spec.ini, spec.help, default=None)
    group.addoption(
        "--tokperf-server-arg", dest="tokperf_server_arg", action="append", default=[],
        metavar="ARG", help="extra argument for a started llama-server (repeatable), "
        "e.g. --tokperf-server-arg=--flash-attn --tokperf-server-arg=on",
    )


def _refuse_dash_values(pluginmanager: pytest.PytestPluginManager) -> None:
    """``--tokperf-bandwidth -5GB/s`` as our one-line error, not argparse's "expected one
    argument": checked here, while the plugin loads, because pytest parses the arguments
    (and fails on this) before any later hook runs."""
    config = pluginmanager.get_plugin("pytestconfig")
    if not isinstance(config, pytest.Config):
        return
    args = [str(a) for a in config.invocation_params.args]
    try:
        args += shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        pass  # pytest reports a malformed PYTEST_ADDOPTS itself
    try:
        settings_mod.check_dash_values(args)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _project_dir(config: pytest.Config) -> Path:
    """Where .tokperf/ goes: the rootdir when an ini file fixed it, else the project root
    found from the cwd as every ``tokperf`` verb finds it."""
    from pytest_tokperf.storage.location import project_root

    if config.inipath is not None:
        return Path(config.rootpath)
    return project_root(Path(config.invocation_params.dir))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tokperf(repetitions=N, warmup=N, min_efficiency=F, prompt_tokens=N, generate_tokens=N, "
        "depth_tokens=N, concurrency=N, cached_prefix_tokens=N, chat=BOOL): per-test settings "
        "and workload defaults for tok_bench",
    )
    run = None
    try:
        settings = settings_mod.resolve(
            cli=lambda name: config.getoption(f"tokperf_{name}"),
            ini=config.getini,
            env=os.environ,
            rootdir=_project_dir(config),
            server_args=tuple(config.getoption("tokperf_server_arg") or ()),
            engine_names=None,  # checked below, with the engines conftests register
        )
        if settings.active and _xdist_workers(config):
            raise ConfigError(
                f"tokperf measures one engine at a time, and pytest-xdist would run "
                f"{_xdist_workers(config)} workers: each would start its own engine (or share "
                f"one) and compete for the same memory bandwidth, so every figure would be "
                f"wrong. Run the tok_bench tests without -n (pass -n 0, or give them their own "
                f"pytest invocation; other tests may still use -n)"
            )
        if settings.active:  # only then: the registry and the run import httpx, scipy, ...
            from pytest_tokperf.bench.run import BenchRun
            from pytest_tokperf.engines.registry import EngineRegistry

            registry = EngineRegistry()
            config.hook.pytest_tokperf_add_engines(register=registry.register)
            settings_mod.check_engine_name(settings.engine, registry.names())
            run = BenchRun.open(settings, log_dir=_project_dir(config) / ".tokperf" / "logs",
                                registry=registry, pytest_version=pytest.__version__)
    except (ConfigError, StorageError) as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[STATE] = PluginState(settings=settings, run=run)


def _xdist_workers(config: pytest.Config) -> str | None:
    """How many pytest-xdist workers this session runs (None: it runs in one process)."""
    if hasattr(config, "workerinput"):
        return "several"
    workers = config.getoption("numprocesses", default=None)  # -n N, -n auto; 0 or unset: none
    return str(workers) if workers else None


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is not None and state.run is not None:
        lost = state.run.close()
        if lost:
            sys.stderr.write(lost + "\n")


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(STATE, None)
    if state is None or state.run is None:
        return []
    from pytest_tokperf.hardware.units import format_bandwidth

    s, run = state.settings, state.run
    db = str(s.db) if s.db else "off"
    lines = [f"tokperf: engine {s.engine}, {_engine_line(run)}; results db {db}"]
    hw = run.ceilings.detect()
    bw = hw.bandwidth
    source = (f"{format_bandwidth(bw.bytes_per_s)} ({bw.source})" if bw is not None
              else "read probes around CPU measurements, judged against the highest reached" if hw.kind == "cpu" else "unknown")
    lines.append(f"tokperf: hardware {hw.name} ({hw.kind}"
                 + (f", driver {hw.driver}" if hw.driver else "") + f"); bandwidth {source}")
    lines.append(f"tokperf: engine device {_device_line(run)}")
    if s.ab:
        b = s.ab_settings()
        what = (f"attached {b.url}" if b.url else
                f"started {b.server_bin or b.engine_version or 'the same binary'}, model {b.model}")
        lines.append(f"tokperf: same-run A/B, every tok_bench call also measures the control "
                     f"({what}) in ABBA pairs; flags changes of "
                     f"{s.ab_min_effect:.0%} or more")
    return lines


def _device_line(run: BenchRun) -> str:
    """Where the ceiling's bandwidth comes from: the engine's device, not the machine's."""
    s = run.settings
    if s.device is not None:
        return f"{s.device.describe()} (--tokperf-device)"
    if s.url is None:
        return "as the started engine reports it (its devices and offloaded layers), per result"
    from pytest_tokperf.engines.speed_settings import placement_of

    try:
        placement = placement_of(run.session.engine().info())
    except TokperfError:
        return "unknown until the engine answers"
    if placement.device is None:
        return "not reported by the engine: the machine's first device is assumed"
    share = (f", {placement.gpu_fraction:.0%} of the bytes on the GPU"
             if placement.gpu_fraction is not None and placement.device.is_gpu else "")
    return f"{placement.device.describe()}{share} ({placement.source})"


def _engine_line(run: BenchRun) -> str:
    """What will be measured: the attached server's build, or the binary and model to start."""
    from pytest_tokperf.transport.credentials import redact_url

    s = run.settings
    if s.url is not None:
        url = redact_url(s.url)
        try:
            info = run.session.engine().info()
        except TokperfError as exc:
            return f"attach {url} (not answering yet: {exc})"
        return f"attach {url}, build {info.build or info.version or '?'}, model {info.model_name}"
    if s.engine != "llama-server":
        from pytest_tokperf.launch.plans import find_binary

        try:
            where = str(find_binary(s.engine or "", s.server_bin))
        except TokperfError:
            where = "from PATH"
        return f"start {where}, model {s.model}"
    from pytest_tokperf.builds.cmake import binary_version
    from pytest_tokperf.launch.process import resolve_server_binary

    binary = resolve_server_binary(s.server_bin, s.engine_version)
    model = (f"generated '{s.model}' model" if s.model in BUILTIN_MODELS
             else f"model {s.model} ({Path(s.model).expanduser().stat().st_size / 1e9:.2f} GB)")
    version = binary_version(binary, min(1.0, s.startup_timeout))  # a header: never long
    return (f"start {binary.name} {version or '(unknown build)'}, {model}, "
            f"threads {s.threads}")


T = TypeVar("T")


def _or_fail(method: Callable[..., T], *args: object, **kwargs: object) -> T:
    """``method(...)``, with a tokperf error turned into a clean test failure (a check
    measured busy goes on to ``pytest_runtest_makereport``, which skips it)."""
    __tracebackhide__ = True
    try:
        return method(*args, **kwargs)
    except MeasuredBusy:
        raise
    except TokperfError as exc:
        message = f"{type(exc).__name__}: {exc}"
    pytest.fail(message, pytrace=False)


def _pytest_tok_bench() -> type[TokBench]:
    """TokBench whose engine errors become clean test failures, not tracebacks."""
    from pytest_tokperf.bench.fixture import TokBench

    class PytestTokBench(TokBench):
        def __call__(self, *args: object, **kwargs: object) -> TokBenchResult:
            __tracebackhide__ = True
            return _or_fail(TokBench.__call__, self, *args, **kwargs)

        def speculative(self, *args: object, **kwargs: object) -> SpeculativeOutcome:
            __tracebackhide__ = True
            return _or_fail(TokBench.speculative, self, *args, **kwargs)

    return PytestTokBench


@pytest.fixture(scope="session")
def _tokperf_session(request: pytest.FixtureRequest) -> Iterator[PluginState]:
    """The session's run, finished once after the last tok_bench test: the gate's verdicts
    are controlled together, stored, and written as JUnit testsuite properties."""
    state = request.config.stash[STATE]
    record: Callable[[str, object], None] | None = None
    if request.config.pluginmanager.has_plugin("junitxml"):
        record = request.getfixturevalue("record_testsuite_property")
    yield state
    if state.run is None:
        return
    findings = state.run.finish()
    if record is not None:
        for finding in findings:
            c = finding.comparison
            record(f"tokperf_gate[{finding.test_id}][{c.metric}]",
                   f"{c.verdict}: {c.reason} ({finding.correction})")


@pytest.fixture
def tok_bench(request: pytest.FixtureRequest, _tokperf_session: PluginState) -> TokBench:
    """Measure TTFT, prefill and decode tok/s of the configured engine.

    ``result = tok_bench(prompt_tokens=64, generate_tokens=128)``; the
    ``tokperf(repetitions=..., warmup=..., depth_tokens=..., ...)`` marker overrides the
    session defaults and sets the workload a bare ``tok_bench()`` measures.
    """
    state = _tokperf_session
    if state.run is None:
        pytest.skip("no engine configured: pass --tokperf-engine llama-server or --tokperf-url URL")
    from pytest_tokperf.bench.fixture import WORKLOAD_DEFAULTS
    from pytest_tokperf.report.formats import junit_properties
    from pytest_tokperf.report.table import Row

    marker = request.node.get_closest_marker("tokperf")
    kwargs = _or_fail(settings_mod.parse_marker, marker.kwargs if marker else {},
                      "@pytest.mark.tokperf", tuple(marker.args) if marker else ())

    run = state.run
    test_id = request.node.nodeid
    progress = _progress(request.config, test_id)
    if progress is not None:
        request.addfinalizer(lambda: progress.done(
            [r for r in run.recorded if r.test_id == test_id]))

    def on_record(recorded: Recorded) -> None:
        """JUnit XML carries every figure; a revised verdict replaces the recorded one."""
        mine = [r for r in run.recorded if r.test_id == test_id]
        keep = [p for p in request.node.user_properties if not str(p[0]).startswith("tokperf_")]
        request.node.user_properties[:] = keep + [
            prop for r in mine
            for prop in junit_properties(Row(r.test_id, r.result, r.ceiling, r.verdict))]

    return run.tok_bench(
        test_id,
        cls=_pytest_tok_bench(),
        repetitions=kwargs.get("repetitions"),
        warmup=kwargs.get("warmup"),
        min_efficiency=kwargs.get("min_efficiency"),
        workload_defaults=tuple((k, v) for k, v in kwargs.items() if k in WORKLOAD_DEFAULTS),
        progress=progress,
        on_record=on_record,
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A check measured on a busy machine (``MeasuredBusy``) is reported as skipped, with the
    load as the reason, unless ``--tokperf-busy fail``."""
    report = yield
    if call.excinfo is None or call.when != "call":
        return report
    if not call.excinfo.errisinstance(MeasuredBusy):
        return report
    state = item.config.stash.get(STATE, None)
    if state is None or state.settings.busy.outcome == "skip":
        path, line, _ = item.reportinfo()
        report.outcome = "skipped"
        report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {call.excinfo.value}")
    else:  # --tokperf-busy fail: a clean failure, as every tokperf error in a test is
        report.longrepr = f"MeasuredBusy: {call.excinfo.value}"
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With --tokperf-fail-on-regression, a regression the gate found fails the session."""
    state = session.config.stash.get(STATE, None)
    if state is None or state.run is None or not state.settings.fail_on_regression:
        return
    if (any(f.comparison.verdict == "regression" for f in state.run.finish())
            or any(ab.decides(state.settings.busy) for _, ab in state.run.ab_results)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class _Capture(Protocol):
    """The part of pytest's capture manager progress needs (it is not public API)."""

    def global_and_fixture_disabled(self) -> AbstractContextManager[None]: ...


@dataclass
class _Progress:
    """What a user sees while a test measures, outside output capture.

    ``-v``: a line per repetition. Otherwise, on a terminal, one status line rewritten in
    place (test, repetition i/n, tok/s so far), so a slow engine can be told from a hung
    one; in a CI log (no terminal) no carriage-return spam. Either way, when the test
    ends, one line per measurement with its final figures.
    """

    reporter: pytest.TerminalReporter
    capture: _Capture | None
    test_id: str
    verbose: bool
    live: bool = False

    def _write(self, text: str, *, rewrite: bool = False) -> None:
        def emit() -> None:
            if rewrite:
                if not self.live:
                    self.reporter.ensure_newline()
                self.reporter.rewrite(text, erase=True)
            else:
                if self.live:
                    self.reporter.rewrite("", erase=True)
                    self.reporter.write("\r")
                else:
                    self.reporter.ensure_newline()
                self.reporter.write_line(text)
            self.live = rewrite

        if self.capture is not None:
            with self.capture.global_and_fixture_disabled():
                emit()
        else:
            emit()

    def __call__(self, message: str) -> None:
        if self.verbose:
            self._write(f"tokperf {self.test_id}: {message}")
        elif self.reporter.isatty():
            self._write(f"tokperf {_short_id(self.test_id)}: {message}", rewrite=True)

    def done(self, recorded: Sequence[Recorded]) -> None:
        for r in recorded:
            decode = r.result.judged_decode_tokens_per_s
            self._write(
                f"tokperf {self.test_id}: {len(r.result.samples)} reps, decode "
                + (f"{decode.median:.1f} tok/s" if decode else "-")
                + (f", TTFT {r.result.ttft_s.median * 1e3:.0f} ms" if r.result.ttft_s else "")
                + f", {r.verdict}")


def _short_id(test_id: str, width: int = 60) -> str:
    return test_id if len(test_id) <= width else "…" + test_id[-(width - 1):]


def _progress(config: pytest.Config, test_id: str) -> _Progress | None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or config.get_verbosity() < 0:
        return None
    return _Progress(reporter, config.pluginmanager.get_plugin("capturemanager"), test_id,
                     verbose=config.get_verbosity() >= 1)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(STATE, None)
    if state is None or state.run is None or not state.run.recorded:
        return
    from pytest_tokperf.bench.gate import describe
    from pytest_tokperf.report.table import session_rows, summary_table, warning_count

    run = state.run
    findings = run.finish()
    terminalreporter.section("tokperf")
    rows = session_rows(run.recorded, findings)
    if state.settings.sort:
        from pytest_tokperf.report.formats import sort_rows

        rows = sort_rows(rows, state.settings.sort)
    warned = warning_count(rows)
    if warned:
        terminalreporter.write_line(
            f"{warned} of {len(rows)} result{'s' * (len(rows) != 1)} "
            f"{'have' if warned != 1 else 'has'} warnings (the note and ceiling lines below)",
            yellow=True)
    for line in summary_table(rows, columns=state.settings.columns,
                              show=state.settings.table_columns):
        terminalreporter.write_line(line)
    judged = [f for f in findings if f.comparison.verdict != "inconclusive"]
    noisy = [f for f in findings if f.comparison.verdict == "inconclusive"
             and f.comparison.n_baseline > 0]
    if judged or noisy:
        terminalreporter.write_line(f"gate against {state.settings.baseline.label}: "
                                    f"{run.gate_summary}")
    for finding in judged:
        terminalreporter.write_line(f"  {describe(finding)}")
    for finding in noisy:
        terminalreporter.write_line(f"  too noisy to gate: {finding.test_id}: {finding.comparison.reason}")
    for test_id, ab in run.ab_results:
        decides = ab.decides(state.settings.busy)
        terminalreporter.write_line(f"A/B {test_id}: {ab.describe()}", red=decides, bold=decides)
    where = run.recorder.location
    stored = len(rows) - len(run.recorder.unstored)
    terminalreporter.write_line(f"results: {stored} stored in {where}" if where
                                else "results: not stored (--tokperf-db off)")
    lost = run.recorder.announce()
    if lost:
        terminalreporter.write_line(lost, red=True)
    _write_reports(state, run, rows, findings, terminalreporter)
    if state.settings.ab_json and run.ab_results:
        from pytest_tokperf.report.files import write_ab_json

        try:
            path = write_ab_json(run.ab_results, Path(state.settings.ab_json))
            terminalreporter.write_line(f"A/B report: {path}")
        except TokperfError as exc:
            terminalreporter.write_line(f"tokperf: A/B report not written: {exc}", red=True)
    sides = [("server", run.session.server)]
    if run.control is not None:
        sides.append(("control server", run.control.server))
    for name, server in sides:
        if server is not None:
            terminalreporter.write_line(f"{name}: {server.url} (stopped at session end)")
            terminalreporter.write_line(f"{name} log: {server.log_path}")


def _write_reports(state: PluginState, run: BenchRun, rows: list[Row], findings: list[GateFinding],
                   terminalreporter: pytest.TerminalReporter) -> None:
    from pytest_tokperf.report.files import ReportPaths, write_session_reports

    s = state.settings
    paths = ReportPaths(*(Path(p) if p else None for p in (s.report_md, s.report_json, s.report_html)))
    try:
        written = write_session_reports(
            rows, findings, paths, os.environ,
            db=run.recorder.location, run=run.recorder.run, store=run.recorder.store,
            table_columns=s.table_columns,
        )
    except TokperfError as exc:
        terminalreporter.write_line(f"tokperf: report not written: {exc}", red=True)
        written = []
    for path in written:
        terminalreporter.write_line(f"report: {path}")
    if s.report_histogram:  # drawn whether or not the others could be written
        _write_histogram(Path(s.report_histogram), rows, terminalreporter)


def _write_histogram(path: Path, rows: list[Row],
                     terminalreporter: pytest.TerminalReporter) -> None:
    """``--tokperf-report x.svg``: each result's repetitions as a box plot (matplotlib)."""
    from pytest_tokperf.report.plots import plot_repetitions
    from pytest_tokperf.report.report_data import figures_from_row

    try:
        plot = plot_repetitions([figures_from_row(row) for row in rows], path)
    except TokperfError as exc:
        terminalreporter.write_line(f"tokperf: report not written: {exc}", red=True)
        return
    terminalreporter.write_line(f"report: {plot.path}" if plot.path is not None
                                else f"tokperf: {path} not drawn: {plot.note}")
