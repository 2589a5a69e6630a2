"""Settings resolved once per session: command line -> environment -> ini -> default.

One table (``OPTIONS``) drives the pytest options, the ini keys, the environment
variables and the validation, so help texts and names cannot drift apart. Every bad
value raises ``ConfigError`` naming the value and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pytest_tokperf.engines.registry import BUILTIN_ENGINES
from pytest_tokperf.errors import ConfigError

ENGINE_NAMES = tuple(BUILTIN_ENGINES)
"""Engines this package can drive; conftest hooks may register more."""

BUILTIN_MODELS = ("main", "test")
"""Generated models: ``main`` (~1.1 GB F16, memory-bound) and ``test`` (tens of MB)."""


def _positive_int(value: str, where: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ConfigError(f"{name} {value!r} from {where} is not a whole number >= 1")
    return number


def _non_negative_int(value: str, where: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise ConfigError(f"{name} {value!r} from {where} is not a whole number >= 0")
    return number


def _positive_float(value: str, where: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not number > 0:
        raise ConfigError(f"{name} {value!r} from {where} is not a number > 0")
    return number


def _url(value: str, where: str, name: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"{name} {value!r} from {where} is not an http(s) URL; "
            f"use e.g. --tokperf-url http://127.0.0.1:8080"
        )
    return value.rstrip("/")


def _text(value: str, where: str, name: str) -> str:
    return value


def _release(value: str, where: str, name: str) -> str:
    from pytest_tokperf.engines.releases import release_number

    try:
        return f"b{release_number(value)}"
    except ConfigError as exc:
        raise ConfigError(f"{name} from {where}: {exc}") from exc


def _bandwidth(value: str, where: str, name: str) -> float:
    from pytest_tokperf.hardware.units import parse_bandwidth

    try:
        return parse_bandwidth(value)
    except ConfigError as exc:
        raise ConfigError(f"{name} from {where}: {exc}") from exc


def _fraction(value: str, where: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = 0.0
    if not 0 < number <= 1.5:
        raise ConfigError(
            f"{name} {value!r} from {where} is not a fraction of the ceiling in (0, 1.5]; "
            f"e.g. 0.6 asks for decode >= 60% of the bandwidth ceiling"
        )
    return number


@dataclass(frozen=True, slots=True)
class OptionSpec:
    name: str
    """Attribute name; the CLI is --tokperf-<name with dashes>, ini tokperf_<name>."""
    help: str
    parse: Callable[[str, str, str], Any]
    default: Any = None
    metavar: str = "VALUE"
    env: bool = False

    @property
    def flag(self) -> str:
        return "--tokperf-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "tokperf_" + self.name

    @property
    def env_var(self) -> str:
        return "PYTEST_TOKPERF_" + self.name.upper()


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("engine", f"engine to measure: {', '.join(ENGINE_NAMES)}", _text, None, "NAME", True),
    OptionSpec("url", "attach to an engine already running at URL instead of starting one",
               _url, None, "URL", True),
    OptionSpec("model", "GGUF model for a started server, or a generated one: 'main' "
               "(~1.1 GB F16, default) or 'test' (tens of MB)", _text, "main", "PATH", True),
    OptionSpec("server_bin", "llama-server binary to run (default: the one built by "
               "`tokperf install-engine llama-server`, then PATH)", _text, None, "PATH", True),
    OptionSpec("engine_version", "llama.cpp release to run, from the builds `tokperf "
               "install-engine llama-server --version N` cached (e.g. 11292 or b11292); "
               "instead of --tokperf-server-bin", _release, None, "N", True),
    OptionSpec("port", "loopback port for a started server (default: a free one)",
               _positive_int, None, "N"),
    OptionSpec("threads", "engine threads (default: all cores)", _positive_int, None, "N"),
    OptionSpec("ctx_size", "context size per slot of a started server", _positive_int, 4096,
               "N"),
    OptionSpec("parallel", "slots of a started llama-server (-np): how many concurrent "
               "streams tok_bench(concurrency=N) may use", _positive_int, 1, "N"),
    OptionSpec("repetitions", "measured repetitions per workload", _positive_int, 5, "N"),
    OptionSpec("warmup", "discarded warm-up runs per workload", _non_negative_int, 1, "N"),
    OptionSpec("db", "results database (default .tokperf/results.db in the rootdir when an "
               "ini file sets it, else in the current directory; 'off' writes nothing)",
               _text, None, "PATH", True),
    OptionSpec("startup_timeout", "seconds to wait for a started server's /health",
               _positive_float, 120.0, "S"),
    OptionSpec("request_timeout", "seconds one generation may take", _positive_float, 600.0, "S"),
    OptionSpec("bandwidth", "memory bandwidth for the ceiling, e.g. 1008GB/s (default: "
               "detected: NVML, the catalog, or a read probe on the CPU)", _bandwidth, None,
               "BW", True),
    OptionSpec("min_efficiency", "fail a tok_bench measurement whose decode is below this "
               "fraction of the ceiling, e.g. 0.6", _fraction, None, "F"),
    OptionSpec("baseline", "regression baseline: 'history' (earlier runs of the same series in "
               "the DB, default), 'engine=VERSION', or another results DB", _text, "history",
               "SPEC", True),
    OptionSpec("min_effect", "smallest relative change the regression gate flags (0.05 = 5%)",
               _positive_float, 0.05, "F"),
    OptionSpec("report_md", "write a markdown summary here at the end (the GitHub step "
               "summary gets one whenever GITHUB_STEP_SUMMARY is set)", _text, None, "PATH"),
    OptionSpec("report_json", "write the session's results as JSON here", _text, None, "PATH"),
    OptionSpec("report_html", "write a self-contained HTML report with plots here (needs "
               "matplotlib: pip install 'pytest-tokperf[plot]')", _text, None, "PATH"),
    OptionSpec("agreement", "tolerated client vs engine decode difference (fraction)",
               _positive_float, 0.05, "F"),
    OptionSpec("draft_model", "draft for tok_bench.speculative(): a GGUF PATH sharing the "
               "model's vocabulary, 'self' (the model drafts for itself: every draft accepted, "
               "so only the overhead shows) or 'small' (a generated small draft; the default "
               "for generated models)", _text, None, "PATH", True),
    OptionSpec("speculative_url", "a second running server, drafting, for "
               "tok_bench.speculative() when the engine is attached with --tokperf-url",
               _url, None, "URL", True),
)


@dataclass(frozen=True, slots=True)
class Settings:
    engine: str | None
    url: str | None
    model: str
    server_bin: str | None
    port: int | None
    threads: int
    ctx_size: int
    parallel: int
    repetitions: int
    warmup: int
    db: Path | None
    startup_timeout: float
    request_timeout: float
    bandwidth: float | None
    min_efficiency: float | None
    baseline: str
    min_effect: float
    report_md: str | None
    report_json: str | None
    report_html: str | None
    agreement: float
    draft_model: str | None = None
    engine_version: str | None = None
    speculative_url: str | None = None
    server_args: tuple[str, ...] = ()
    fail_on_regression: bool = False

    @property
    def active(self) -> bool:
        """True when an engine is configured (started or attached)."""
        return self.engine is not None or self.url is not None


def resolve(
    cli: Callable[[str], Any],
    ini: Callable[[str], Any],
    env: Mapping[str, str],
    rootdir: Path,
    server_args: tuple[str, ...] = (),
    fail_on_regression: bool = False,
    engine_names: tuple[str, ...] = ENGINE_NAMES,
) -> Settings:
    """Resolve every option once; ``cli(name)``/``ini(key)`` return None when unset."""
    values: dict[str, Any] = {}
    for spec in OPTIONS:
        raw: Any = cli(spec.name)
        where = f"option {spec.flag}"
        if raw is None and spec.env and env.get(spec.env_var):
            raw, where = env[spec.env_var], f"environment variable {spec.env_var}"
        if raw is None:
            ini_value = ini(spec.ini)
            if ini_value not in (None, ""):
                raw, where = str(ini_value), f"ini option {spec.ini}"
        values[spec.name] = spec.default if raw is None else spec.parse(str(raw), where, spec.flag)
    engine = values["engine"]
    if engine is not None and engine not in engine_names:
        raise ConfigError(
            f"--tokperf-engine {engine!r} is not an engine this plugin knows; "
            f"choose one of: {', '.join(engine_names)}"
        )
    if values["url"] is not None and engine is None:
        values["engine"] = "llama-server"
    values["threads"] = values["threads"] or (os.cpu_count() or 1)
    values["db"] = _db_path(values["db"], rootdir)
    return Settings(server_args=server_args, fail_on_regression=fail_on_regression, **values)


def _db_path(value: str | None, rootdir: Path) -> Path | None:
    if value is None:
        return rootdir / ".tokperf" / "results.db"
    if value.strip().lower() in ("off", "none", "no", ""):
        return None
    return Path(value).expanduser()
