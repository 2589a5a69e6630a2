"""``tokperf bench`` resolves the plugin's settings: repetitions adaptive like the plugin's
unless ``-r`` fixes them (no engine needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_tokperf.bench.grid import plan
from pytest_tokperf.bench.measure import MeasureOptions
from pytest_tokperf.cli.bench import bench_settings, grid_options
from pytest_tokperf.cli.main import build_parser
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.settings import Settings, resolve


def _settings(*argv: str) -> Settings:
    args = build_parser().parse_args(["bench", "--db", "off", *argv])
    return bench_settings(args, plan(grid_options(args)))[0]


def test_bench_repeats_adaptively_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_TOKPERF_REPETITIONS", raising=False)
    settings = _settings()
    assert settings.repetitions is None
    assert (settings.min_repetitions, settings.max_repetitions,
            settings.target_interval) == (3, 10, 0.02)


def test_bench_takes_the_adaptive_bounds_and_a_fixed_count() -> None:
    settings = _settings("-r", "4-6", "--target-interval", "0.05", "--columns", "200")
    assert settings.columns == 200
    assert (settings.repetitions, settings.min_repetitions,
            settings.max_repetitions, settings.target_interval) == (None, 4, 6, 0.05)
    assert _settings("-r", "5").repetitions == 5
    with pytest.raises(ConfigError, match=r"^-r '7-6' from option -r is neither N"):
        _settings("-r", "7-6")
    with pytest.raises(ConfigError, match=r"^--repetitions '7-6' from option --repetitions"):
        _settings("--repetitions", "7-6")
    with pytest.raises(ConfigError, match=r"^--columns '20' from option --columns"):
        _settings("--columns", "20")
    with pytest.raises(ConfigError, match=r"^--engine 'llamaserver' is not an engine"):
        _settings("--engine", "llamaserver")


def test_each_server_configuration_has_its_settings() -> None:
    args = build_parser().parse_args(["bench", "--db", "off", "-t", "1,2", "-fa", "on",
                                      "-ctk", "q8_0", "-d", "8000", "-c", "1,2"])
    first, second = bench_settings(args, plan(grid_options(args)))
    assert (first.threads, second.threads) == (1, 2)
    assert first.server_args == ("-fa", "on", "-ctk", "q8_0")
    assert first.parallel == 2 and first.ctx_size == 8000 + 64 + 128 + 1


def test_bench_notes_name_its_own_options_not_the_plugins_ini() -> None:
    # the unstable note said "(tokperf_max_cv)": an ini name `tokperf bench` has no option for
    settings = _settings("--max-cv", "0.1")
    options = MeasureOptions.of(settings)
    assert (options.max_cv, options.max_cv_option) == (0.1, "--max-cv")
    assert settings.option_name("busy_wait") == "--busy-wait"
    with pytest.raises(ConfigError, match=r"^--max-cv '2' from option --max-cv"):
        _settings("--max-cv", "2")
    plugin = resolve(cli=lambda _: None, ini=lambda _: None, env={}, rootdir=Path.cwd())
    assert (plugin.option_name("max_cv"), plugin.option_name("busy_wait"),
            plugin.option_name("url")) == ("ini tokperf_max_cv", "ini tokperf_busy_wait",
                                           "--tokperf-url")
