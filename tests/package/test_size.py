"""The package's size is a test, as the README's is: a line budget per room and for the
whole package, no room over its share, no function past a screen, and ``cli/`` made of
parsers and short handlers. Raising a budget is a decision its commit message explains."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_tokperf"

TOTAL = 33_000
"""Lines of the whole package (every ``.py`` file, blank lines and docstrings too)."""
SHARE = 0.12
"""The most of the package one room may hold."""
BUDGETS = {
    "bench": 3_750, "storage": 3_600, "engines": 3_150, "report": 3_375, "model": 2_650,
    "stats": 2_150, "versions": 2_275, "hardware": 1_850, "builds": 2_050, "expected": 1_750,
    "cli": 1_650, "transport": 1_400, "launch": 800, "top": 2_775,
}
"""Lines per room (``top``: the modules at the package's top level)."""
FUNCTION_LINES = 80
HANDLER_LINES = 40
"""A ``cli/`` function: parse, call one library function, print; nothing more."""


def _room(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else "top"


def _lines() -> dict[str, int]:
    lines: dict[str, int] = defaultdict(int)
    for path in PACKAGE.rglob("*.py"):
        lines[_room(path)] += len(path.read_text(encoding="utf-8").splitlines())
    return lines


def test_the_package_stays_within_its_budget() -> None:
    lines = _lines()
    assert sum(lines.values()) <= TOTAL, f"{sum(lines.values())} lines: delete before adding"
    over = {room: (n, BUDGETS.get(room, 0)) for room, n in lines.items()
            if n > BUDGETS.get(room, 0)}
    assert over == {}, "room: (lines, budget); a new room gets a budget here"


def test_no_room_holds_more_than_its_share() -> None:
    lines = _lines()
    total = sum(lines.values())
    big = {room: f"{n / total:.1%}" for room, n in lines.items()
           if room != "top" and n > SHARE * total}
    assert big == {}


def _functions(folder: Path) -> list[tuple[int, str]]:
    found = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append((size, f"{path.relative_to(PACKAGE.parent)}:{node.name}"))
    return found


def test_no_function_is_longer_than_a_screen() -> None:
    assert [f for size, f in _functions(PACKAGE) if size > FUNCTION_LINES] == []


def test_cli_holds_parsers_and_short_handlers() -> None:
    assert [f for size, f in _functions(PACKAGE / "cli") if size > HANDLER_LINES] == []
