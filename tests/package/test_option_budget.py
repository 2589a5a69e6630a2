"""The plugin's options stay few and all in sight: every ``--tokperf-*`` flag it registers
is in ``pytest --help``, and the flags and ini keys stay within a budget. A project
setting is an ini key and a ``PYTEST_TOKPERF_*`` variable, never a hidden flag; a renamed
option is removed, not kept under its old name. Raising a budget is a decision a commit
message explains."""

from __future__ import annotations

import re

import pytest

GROUP_TITLE = "LLM engine performance (pytest-tokperf):"
MAX_FLAGS = 30
MAX_INI_KEYS = 41


def _help_text(pytester: pytest.Pytester) -> str:
    result = pytester.runpytest("--help")
    assert result.ret == pytest.ExitCode.OK
    return result.stdout.str()


def test_every_registered_flag_is_shown_in_help(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    registered = sorted("--" + dest.replace("_", "-") for dest in vars(config.option)
                        if dest.startswith("tokperf_"))
    group = _help_text(pytester).split(GROUP_TITLE, 1)[1].split("\n\n", 1)[0]
    shown = sorted(re.findall(r"^  (--tokperf-[a-z-]+)", group, re.MULTILINE))
    assert registered, "no --tokperf-* option registered: is the plugin loaded?"
    hidden = sorted(set(registered) - set(shown))
    assert hidden == [], "registered, but left out of --help: make each an ini key only"
    assert shown == registered


def test_the_options_stay_within_their_budget(pytester: pytest.Pytester) -> None:
    text = _help_text(pytester)
    group = text.split(GROUP_TITLE, 1)[1].split("\n\n", 1)[0]
    flags = re.findall(r"^  (--tokperf-[a-z-]+)", group, re.MULTILINE)
    ini_keys = re.findall(r"^  (tokperf_[a-z_]+) \(", text, re.MULTILINE)
    assert 0 < len(flags) <= MAX_FLAGS, flags
    assert 0 < len(ini_keys) <= MAX_INI_KEYS, ini_keys
    assert "deprecated" not in group.lower()
    ini_help = re.findall(r"^  tokperf_.*\n(?:    .*\n)*", text, re.MULTILINE)
    assert len(ini_help) == len(ini_keys)
    assert not [h for h in ini_help if "deprecated" in h.lower()]
