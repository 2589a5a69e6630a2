"""Settings resolved once per session: command line -> environment -> ini -> default.

One table (``OPTIONS``) drives the pytest options, the ini keys, the environment
variables and the validation, so help texts and names cannot drift apart. Every bad
value raises ``ConfigError`` naming the value and where it came from.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_tokperf.busy import BUSY_OUTCOMES, BusyPolicy
from pytest_tokperf.engines import BUILTIN_ENGINE_NAMES, DEFAULT_IDLE_TIMEOUT_S
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.storage.location import (
    DEFAULT_DB_HELP,
    DbLocation,
    db_location,
    default_db,
    is_pg_url,
    parse_pg_url,
    project_root,
)
from pytest_tokperf.transport import MAX_BODY_BYTES
from pytest_tokperf.transport.credentials import (
    DEFAULT_API_KEY_ENV,
    ApiKey,
    api_key_from_env,
    redact_url,
    url_problem,
)

if TYPE_CHECKING:
    from pytest_tokperf.hardware.placement import Device

ENGINE_NAMES = BUILTIN_ENGINE_NAMES
"""Engines this package can drive; conftest hooks may register more."""

BUILTIN_MODELS = ("main", "test")
"""Generated models: ``main`` (~1.1 GB F16, memory-bound) and ``test`` (tens of MB)."""


Parser = Callable[[str, str, str], Any]
"""``parse(value, where, name)``: the typed value, or ``ConfigError`` naming all three."""


def _whole(lo: int, hi: int, example: str) -> Parser:
    """A whole number in ``[lo, hi]``."""

    def parse(value: str, where: str, name: str) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = lo - 1
        if not lo <= number <= hi:
            raise ConfigError(f"{name} {value!r} from {where} is not a whole number in "
                              f"[{lo}, {hi}]; e.g. {example}")
        return number

    return parse


def _number(lo: float, hi: float, *, closed_hi: bool, what: str, example: str) -> Parser:
    """A finite number in ``(lo, hi)`` or ``(lo, hi]``."""

    def parse(value: str, where: str, name: str) -> float:
        try:
            number = float(str(value).strip())
        except ValueError:
            number = math.nan
        inside = lo < number <= hi if closed_hi else lo < number < hi
        if not (math.isfinite(number) and inside):
            interval = f"({lo:g}, {hi:g}{']' if closed_hi else ')'}"
            raise ConfigError(f"{name} {value!r} from {where} is not {what} in {interval}; "
                              f"{example}")
        return number

    return parse


_SECONDS = _number(0, 1e6, closed_hi=False, what="a number of seconds", example="e.g. 30")

AB_BUDGET_S = 240.0
AB_STARTS = 32
"""The same-run A/B's defaults: 16 starts of 15 s a side resolve about 2.5% on this
project's 2-core VM with the test model (lab/2026-12-07-ab-starts.md)."""


def _ab_budget(value: str, where: str, name: str) -> float | None:
    """Seconds in (0, 1e6), or 0: no budget (None)."""
    return None if str(value).strip() in ("0", "0.0") else _SECONDS(value, where, name)


def _WAIT(value: str, where: str, name: str) -> float:
    """Seconds in [0, 1e6): 0 turns the wait off."""
    text = str(value).strip()
    return 0.0 if text in ("0", "0.0") else _SECONDS(text, where, name)
_TOKENS = _whole(1, 1 << 24, "4096")
_COUNT = _whole(1, 1 << 20, "5")
_SHARE = _number(0, 1, closed_hi=False, what="a fraction", example="e.g. 0.02 for 2%")


def _bool(value: str, where: str, name: str) -> bool:
    word = str(value).strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} {value!r} from {where} is not true or false; use true/false "
                      f"(or 1/0, yes/no, on/off)")


def _env_name(value: str, where: str, name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
        raise ConfigError(
            f"{name} {value!r} from {where} is not an environment variable name; name the "
            f"variable that holds the key (e.g. OPENAI_API_KEY), never the key itself"
        )
    return value


def _url(value: str, where: str, name: str) -> str:
    problem = url_problem(value)
    if problem is not None:
        raise ConfigError(f"{name} {redact_url(value)!r} from {where} {problem}; use e.g. "
                          f"{name} http://127.0.0.1:8080")
    return value.rstrip("/")


_BYTE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10,
               "mib": 1 << 20, "gib": 1 << 30}


def _byte_size(value: str, where: str, name: str) -> int:
    """A size such as ``8MiB``, ``16MB`` or ``1048576`` (bytes), from 64 KiB to 4 GiB."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmg]i?b|b)?\s*", str(value), re.I)
    size = int(float(match.group(1)) * _BYTE_UNITS[(match.group(2) or "").lower()]) \
        if match else 0
    if not (64 << 10) <= size <= (4 << 30):
        raise ConfigError(f"{name} {value!r} from {where} is not a size from 64KiB to 4GiB; "
                          f"e.g. 8MiB, 64MB or 16777216 (bytes)")
    return size


def _busy_outcome(value: str, where: str, name: str) -> str:
    word = str(value).strip().lower()
    if word not in BUSY_OUTCOMES:
        raise ConfigError(f"{name} {value!r} from {where} is not 'skip' (a check measured on a "
                          f"busy machine is reported as skipped, with the load), 'fail' or "
                          f"'judge' (decided on its figures, whatever the load)")
    return word


def _text(value: str, where: str, name: str) -> str:
    return value


def _release(value: str, where: str, name: str) -> str:
    from pytest_tokperf.builds.releases import release_number

    if len(value) > 40:  # int() refuses thousands of digits with a ValueError
        raise ConfigError(f"{name} {value[:40]!r}... from {where} is no release; e.g. b11292")
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


def _device(value: str, where: str, name: str) -> Device:
    from pytest_tokperf.hardware.placement import Device

    try:
        return Device.parse(value, where=name)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (from {where})") from exc


BaselineKind = Literal["history", "engine", "db", "off"]


@dataclass(frozen=True, slots=True)
class Baseline:
    """Where the regression gate's baseline samples come from (``--tokperf-baseline``)."""

    kind: BaselineKind
    engine_version: str | None = None
    db: DbLocation | None = None

    @property
    def label(self) -> str:
        if self.kind == "engine":
            return f"engine {self.engine_version}"
        if self.kind == "db":
            return f"db {self.db}"
        if self.kind == "off":
            return "nothing (off)"
        return "stored history"


def parse_baseline(value: str | None, where: str = "option --tokperf-baseline") -> Baseline:
    """``history`` (default), ``engine=VERSION``, the path of another results DB, or
    ``off`` (judge nothing: ``compare-builds`` sessions, judged together afterwards)."""
    if value is None or value in ("", "history", "latest"):
        return Baseline("history")
    if value == "off":
        return Baseline("off")
    if value.startswith("engine="):
        version = value.split("=", 1)[1].strip()
        if not version:
            raise ConfigError(f"--tokperf-baseline {value!r} from {where} names no engine version; "
                              f"e.g. engine=b11434")
        return Baseline("engine", engine_version=version)
    if is_pg_url(value):
        return Baseline("db", db=parse_pg_url(value, f"--tokperf-baseline from {where}"))
    path = Path(value).expanduser()
    if path.is_file():
        return Baseline("db", db=path)
    raise ConfigError(
        f"--tokperf-baseline {value!r} from {where} is neither 'history', 'engine=VERSION', "
        f"'off', an existing results DB file nor a postgresql:// URL"
    )


FRACTION_OF_CEILING = _number(0, 1.5, closed_hi=True, what="a fraction of the ceiling",
                              example="e.g. 0.6 asks for decode >= 60% of the bandwidth ceiling")


def _baseline(value: str, where: str, name: str) -> Baseline:
    return parse_baseline(value, where)


@dataclass(frozen=True, slots=True)
class OptionSpec:
    name: str
    """Attribute name; the CLI is --tokperf-<name with dashes>, ini tokperf_<name>."""
    help: str
    parse: Callable[[str, str, str], Any]
    default: Any = None
    metavar: str = "VALUE"
    env: bool = False
    switch: bool = False
    """A command-line flag without a value (true when given); ini and env take true/false."""
    cli: bool = True
    """False: set once per project, as an ini key or environment variable; no flag."""
    repeat: bool = False
    """The flag may be given several times; ini and env take a comma-separated list."""

    @property
    def flag(self) -> str:
        return "--tokperf-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "tokperf_" + self.name

    @property
    def env_var(self) -> str:
        return "PYTEST_TOKPERF_" + self.name.upper()


def _repetitions(value: str, where: str, name: str) -> tuple[int | None, int, int]:
    """``N`` (exactly N) or ``MIN-MAX`` (adaptive between): (fixed, least, most)."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", str(value))
    if match and match.group(2) is None and 1 <= int(match.group(1)) <= 1 << 20:
        return int(match.group(1)), 3, 10
    if match and match.group(2) is not None and 2 <= int(match.group(1)) \
            <= int(match.group(2)) <= 1 << 20:
        return None, int(match.group(1)), int(match.group(2))
    raise ConfigError(f"{name} {value!r} from {where} is neither N (a whole number in "
                      f"[1, {1 << 20}]) nor MIN-MAX (2 <= MIN <= MAX); e.g. 5, or 3-10 for "
                      f"adaptive repetitions (an interval needs at least 2)")


REPORT_FORMATS = {".md": "md", ".markdown": "md", ".json": "json", ".html": "html",
                  ".htm": "html", ".svg": "histogram", ".png": "histogram"}
"""Suffix -> report; ``histogram``: a box plot of each test's repetitions (matplotlib)."""

TABLE_COLUMNS = (
    "test", "workload", "ttft", "ttft_percentiles", "ttft_bound", "prefill", "decode",
    "engine_decode", "agreement", "inter_token_percentiles", "repetitions", "ceiling",
    "efficiency", "chars_per_s", "all_streams", "build", "verdict", "gate",
)
"""The summary table's column names (``report.formats.COLUMNS`` draws each one)."""


def _reports(value: str, where: str, name: str) -> tuple[tuple[str, str], ...]:
    """Comma-separated report paths, each (format by suffix, path)."""
    out = []
    for path in (part.strip() for part in str(value).split(",")):
        kind = REPORT_FORMATS.get(Path(path).suffix.lower())
        if kind is None:
            raise ConfigError(f"{name} {path!r} from {where}: the suffix names the format, "
                              f"and {Path(path).suffix or 'no suffix'!r} is none of "
                              f"{', '.join(REPORT_FORMATS)}; e.g. {name} summary.md")
        if kind == "histogram" and importlib.util.find_spec("matplotlib") is None:
            raise ConfigError(f"{name} {path!r} from {where}: the box plot of the repetitions "
                              f"needs matplotlib, which is not installed here; pip install "
                              f"'pytest-tokperf[plot]', or name a .md, .json or .html report")
        out.append((kind, path))
    return tuple(out)


def _column_names(value: str, where: str, name: str, *, signed: bool) -> tuple[str, ...]:
    """Comma- or space-separated column names, each once; ``signed``: '-' may lead one."""
    names = tuple(dict.fromkeys(w for w in re.split(r"[,\s]+", str(value)) if w))
    unknown = [w for w in names if (w[1:] if signed and w.startswith("-") else w)
               not in TABLE_COLUMNS]
    if unknown or not names:
        what = f"no column {', '.join(map(repr, unknown))}" if unknown else "names no column"
        raise ConfigError(f"{name} {value!r} from {where}: {what}; known: "
                          f"{', '.join(TABLE_COLUMNS)}")
    return names


def _table_columns(value: str, where: str, name: str) -> tuple[str, ...]:
    return _column_names(value, where, name, signed=False)


def _sort(value: str, where: str, name: str) -> tuple[str, ...]:
    return _column_names(value, where, name, signed=True)


def _ab_engine(value: str, where: str, name: str) -> tuple[str, str]:
    """An http(s) URL (attach), a release (cached build) or a llama-server binary."""
    text = str(value).strip()
    if "://" in text:
        return "url", _url(text, where, name)
    try:
        path = Path(text).expanduser()
        found = "file" if path.is_file() else "dir" if path.is_dir() else None
    except (OSError, RuntimeError, ValueError):  # too long, ~nobody, a NUL
        found = None
    if re.fullmatch(r"[bB]?\d{1,9}", text) and found is None:
        return "release", _release(text, where, name)
    if found != "file":
        why = "a directory" if found == "dir" else "no such file"
        raise ConfigError(
            f"{name} {value!r} from {where} is no http(s) URL, no llama.cpp release (e.g. "
            f"b11292) and no llama-server binary ({why}); give one of those, e.g. {name} b11292")
    return "bin", text


_FRACTION = _number(0, 1, closed_hi=False, what="a fraction", example="0.05 means a 5% change")

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("engine", f"engine to measure: {', '.join(ENGINE_NAMES)}", _text, None, "NAME", True),
    OptionSpec("url", "attach to an engine already running at URL instead of starting one",
               _url, None, "URL", True),
    OptionSpec("model", "the model: a GGUF file (llama-server), a Hugging Face folder "
               "(mlx, vllm), a name the engine serves, or a generated one: 'main' (~1.1 GB "
               "F16, default) or 'test' (tens of MB), written as GGUF or as a folder",
               _text, "main", "PATH", True),
    OptionSpec("server_bin", "llama-server binary to run (default: the one built by "
               "`tokperf install-engine llama-server`, then PATH)", _text, None, "PATH", True),
    OptionSpec("engine_version", "llama.cpp release to run, from the builds `tokperf "
               "install-engine llama-server --version N` cached (e.g. 11292 or b11292); "
               "instead of --tokperf-server-bin", _release, None, "N", True),
    OptionSpec("port", "loopback port for a started server (default: a free one)",
               _whole(1, 65535, "8080"), None, "N"),
    OptionSpec("threads", "engine threads (default: all cores)", _whole(1, 4096, "8"), None, "N"),
    OptionSpec("ctx_size", "context size per slot of a started server", _TOKENS, 4096, "N"),
    OptionSpec("parallel", "slots of a started llama-server (-np): how many concurrent "
               "streams tok_bench(concurrency=N) may use", _whole(1, 1024, "4"), 1, "N"),
    OptionSpec("repetitions", "measured repetitions per workload: N exactly (as llama-bench's "
               "-r), or MIN-MAX: adaptive, until the decode interval is within "
               "tokperf_target_interval (default 3-10)", _repetitions, (None, 3, 10), "N|MIN-MAX"),
    OptionSpec("target_interval", "adaptive repetitions stop once the 95% interval of the "
               "mean judged decode is within +/- this fraction of it", _SHARE, 0.02, "F",
               True, cli=False),
    OptionSpec("busy_wait", "a tok_bench call measured on a busy machine waits up to this "
               "many seconds for a quiet window and measures once more (the busy try is "
               "stored beside it as busy); 0: never", _WAIT, 30.0, "S", True, cli=False),
    OptionSpec("max_cv", "a result whose judged decode varies more than this (coefficient of "
               "variation over its repetitions) is 'unstable', never 'pass'", _SHARE, 0.05,
               "F", True, cli=False),
    OptionSpec("warmup", "discarded warm-up runs per workload", _whole(0, 1 << 20, "1"), 1, "N"),
    OptionSpec("db", f"results database: an SQLite file ({DEFAULT_DB_HELP}) or a "
               "postgresql://USER@HOST/DBNAME URL a fleet of runners shares (password from "
               "PGPASSWORD or ~/.pgpass); 'off' writes nothing",
               _text, None, "PATH", True),
    OptionSpec("startup_timeout", "seconds to wait for a started server's /health",
               _SECONDS, 120.0, "S"),
    OptionSpec("request_timeout", "seconds one generation may take", _SECONDS, 600.0, "S"),
    OptionSpec("idle_timeout", "seconds without a new token, once tokens flow, before a "
               "generation counts as stalled (keep-alive comments do not count)", _SECONDS,
               DEFAULT_IDLE_TIMEOUT_S, "S", True, cli=False),
    OptionSpec("max_body", "largest non-streamed answer read from an engine (/props, "
               "/v1/models, /metrics ...), e.g. 8MiB; a longer one is refused, never buffered",
               _byte_size, MAX_BODY_BYTES, "SIZE", True, cli=False),
    OptionSpec("api_key_env", "environment variable holding the API key sent as "
               "'Authorization: Bearer' (llama-server --api-key, vLLM, LM Studio, OpenAI-"
               f"compatible servers); never the key itself (default {DEFAULT_API_KEY_ENV})",
               _env_name, DEFAULT_API_KEY_ENV, "NAME", True, cli=False),
    OptionSpec("bandwidth", "memory bandwidth for the ceiling, e.g. 1008GB/s (default: "
               "detected: NVML, the catalog, or a read probe on the CPU)", _bandwidth, None,
               "BW", True),
    OptionSpec("bandwidth_file", "where each host's read probes are kept between sessions: a "
               "CPU decode is judged against the highest bandwidth its host reached (default: "
               "bandwidth.json in tokperf's cache dir; 'off': this session's probes only)",
               _text, None, "PATH", True, cli=False),
    OptionSpec("device", "where the engine runs, for the ceiling's bandwidth: cpu, cuda:N, "
               "metal, rocm:N, vulkan:N (default: what the engine reports)", _device, None,
               "DEVICE", True),
    OptionSpec("min_efficiency", "fail a tok_bench measurement whose decode is below this "
               "fraction of the ceiling, e.g. 0.6", FRACTION_OF_CEILING, None, "F"),
    OptionSpec("baseline", "the stored history the regression gate judges against: 'history' "
               "(earlier runs of the same series in the DB, default), 'engine=VERSION', another "
               "results DB, or 'off'", _baseline, Baseline("history"), "SPEC", True),
    OptionSpec("min_effect", "smallest relative change the regression gate flags (0.05 = 5%)",
               _FRACTION, 0.05, "F"),
    OptionSpec("report", "write a report here at the end, the format by suffix: .md (the "
               "GitHub step summary gets one whenever GITHUB_STEP_SUMMARY is set), .json "
               "(every repetition's figures too), .html, .svg or .png (a box plot of each "
               "test's repetitions); plots need pip install 'pytest-tokperf[plot]'; "
               "repeatable", _reports, None, "PATH", repeat=True),
    OptionSpec("agreement", "tolerated client vs engine decode difference (fraction)",
               _number(0, 1, closed_hi=True, what="a fraction",
                       example="0.05 tolerates a 5% difference"), 0.05, "F", True, cli=False),
    OptionSpec("draft_model", "draft for tok_bench.speculative(): a GGUF PATH sharing the "
               "model's vocabulary, 'self' (every draft accepted, so only the overhead shows) "
               "or 'small' (generated; the default for generated models)", _text, None, "PATH",
               True),
    OptionSpec("speculative_url", "a second running server, drafting, for "
               "tok_bench.speculative() when the engine is attached with --tokperf-url",
               _url, None, "URL", True),
    OptionSpec("columns", "width of the terminal summary table: columns that do not fit are "
               "left out, least important first, and named under it (default: the "
               "terminal's width, 120 where the output is not a terminal; e.g. 250 shows "
               "every column)", _whole(60, 10_000, "120"), None, "N", True, cli=False),
    OptionSpec("table_columns", "the summary table's columns, in order (terminal and "
               f"markdown; comma-separated): {', '.join(TABLE_COLUMNS)} (default: the usual "
               "ones, as many as fit)", _table_columns, None, "NAMES", True, cli=False),
    OptionSpec("sort", "order of the summary table's rows by these columns, the first "
               "deciding; '-' before a name sorts descending (e.g. verdict,-decode: worst "
               "verdict first, then fastest); missing figures last (default: the order the "
               "tests ran)", _sort, (), "NAMES", True, cli=False),
    OptionSpec("ab_engine", "same-run A/B: every tok_bench call also measures this engine in "
               "interleaved ABBA pairs and judges the paired ratio (docs/ci-and-builds.md): an http(s) URL "
               "(attach; you run it), a llama.cpp release (b11292: a cached build) or a "
               "llama-server binary, started beside the candidate", _ab_engine, None, "SPEC", True),
    OptionSpec("ab_model", "same-run A/B: the other engine serves this model instead of the "
               "candidate's (two models compared on purpose)", _text, None, "PATH", True),
    OptionSpec("ab_min_effect", "smallest relative change the same-run A/B flags (pairs cancel "
               "the machine's phase, so it resolves far less than the history gate)",
               _number(0, 1, closed_hi=False, what="a fraction",
                       example="0.02 means a 2% change"), 0.02, "F"),
    OptionSpec("ab_budget", "same-run A/B: each tok_bench call measures pairs for this many "
               "seconds, server starts and warm-ups included, whatever its repetitions (0: no "
               "budget, the call's repetitions from one start)", _ab_budget, AB_BUDGET_S, "S"),
    OptionSpec("ab_starts", "same-run A/B: server starts a side each call's budget is split "
               "over, both servers started anew for each in a random order; the judge counts "
               "their own level once (1: one start, allowed an assumed level of 1%; an "
               "attached engine is always one start; at most one a 2.5 s of budget, fewer "
               "where a start costs more than its share)", _whole(1, 10_000, "16"), AB_STARTS, "N",
               True, cli=False),
    OptionSpec("ab_json", "write every same-run A/B of the session (both sides' paired "
               "figures, the ratios, the verdicts, what changed) as JSON here", _text, None, "PATH"),
    OptionSpec("fail_on_regression", "exit status 1 when the gate found a decode or TTFT "
               "regression against the baseline (significant AND at least --tokperf-min-effect, "
               "controlled across the session); noisy series are reported, not failed",
               _bool, False, "BOOL", True, switch=True),
    OptionSpec("busy", "a tok_bench call (its floors and limits too) or same-run A/B measured "
               "on a machine whose other processes took a notable share of the CPUs: 'skip' "
               "reports it as skipped with the load, neither a pass nor a fail (default; a "
               "call still busy a minute in stops there), 'fail' fails it, 'judge' measures "
               "on and decides it on its figures whatever the load (tokperf compare-builds, "
               "bisect, watch and bench take the same --busy)", _busy_outcome, "skip", "WHAT",
               True),
)

_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")
"""What argparse (pytest's option parser) takes as a value although it starts with '-'."""
REPEATED_VALUE_FLAGS = ("--tokperf-server-arg",)


def check_dash_values(args: Sequence[str]) -> None:
    """Refuse ``--tokperf-bandwidth -5GB/s``: a value after a space that starts with '-'
    (and is no plain negative number) is read by argparse as another option, and pytest
    says only "expected one argument". Run on the raw arguments before pytest parses
    them: a bad value gets the error ``--tokperf-bandwidth=-5GB/s`` gets; a good one (a
    path or server argument that starts with '-') is told to use '='."""
    specs = {spec.flag: spec for spec in OPTIONS if spec.cli and not spec.switch}
    for flag, value in zip(args, args[1:]):
        if not (isinstance(flag, str) and isinstance(value, str)) or len(value) < 2 \
                or not value.startswith("-") or _NEGATIVE_NUMBER.fullmatch(value):
            continue
        spec = specs.get(flag)
        if spec is None and flag not in REPEATED_VALUE_FLAGS:
            continue
        if spec is not None:
            spec.parse(value, f"option {flag}", flag)
        raise ConfigError(
            f"{flag} {value!r}: a value after a space that starts with '-' is read by pytest "
            f"as another option; write {flag}={value}")


MARKER_ARGUMENTS: dict[str, Parser] = {
    "repetitions": _COUNT,
    "warmup": _whole(0, 1 << 20, "1"),
    "min_efficiency": FRACTION_OF_CEILING,
    "prompt_tokens": _TOKENS,
    "generate_tokens": _whole(2, 1 << 24, "128 (decode needs at least 2 tokens)"),
    "depth_tokens": _whole(0, 1 << 24, "4096"),
    "concurrency": _whole(1, 1024, "4"),
    "cached_prefix_tokens": _whole(0, 1 << 24, "960"),
    "chat": _bool,
}
"""What ``@pytest.mark.tokperf(...)`` takes, each checked like the options."""


def parse_marker(arguments: Mapping[str, object], where: str,
                 positional: tuple[object, ...] = ()) -> dict[str, Any]:
    """The marker's arguments, typed and range-checked; ``ConfigError`` names the bad one.
    Positional arguments are refused: which setting would ``tokperf(3)`` be?"""
    if positional:
        raise ConfigError(
            f"{where} got positional argument(s) {list(positional)!r}, which it does not "
            f"read; name each one, e.g. @pytest.mark.tokperf(repetitions=3); known: "
            f"{', '.join(MARKER_ARGUMENTS)}")
    unknown = sorted(set(arguments) - set(MARKER_ARGUMENTS))
    if unknown:
        raise ConfigError(f"{where} got unknown argument(s) {unknown!r}; known: "
                          f"{', '.join(MARKER_ARGUMENTS)}")
    return {name: MARKER_ARGUMENTS[name](str(value) if not isinstance(value, str) else value,
                                         where, name)
            for name, value in arguments.items()}


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
    repetitions: int | None
    """Exactly this many; None: adaptive (``target_interval``, ``min``/``max_repetitions``)."""
    warmup: int
    db: DbLocation | None
    """An SQLite file, or a PostgreSQL database (``PgUrl``) a fleet shares."""
    startup_timeout: float
    request_timeout: float
    bandwidth: float | None
    min_efficiency: float | None
    baseline: Baseline
    min_effect: float
    report_md: str | None
    report_json: str | None
    report_html: str | None
    agreement: float
    draft_model: str | None = None
    engine_version: str | None = None
    speculative_url: str | None = None
    device: Device | None = None
    server_args: tuple[str, ...] = ()
    fail_on_regression: bool = False
    busy: BusyPolicy = BusyPolicy("skip", 30.0)
    """What a call or A/B measured busy becomes (``tokperf_busy``: 'skip', 'fail' as
    ``errors.MeasuredBusy``, 'judge'), and how long a call measured busy waits for a
    quiet window to measure again (``tokperf_busy_wait``; 0: never)."""
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S
    api_key_env: str = DEFAULT_API_KEY_ENV
    api_key: ApiKey | None = None
    """Read from ``$api_key_env`` once; its ``repr`` is masked and it is never stored."""
    target_interval: float = 0.02
    min_repetitions: int = 3
    max_repetitions: int = 10
    max_cv: float = 0.05
    bandwidth_file: Path | None = None
    """Where probes are kept per host (None: nowhere, this session's only)."""
    max_body: int = MAX_BODY_BYTES
    """The byte cap of one non-streamed answer (``tokperf_max_body``)."""
    columns: int | None = None
    """Width the terminal summary fits in (``report.table.summary_table``); None: the
    terminal's."""
    table_columns: tuple[str, ...] | None = None
    """The summary table's columns by name (``TABLE_COLUMNS``); None: the usual ones."""
    sort: tuple[str, ...] = ()
    """Column names the summary's rows are sorted by; '-name' descending."""
    report_histogram: str | None = None
    """A box plot of each test's repetitions, .svg or .png (``report.plots``)."""
    ab_server_bin: str | None = None
    ab_engine_version: str | None = None
    ab_url: str | None = None
    ab_model: str | None = None
    ab_min_effect: float = 0.02
    ab_budget: float | None = AB_BUDGET_S
    ab_starts: int = AB_STARTS
    """Seconds each same-run A/B may measure pairs for (``MeasureOptions.budget_s``)."""
    ab_json: str | None = None
    front_names: tuple[tuple[str, str], ...] = ()
    """A front-end's own option per setting (``tokperf bench``'s ``--max-cv``)."""

    def option_name(self, name: str) -> str:
        """How a user sets ``name`` here (a note names it): front-end option, flag or ini."""
        spec = next(s for s in OPTIONS if s.name == name)
        return dict(self.front_names).get(name) or (spec.flag if spec.cli else f"ini {spec.ini}")

    @property
    def ab(self) -> bool:
        """True when every tok_bench call is a same-run A/B against another engine."""
        return any(getattr(self, name) is not None for name in AB_OPTIONS)

    def ab_settings(self) -> Settings:
        """The A/B's other side: the candidate's settings, with its engine and model."""
        from dataclasses import replace

        if self.ab_url is not None:
            return replace(self, url=self.ab_url, server_bin=None, engine_version=None,
                           model=self.ab_model or self.model, port=None)
        given = self.ab_server_bin is not None or self.ab_engine_version is not None
        return replace(self, url=None, port=None,
                       server_bin=self.ab_server_bin if given else self.server_bin,
                       engine_version=self.ab_engine_version if given else self.engine_version,
                       model=self.ab_model or self.model)

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
    engine_names: tuple[str, ...] | None = ENGINE_NAMES,
    *,
    flags: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every option once; ``cli(name)``/``ini(key)`` return None when unset.

    ``engine_names`` are the engines ``--tokperf-engine`` may name (None: check later,
    with ``check_engine_name``, once a registry with the hook's engines exists).
    ``flags`` names a front-end's own options (``tokperf bench``'s ``-r``) for errors;
    ``cli`` is asked for these and for every option with a flag, never for a project
    setting (``OptionSpec.cli`` False) that the front-end has no option for.
    """
    values: dict[str, Any] = {}
    flags = flags or {}
    db_where = "option --tokperf-db"
    for spec in OPTIONS:
        flag = flags.get(spec.name, spec.flag if spec.cli else spec.ini)
        raw: Any = cli(spec.name) if spec.cli or spec.name in flags else None
        where = f"option {flag}"
        if isinstance(raw, (list, tuple)):
            raw = ",".join(raw) or None
        if raw is None and spec.env and env.get(spec.env_var):
            raw, where = env[spec.env_var], f"environment variable {spec.env_var}"
        if raw is None:
            ini_value = ini(spec.ini)
            if ini_value not in (None, ""):
                raw, where = str(ini_value), f"ini option {spec.ini}"
        values[spec.name] = spec.default if raw is None else spec.parse(str(raw), where, flag)
        if spec.name == "db":
            db_where = where
    _spread_compound_options(values)
    engine = values["engine"]
    if engine_names is not None:
        check_engine_name(engine, engine_names, flags.get("engine", "--tokperf-engine"))
    if values["url"] is not None and engine is None:
        values["engine"] = "llama-server"
    _check_attached_model(values)
    values["threads"] = values["threads"] or (os.cpu_count() or 1)
    values["db"] = _db_path(values["db"], rootdir, db_where)
    if values["bandwidth_file"] is not None or values["engine"] is not None:
        values["bandwidth_file"] = _bandwidth_file(values["bandwidth_file"])  # cache dir: lazily
    _check_ab(values)
    api_key = _api_key(env, values["api_key_env"])
    return Settings(server_args=server_args, api_key=api_key, front_names=tuple(flags.items()),
                    **values)


_AB_ENGINE_FIELDS = {"url": "ab_url", "release": "ab_engine_version", "bin": "ab_server_bin"}
"""What ``--tokperf-ab-engine`` names, by kind, and the Settings field that holds it."""


def _spread_compound_options(values: dict[str, Any]) -> None:
    """Options whose one value fills several Settings fields: ``--tokperf-repetitions``
    (the count or the adaptive bounds), ``--tokperf-report`` (a path per format) and
    ``--tokperf-ab-engine`` (a URL, a release or a binary)."""
    values["repetitions"], values["min_repetitions"], values["max_repetitions"] = \
        values["repetitions"]
    values.update(report_md=None, report_json=None, report_html=None, report_histogram=None)
    for kind, path in values.pop("report") or ():
        values[f"report_{kind}"] = path
    values.update({field: None for field in _AB_ENGINE_FIELDS.values()})
    if values["ab_engine"] is not None:
        kind, value = values["ab_engine"]
        values[_AB_ENGINE_FIELDS[kind]] = value
    values.pop("ab_engine")
    values["busy"] = BusyPolicy(values["busy"], values.pop("busy_wait"))


def _check_attached_model(values: Mapping[str, Any]) -> None:
    """With ``--tokperf-url``, a ``--tokperf-model`` that names a GGUF file (llama-server,
    or any ``*.gguf``) is read for the ceiling: one that is not there is refused, not
    ignored. Other engines take a model name (``llama3.2:1b``), which is not a path."""
    model, engine = values["model"], values["engine"]
    if values["url"] is None or model in BUILTIN_MODELS:
        return
    if engine not in (None, "llama-server") and not str(model).lower().endswith(".gguf"):
        return
    path = Path(str(model)).expanduser()
    if not path.is_file():
        why = "is a directory" if path.is_dir() else "does not exist"
        raise ConfigError(
            f"--tokperf-model {model!r} {why}; with --tokperf-url it names the attached "
            f"engine's GGUF file, read for the bandwidth ceiling: fix the path, or drop "
            f"--tokperf-model to use what the engine reports")


AB_OPTIONS = ("ab_server_bin", "ab_engine_version", "ab_url", "ab_model")
"""Any of these turns the run's tok_bench calls into same-run A/Bs (``Settings.ab``)."""


def _check_ab(values: Mapping[str, Any]) -> None:
    """A started A/B engine needs a started candidate; a budget needs an A/B."""
    other = values["ab_url"] or values["ab_server_bin"] or values["ab_engine_version"]
    if other is not None and values["engine"] is None:
        raise ConfigError(f"--tokperf-ab-engine {other!r} names the A/B's other engine but no "
                          "candidate engine is configured; add --tokperf-engine llama-server "
                          "or --tokperf-url URL")
    if (values["ab_url"] is None and values["url"] is not None
            and (values["ab_server_bin"] or values["ab_engine_version"] or values["ab_model"])):
        raise ConfigError("the candidate is attached with --tokperf-url, so tokperf cannot start "
                          "a like-for-like engine beside it; run the other one too and pass "
                          "--tokperf-ab-engine URL")
    if values["ab_budget"] not in (None, AB_BUDGET_S) and all(values[n] is None for n in AB_OPTIONS):
        raise ConfigError(f"--tokperf-ab-budget {values['ab_budget']:g}: no same-run A/B is "
                          "asked for, so nothing would stop by it; add --tokperf-ab-engine "
                          "SPEC (or --tokperf-ab-model PATH) or drop the budget")
    if (values["ab_url"] is None and values["ab_model"] is not None
            and values["engine"] not in (None, "llama-server")):
        raise ConfigError(f"--tokperf-ab-model: tokperf starts the A/B's other engine only "
                          f"for llama-server, not {values['engine']!r}; run it and pass "
                          "--tokperf-ab-engine URL")


def _api_key(env: Mapping[str, str], name: str) -> ApiKey | None:
    """The key in ``$name``; a variable named on purpose must be set."""
    if name != DEFAULT_API_KEY_ENV and not env.get(name, "").strip():
        raise ConfigError(
            f"tokperf_api_key_env {name!r}: the environment variable {name} is not set or "
            f"empty; export the API key in it, or drop the option"
        )
    try:
        return api_key_from_env(env, name)
    except ValueError as exc:
        raise ConfigError(f"tokperf_api_key_env {name!r}: {exc}") from exc


def check_engine_name(engine: str | None, engine_names: tuple[str, ...],
                      flag: str = "--tokperf-engine") -> None:
    """``ConfigError`` unless ``engine`` is None or one of ``engine_names``."""
    if engine is not None and engine not in engine_names:
        raise ConfigError(
            f"{flag} {engine!r} is not an engine this plugin knows; "
            f"choose one of: {', '.join(engine_names)}"
        )


def _bandwidth_file(value: str | None) -> Path | None:
    if value is None:
        from pytest_tokperf.hardware.reached import default_calibration_path

        return default_calibration_path()
    if value.strip().lower() in ("off", "none", "no", ""):
        return None
    return Path(value).expanduser()


def _db_path(value: str | None, rootdir: Path, where: str = "option --tokperf-db"
             ) -> DbLocation | None:
    if value is None:
        return default_db(project_root(rootdir))
    if value.strip().lower() in ("off", "none", "no", ""):
        return None
    return db_location(value, f"--tokperf-db from {where}")
