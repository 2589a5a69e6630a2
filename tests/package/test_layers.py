"""The package's structure, read from its imports: floors that import only downwards, no
circle between modules, few floors (how much a room may hold: ``test_size``).

An import inside a function counts like one at the top: a function-local import that
hides a circle is still a circle. ``FLOORS`` is the map a newcomer reads (also drawn in
``docs/design.md``); a new package or top-level module gets its floor here.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[2] / "pytest_tokperf"

FLOORS: dict[str, int] = {
    # glue: nothing imports it
    "plugin": 8, "cli": 8, "__init__": 8,
    "report": 7, "hookspecs": 7,
    # one run, assembled
    "bench": 6,
    "settings": 5, "launch": 5, "versions": 5,
    "builds": 4,
    # domain: each usable alone (expected reads the store: same floor, no circle)
    "storage": 3, "expected": 3,
    "engines": 2, "ceiling": 2, "model": 2, "stats": 2, "environment": 2,
    "transport": 1, "hardware": 1,
    # value types and policies that import nothing of ours
    "errors": 0, "results": 0, "paths": 0, "helper_runs": 0, "jsontext": 0, "busy": 0,
    "safe_files": 0,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its body."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                names += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("pytest_tokperf") and _exists(name) and name != module:
                    found[module].add(name)
    return found


def _exists(module: str) -> bool:
    base = PACKAGE.parent.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_every_room_has_a_floor() -> None:
    rooms = {_room(_module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert rooms - FLOORS.keys() == set(), "give each new room a floor in FLOORS"


def test_imports_only_point_down() -> None:
    upward = []
    for module, targets in _imports().items():
        here = FLOORS[_room(module)]
        for target in targets:
            if FLOORS[_room(target)] > here:
                upward.append(f"{module} (floor {here}) -> {target} "
                              f"(floor {FLOORS[_room(target)]})")
    assert upward == []


def test_no_circle_between_modules() -> None:
    graph = _imports()
    # a package's __init__ importing its own submodules is the package's face, not a circle
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                circles.append(trail[trail.index(target):] + [target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert circles == []


def test_the_floors_are_few() -> None:
    assert len(set(FLOORS.values())) <= 10


def test_every_package_says_what_it_owns() -> None:
    silent = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("__init__.py")
              if ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) is None]
    assert silent == []


def test_each_package_has_a_test_folder() -> None:
    tests = PACKAGE.parent / "tests"
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    missing = [name for name in packages if not any((tests / name).glob("test_*.py"))]
    assert missing == []
