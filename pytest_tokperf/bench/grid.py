"""What ``tokperf bench`` measures: llama-bench's tests on each server configuration.

llama-bench's lists and ranges make a grid: every combination of the server's options is
one ``ServerPoint`` (a llama-server started once); on each, the workload lists make the
``BenchTest`` values (``pp``, ``tg``, ``pg`` at every depth, with tokperf's concurrency
and warm prefixes). A 0 in ``-p`` or ``-n`` asks for no test of that kind.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_tokperf.errors import ConfigError

if TYPE_CHECKING:
    from pytest_tokperf.settings import Settings

TestKind = Literal["pp", "tg", "pg"]

PP_GENERATE_TOKENS = 2
"""A prompt-only test still streams this many tokens (its decode is not judged)."""
TG_PROMPT_TOKENS = 1
"""A generation-only test sends this many prompt tokens (llama-bench starts from one)."""
MAX_VALUES = 1000
"""The most values one list or range may give."""

KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""What llama-server's ``-ctk``/``-ctv`` take."""
FLASH_ATTN = {"on": "on", "1": "on", "true": "on", "enabled": "on",
              "off": "off", "0": "off", "false": "off", "disabled": "off",
              "auto": "auto", "-1": "auto"}
"""``-fa`` values as llama-bench reads them (``common_arg_utils``), as llama-server's."""
FLASH_ATTN_NUMBER = {"on": 1, "off": 0, "auto": -1}
"""llama-bench's ``flash_attn`` field: 1 on, 0 off, -1 auto."""

_RANGE = re.compile(r"(?P<first>-?\d+)(?:-(?P<last>\d+)(?:(?P<op>[+*])(?P<step>\d+))?)?")


def parse_numbers(given: Sequence[str], flag: str, minimum: int) -> list[int]:
    """Whole numbers from comma lists and llama-bench ranges (``first-last``,
    ``first-last+step``, ``first-last*mult``), each at least ``minimum``."""
    values: list[int] = []
    for text in given:
        for part in (p.strip() for p in text.split(",")):
            found = _RANGE.fullmatch(part)
            expanded = _expand(found, text, part, flag) if found else []
            if not expanded or min(expanded) < minimum:
                ranges = "" if found else f" or a range such as {flag} 64-512*2"
                raise ConfigError(f"{flag} {text!r}: {part!r} is not a whole number >= "
                                  f"{minimum}; pass a comma-separated list such as {flag} "
                                  f"64,512{ranges}")
            values += expanded
    return values


def _expand(found: re.Match[str], text: str, part: str, flag: str) -> list[int]:
    first = int(found["first"])
    if found["last"] is None:
        return [first]
    last, op, step = int(found["last"]), found["op"] or "+", int(found["step"] or 1)
    out: list[int] = []
    value = first
    while value <= last:
        out.append(value)
        following = value + step if op == "+" else value * step
        if following <= value or len(out) > MAX_VALUES:
            why = ("never grows" if following <= value
                   else f"gives more than {MAX_VALUES} values")
            raise ConfigError(f"{flag} {text!r}: the range {part!r} {why}; e.g. {flag} "
                              f"1-16*2 or {flag} 8-32+8")
        value = following
    if not out:
        raise ConfigError(f"{flag} {text!r}: the range {part!r} is empty (its last value is "
                          f"below its first); e.g. {flag} 8-32+8")
    return out


def parse_words(given: Sequence[str], flag: str, allowed: Sequence[str],
                shown: str | None = None) -> list[str]:
    """Comma-separated words, each one of ``allowed`` (compared in lower case); ``shown``
    says what is allowed in the error (default: every word)."""
    values = [w.strip().lower() for text in given for w in text.split(",")]
    for word in values:
        if word not in allowed:
            raise ConfigError(f"{flag} {','.join(given)!r}: {word!r} is none of "
                              f"{shown or ', '.join(allowed)}")
    return values


def parse_pairs(given: Sequence[str], flag: str = "-pg") -> list[tuple[int, int]]:
    """``-pg PP,TG`` (the flag once per pair): PP prompt tokens, then TG generated."""
    pairs = []
    for text in given:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2 or not all(p.isdigit() for p in parts) \
                or int(parts[0]) < 1 or int(parts[1]) < PP_GENERATE_TOKENS:
            raise ConfigError(f"{flag} {text!r} is not PP,TG (prompt tokens >= 1, generated "
                              f"tokens >= {PP_GENERATE_TOKENS}); e.g. {flag} 512,128, once "
                              f"per pair")
        pairs.append((int(parts[0]), int(parts[1])))
    return pairs


@dataclass(frozen=True, slots=True)
class ServerPoint:
    """One server configuration of the grid; None: not given (the server's default)."""

    model: str
    threads: int | None = None
    gpu_layers: int | None = None
    flash_attn: str | None = None
    type_k: str | None = None
    type_v: str | None = None
    batch: int | None = None
    ubatch: int | None = None

    def server_args(self) -> tuple[str, ...]:
        """llama-server arguments for what was given (threads go through the settings)."""
        args: list[str] = []
        if self.gpu_layers is not None:
            args += ["-ngl", "all" if self.gpu_layers < 0 else str(self.gpu_layers)]
        for flag, value in (("-fa", self.flash_attn), ("-ctk", self.type_k),
                            ("-ctv", self.type_v), ("-b", self.batch), ("-ub", self.ubatch)):
            if value is not None:
                args += [flag, str(value)]
        return tuple(args)

    def label(self, several_models: bool) -> str:
        """The options given (``-t 2 -fa on``; ``-fa 1`` reads ``on``); the model's file
        name when the grid has several."""
        words = [f"-m {Path(self.model).name}"] if several_models else []
        for flag, value in (("-t", self.threads), ("-ngl", self.gpu_layers),
                            ("-fa", self.flash_attn), ("-ctk", self.type_k),
                            ("-ctv", self.type_v), ("-b", self.batch), ("-ub", self.ubatch)):
            if value is not None:
                words.append(f"{flag} {value}")
        return " ".join(words)


@dataclass(frozen=True, slots=True)
class BenchTest:
    """One llama-bench test: ``n_prompt``/``n_gen`` as llama-bench reports them (0 for
    the kind's missing half); ``prompt_tokens``/``generate_tokens`` are what is sent."""

    kind: TestKind
    n_prompt: int
    n_gen: int
    n_depth: int = 0
    concurrency: int = 1
    warm: int = 0
    chat: bool = False

    @property
    def name(self) -> str:
        """llama-bench's test name: ``pp512``, ``tg128``, ``pp512+tg128``, `` @ d4096``."""
        base = {"pp": f"pp{self.n_prompt}", "tg": f"tg{self.n_gen}",
                "pg": f"pp{self.n_prompt}+tg{self.n_gen}"}[self.kind]
        return f"{base} @ d{self.n_depth}" if self.n_depth else base

    @property
    def label(self) -> str:
        """The name with tokperf's own parts: ``tg128 x4``, ``pp512 warm 256``, ``chat``."""
        extras = [f"x{self.concurrency}"] if self.concurrency > 1 else []
        extras += [f"warm {self.warm}"] if self.warm else []
        extras += ["chat"] if self.chat else []
        return " ".join((self.name, *extras))

    @property
    def prompt_tokens(self) -> int:
        return TG_PROMPT_TOKENS if self.kind == "tg" else self.n_prompt

    @property
    def generate_tokens(self) -> int:
        return PP_GENERATE_TOKENS if self.kind == "pp" else self.n_gen

    @property
    def tokens(self) -> int:
        """The tokens llama-bench's t/s counts: n_prompt + n_gen."""
        return self.n_prompt + self.n_gen


def bench_tests(prompts: Sequence[int], gens: Sequence[int], pairs: Sequence[tuple[int, int]],
                depths: Sequence[int], concurrency: Sequence[int], warm: Sequence[int],
                chat: bool = False) -> list[BenchTest]:
    """llama-bench's order on one server: per depth, the pp tests, the tg tests, the pg
    tests. A warm prefix applies to the tests that send a prompt; tg tests run cold."""
    tests: list[BenchTest] = []
    for c, d in itertools.product(concurrency, depths):
        tests += [BenchTest("pp", p, 0, d, c, w, chat)
                  for p in prompts if p > 0 for w in warm]
        tests += [BenchTest("tg", 0, n, d, c, 0, chat) for n in gens if n > 0]
        tests += [BenchTest("pg", p, n, d, c, w, chat) for p, n in pairs for w in warm]
    return list(dict.fromkeys(tests))


def server_points(models: Sequence[str], threads: Sequence[int | None],
                  gpu_layers: Sequence[int | None], flash_attn: Sequence[str | None],
                  type_k: Sequence[str | None], type_v: Sequence[str | None],
                  batch: Sequence[int | None], ubatch: Sequence[int | None]
                  ) -> list[ServerPoint]:
    """Every combination, in llama-bench's order (the model outermost, threads innermost)."""
    return [ServerPoint(m, t, ngl, fa, k, v, b, ub)
            for m, ngl, b, ub, k, v, fa, t in itertools.product(
                models, gpu_layers, batch, ubatch, type_k, type_v, flash_attn, threads)]


@dataclass(frozen=True, slots=True)
class BenchPlan:
    """What one ``tokperf bench`` measures: the server configurations, the tests on each."""

    points: tuple[ServerPoint, ...]
    tests: tuple[BenchTest, ...]
    asked: frozenset[str]
    """llama-bench fields the options set (the md table shows them)."""

    @property
    def context_tokens(self) -> int:
        """A slot's context: the longest test and 64 to spare, at least 4096."""
        needed = max((t.n_depth + t.prompt_tokens + t.generate_tokens for t in self.tests),
                     default=0)
        return max(4096, needed + 64)

    @property
    def several_models(self) -> bool:
        return len({p.model for p in self.points}) > 1


LISTS: dict[str, tuple[str, str, int]] = {
    "prompt": ("-p", "64", 0), "generate": ("-n", "128", 0), "depth": ("-d", "0", 0),
    "concurrency": ("-c", "1", 1), "warm": ("--warm", "0", 0)}
"""The workload lists: their short option, default and least value."""
GRID: dict[str, tuple[str, str]] = {
    "threads": ("-t", "n_threads"), "gpu_layers": ("-ngl", "n_gpu_layers"),
    "flash_attn": ("-fa", "flash_attn"), "type_k": ("-ctk", "type_k"),
    "type_v": ("-ctv", "type_v"), "batch": ("-b", "n_batch"), "ubatch": ("-ub", "n_ubatch")}
"""The server options of the grid: their short option and llama-bench's field."""
SERVER_ONLY = ("gpu_layers", "flash_attn", "type_k", "type_v", "batch", "ubatch")
"""Grid options that are llama-server arguments: a started llama-server only."""


@dataclass(frozen=True, slots=True)
class GridOptions:
    """What ``tokperf bench`` was asked: each list's words by name (empty: not given), and
    how each option given was spelled, so an error names it as typed."""

    lists: Mapping[str, Sequence[str]]
    chat: bool = False
    engine: str = "llama-server"
    url: str | None = None
    spelled: Mapping[str, str] = field(default_factory=dict)

    def flag(self, name: str, default: str) -> str:
        return self.spelled.get(name) or default

    def given(self, name: str) -> Sequence[str]:
        return self.lists.get(name) or ()


def plan(options: GridOptions) -> BenchPlan:
    """The grid and the tests asked for, every list checked (no engine needed)."""
    lists = {name: parse_numbers(options.given(name) or [default],
                                 options.flag(name, short), least)
             for name, (short, default, least) in LISTS.items()}
    if any(0 < n < PP_GENERATE_TOKENS for n in lists["generate"]):
        raise ConfigError(f"{options.flag('generate', '-n')} "
                          f"{','.join(options.given('generate'))!r}: a generation test needs at "
                          f"least {PP_GENERATE_TOKENS} tokens (decode is timed between "
                          f"tokens); 0 asks for none")
    tests = bench_tests(lists["prompt"], lists["generate"], parse_pairs(options.given("pg")),
                        lists["depth"], lists["concurrency"], lists["warm"], options.chat)
    _check_tests(tests)
    models = [m.strip() for text in options.given("model") or ["main"] for m in text.split(",")
              if m.strip()] or ["main"]
    points = server_points(models, **_grid(options))
    asked = frozenset(GRID[name][1] for name in GRID if options.given(name))
    asked |= {"concurrency"} if options.given("concurrency") else frozenset()
    asked |= {"cached_prefix_tokens"} if options.given("warm") else frozenset()
    _check_attached(options, points)
    return BenchPlan(tuple(points), tuple(tests), asked)


def _check_tests(tests: Sequence[BenchTest]) -> None:
    if not tests:
        raise ConfigError("nothing to measure: -p and -n are 0 and no -pg is given; give a "
                          "prompt (-p 512), a generation (-n 128) or a pair (-pg 512,128)")
    for test in tests:
        if test.warm and test.warm >= test.n_depth + test.prompt_tokens:
            raise ConfigError(f"--warm {test.warm} is not below {test.name}'s depth + prompt "
                              f"({test.n_depth + test.prompt_tokens}): a warm test needs new "
                              f"tokens after the cached prefix; lower --warm or raise -p/-d")


def _grid(options: GridOptions) -> dict[str, list[Any]]:
    """Each server option's values (``[None]``: not given, the server's default)."""
    grid: dict[str, list[Any]] = {}
    for name, (short, _) in GRID.items():
        flag, given = options.flag(name, short), options.given(name)
        if not given:
            grid[name] = [None]
        elif name == "flash_attn":
            grid[name] = [FLASH_ATTN[w] for w in parse_words(given, flag, tuple(FLASH_ATTN),
                                                               "on, off, auto (1, 0, -1)")]
        elif name in ("type_k", "type_v"):
            grid[name] = parse_words(given, flag, KV_TYPES)
        else:
            grid[name] = parse_numbers(given, flag, -1 if name == "gpu_layers" else 1)
    return grid


def _check_attached(options: GridOptions, points: Sequence[ServerPoint]) -> None:
    """An attached engine's configuration is its own; a grid needs a started llama-server."""
    server_args = [f"{options.flag(n, GRID[n][0])} {','.join(options.given(n))}"
                   for n in SERVER_ONLY if options.given(n)]
    if options.engine != "llama-server" and server_args:
        raise ConfigError(f"{' '.join(server_args)}: llama-server's arguments, and --engine "
                          f"is {options.engine!r}; drop them")
    grid = [*server_args]
    if len({p.threads for p in points}) > 1:
        grid.append(f"{options.flag('threads', '-t')} {','.join(options.given('threads'))}")
    if len({p.model for p in points}) > 1:
        grid.append(f"{options.flag('model', '-m')} {','.join(options.given('model'))}")
    if options.url and grid:
        raise ConfigError(f"{' '.join(grid)}: {options.flag('url', '--url')} attaches to a "
                          f"running engine, whose configuration tokperf cannot change; drop "
                          f"--url to let tokperf start llama-server for each configuration")


def point_settings(given: Mapping[str, str | None], flags: Mapping[str, str],
                   point: ServerPoint, chosen: BenchPlan) -> Settings:
    """The plugin's settings for one server configuration of ``chosen``, resolved from the
    options ``given`` (None: not given) as pytest's; ``flags``: their names, for errors."""
    from pytest_tokperf.settings import resolve

    values = {**given, "model": point.model,
              "threads": None if point.threads is None else str(point.threads),
              "parallel": str(max(t.concurrency for t in chosen.tests)),
              "ctx_size": str(chosen.context_tokens)}
    return resolve(cli=values.get, ini=lambda _: None, env=os.environ,
                   rootdir=Path.cwd(), server_args=point.server_args(), flags=flags)
