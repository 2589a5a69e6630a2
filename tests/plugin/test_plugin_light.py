"""Importing the plugin is free: heavy libraries load only when a run needs them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "numpy", "sqlite_utils", "matplotlib", "gguf", "httpx")

PROBE = f"""
import json, sys
import pytest_tokperf.plugin
print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
"""


def test_importing_the_plugin_loads_no_heavy_library() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == []


def test_a_session_without_an_engine_loads_no_heavy_library(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(f"""
import sys
def pytest_sessionfinish(session):
    loaded = [m for m in {HEAVY!r} if m in sys.modules]
    print("HEAVY", loaded)
""")
    pytester.makepyfile("def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*HEAVY []"])


def test_the_public_api_resolves_every_name() -> None:
    import pytest_tokperf

    for name in pytest_tokperf.__all__:
        assert getattr(pytest_tokperf, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        pytest_tokperf.nope  # noqa: B018


def test_importing_the_package_is_free() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE.replace("pytest_tokperf.plugin",
                                                               "pytest_tokperf")],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_all_lists_exactly_the_lazy_names() -> None:
    import pytest_tokperf

    assert sorted(pytest_tokperf.__all__) == sorted(pytest_tokperf._PUBLIC)
