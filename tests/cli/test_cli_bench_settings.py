"""``tokperf bench`` resolves the plugin's settings: repetitions adaptive like the plugin's
unless ``-r`` fixes them (no engine needed)."""

from __future__ import annotations

import pytest

from pytest_tokperf.cli.bench import bench_settings
from pytest_tokperf.cli.main import build_parser
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.settings import Settings


def _settings(*argv: str) -> Settings:
    return bench_settings(build_parser().parse_args(["bench", "--db", "off", *argv]))


def test_bench_repeats_adaptively_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_TOKPERF_REPETITIONS", raising=False)
    settings = _settings()
    assert settings.repetitions is None
    assert (settings.min_repetitions, settings.max_repetitions,
            settings.target_interval) == (3, 10, 0.02)


def test_bench_takes_the_adaptive_bounds_and_a_fixed_count(
        capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings("-r", "4-6", "--target-interval", "0.05", "--columns", "200")
    assert "deprecated" not in capsys.readouterr().err  # its own options, not old flags
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
    from pytest_tokperf.cli.bench import bench_settings, plan

    args = build_parser().parse_args(["bench", "--db", "off", "-t", "1,2", "-fa", "on",
                                      "-ctk", "q8_0", "-d", "8000", "-c", "1,2"])
    chosen = plan(args)
    first, second = (bench_settings(args, point, chosen) for point in chosen.points)
    assert (first.threads, second.threads) == (1, 2)
    assert first.server_args == ("-fa", "on", "-ctk", "q8_0")
    assert first.parallel == 2 and first.ctx_size == 8000 + 64 + 128 + 1
