"""RunInfo collection: ids, time, versions, git commit and CI job."""

from __future__ import annotations

import subprocess
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pytest_tokperf.environment import ci_job, collect_run_info, project_commit


def test_collect_run_info_fills_what_it_can(tmp_path: Path) -> None:
    run = collect_run_info(cwd=tmp_path, env={})
    assert uuid.UUID(run.run_id).version == 4
    assert datetime.fromisoformat(run.started_at).utcoffset() == timedelta(0)
    assert run.host and run.os and run.python.split()[-1].count(".") == 2
    assert run.plugin_version
    assert run.pytest_version == pytest.__version__
    assert (run.ci_provider, run.ci_job) == (None, None)
    assert collect_run_info(cwd=tmp_path, env={}).run_id != run.run_id


def test_project_commit_inside_and_outside_git(tmp_path: Path) -> None:
    assert project_commit(tmp_path) is None
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        [*git, "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True
    )
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert project_commit(tmp_path) == head
    assert collect_run_info(cwd=tmp_path, env={}).project_commit == head


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_JOB": "bench", "GITHUB_RUN_ID": "7"},
            ("github-actions", "bench#7"),
        ),
        (
            {"GITLAB_CI": "true", "CI_JOB_NAME": "perf", "CI_JOB_ID": "9", "CI": "true"},
            ("gitlab-ci", "perf#9"),
        ),
        (
            {"BUILDKITE": "true", "BUILDKITE_LABEL": "gpu", "BUILDKITE_JOB_ID": "u-1"},
            ("buildkite", "gpu#u-1"),
        ),
        (
            {"JENKINS_URL": "http://j", "JOB_NAME": "nightly", "BUILD_NUMBER": "3"},
            ("jenkins", "nightly#3"),
        ),
        ({"CI": "true"}, ("ci", None)),
        ({"CI": "false"}, (None, None)),
        ({}, (None, None)),
    ],
)
def test_ci_job_from_environment(env: dict[str, str], expected: tuple[str | None, ...]) -> None:
    assert ci_job(env) == expected
