"""Options that were silently wrong, ignored or a traceback: each is a one-line error now,
naming the value and the fix.

Bandwidth in bits (``8Tb/s``) was read as bytes, 8x off; ``1e30GB/s`` was accepted;
``--tokperf-model missing.gguf`` beside ``--tokperf-url`` and ``@pytest.mark.tokperf(3)``
were ignored; ``http://[::1`` was an INTERNALERROR; ``https://`` against a plain-http
port said "loading a model?".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.fake_faults import FakeFaultyLlama

from pytest_tokperf.engines.wire import not_ready_error
from pytest_tokperf.errors import ConfigError
from pytest_tokperf.hardware.units import parse_bandwidth
from pytest_tokperf.settings import Settings, parse_marker, resolve


def settings(tmp_path: Path, **cli: str) -> Settings:
    return resolve(lambda name: cli.get(name), lambda key: None, {}, tmp_path)


@pytest.mark.parametrize(("text", "fragment"), [
    ("8Tb/s", "'8Tb/s' is in bits per second ('Tb/s', lowercase b); tokperf reads bytes: "
              "8Tb/s is 1000 GB/s, so pass '1000GB/s'"),
    ("1008Gb/s", "1008Gb/s is 126 GB/s, so pass '126GB/s' (or, if you meant bytes, write the "
                 "unit with a capital B: '1008GB/s')"),
    ("100Gbps", "'100Gbps' is in bits per second"),
    ("800 Gbit/s", "is 100 GB/s"),
    ("1e-30GB/s", "'1e-30GB/s' (1e-30 GB/s) is outside what memory can do (0.1 GB/s to 100 TB/s)"),
    ("1e30GB/s", "is outside what memory can do"),
    ("1e308GB/s", ("'1e308GB/s' (beyond any real memory) is outside what memory can do "
                   "(0.1 GB/s to 100 TB/s), the range accepted")),
    ("1e400", "(beyond any real memory) is outside what memory can do (0.1 GB/s to 100 TB/s)"),
    ("0.05", "'0.05' (0.05 GB/s) is outside"),
    ("101TB/s", "is outside"),
])
def test_bandwidth_in_bits_or_out_of_bounds_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_bandwidth(text)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("0.1", 1e8), ("100TB/s", 1e14), ("4.8TB/s", 4.8e12), ("546 gb/s", 546e9),
])
def test_bandwidth_at_the_bounds_is_read(text: str, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize(("url", "fragment"), [
    ("http://[::1", "is not a valid URL (Invalid IPv6 URL)"),
    ("http://127.0.0.1:99999", "is not a valid URL (Port out of range"),
    ("http://127.0.0.1:8080\r\n", "contains '\\n\\r' (whitespace or a control character"),
    ("http://127.0.0.1 :8080", "contains ' '"),
    ("http://127.0.0.1:0", "has port 0"),
    ("http://host:port", "is not a valid URL"),
])
def test_a_bad_url_is_one_line(tmp_path: Path, url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, url=url)
    message = str(caught.value)
    assert fragment in message and "--tokperf-url" in message
    assert "\n" not in message


def test_a_missing_model_beside_a_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--tokperf-model 'missing.gguf' does not exist; with "
                                          "--tokperf-url it names the attached engine's GGUF"):
        settings(tmp_path, url="http://127.0.0.1:8080", model="missing.gguf")


@pytest.mark.parametrize("cli", [
    {"url": "http://127.0.0.1:11434", "engine": "ollama", "model": "llama3.2:1b"},
    {"url": "http://127.0.0.1:8080"},
])
def test_a_model_name_beside_a_url_is_kept(tmp_path: Path, cli: dict[str, str]) -> None:
    assert settings(tmp_path, **cli).url == cli["url"]


@pytest.mark.parametrize(("args", "kwargs"), [((3,), {}), (("fast",), {"repetitions": 2})])
def test_positional_marker_arguments_are_refused(args: tuple[Any, ...],
                                                 kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"got positional argument\(s\) \[.*\], which it does "
                                          r"not read; name each one, e.g. "
                                          r"@pytest.mark.tokperf\(repetitions=3\)"):
        parse_marker(kwargs, "@pytest.mark.tokperf", args)


def test_a_positional_marker_argument_errors_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.tokperf(3)
        def test_bench(tok_bench):
            tok_bench(prompt_tokens=4, generate_tokens=8)
    """)
    with FakeFaultyLlama("ok") as fake:
        result = pytester.runpytest("--tokperf-url", fake.url, "--tokperf-db", "off",
                                    "--tokperf-bandwidth", "30GB/s")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*positional argument(s) [[]3[]], which it does not read*"])


def test_https_against_a_plain_http_port_says_so() -> None:
    with FakeFaultyLlama("ok") as fake:
        url = fake.url.replace("http://", "https://")
        message = str(not_ready_error("llama-server", url))
    assert "loading a model" not in message
    assert "not with TLS" in message and "use http://127.0.0.1:" in message


def test_a_server_bin_is_read_relative_to_the_current_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_tokperf.launch.plans import find_binary

    (tmp_path / "serve.sh").write_text("#!/bin/sh\n")
    (tmp_path / "serve.sh").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    assert find_binary("vllm", "./serve.sh") == tmp_path / "serve.sh"


@pytest.mark.parametrize(("value", "fragment"), [
    ("9" * 5000, "is no http(s) URL, no llama.cpp release"),  # no ValueError from int()
    ("a\x00b", "is no http(s) URL"),  # no 'embedded null byte' from the file system
    ("~nobody-here/llama-server", "(no such file)"),  # no RuntimeError from expanduser
    ("x" * 5000, "(no such file)"),  # no 'File name too long'
])
def test_a_hostile_ab_engine_is_one_config_error(tmp_path: Path, value: str,
                                                 fragment: str) -> None:
    with pytest.raises(ConfigError, match="--tokperf-ab-engine") as info:
        settings(tmp_path, engine="llama-server", ab_engine=value)
    assert fragment in str(info.value)
    with pytest.raises(ConfigError, match="is no release"):
        settings(tmp_path, engine_version="9" * 5000)
