"""Where a run happens: host, OS, Python, versions, project commit and CI job.

Collected once per run into a ``RunInfo``; nothing here fails: unknowns are ``None``.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pytest_tokperf.results import RunInfo

GIT_TIMEOUT_S = 2.0
UNKNOWN_VERSION = "0+unknown"


def utc_now() -> str:
    """ISO 8601 UTC with microseconds: sorts as text in time order."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def package_version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def project_commit(cwd: Path) -> str | None:
    """``git rev-parse HEAD`` of the project in ``cwd``; ``None`` outside git or without git."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def _job(*parts: str | None) -> str | None:
    present = [p for p in parts if p]
    return "#".join(present) or None


def ci_job(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(provider, job) from the CI's own environment variables; (None, None) locally."""
    if env.get("GITHUB_ACTIONS") == "true":
        return "github-actions", _job(env.get("GITHUB_JOB"), env.get("GITHUB_RUN_ID"))
    if env.get("GITLAB_CI"):
        return "gitlab-ci", _job(env.get("CI_JOB_NAME"), env.get("CI_JOB_ID"))
    if env.get("BUILDKITE"):
        return "buildkite", _job(env.get("BUILDKITE_LABEL"), env.get("BUILDKITE_JOB_ID"))
    if env.get("JENKINS_URL"):
        return "jenkins", _job(env.get("JOB_NAME"), env.get("BUILD_NUMBER"))
    if env.get("CI", "").strip().lower() in {"true", "1", "yes"}:
        return "ci", None
    return None, None


def collect_run_info(
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    pytest_version: str | None = None,
) -> RunInfo:
    """A fresh ``RunInfo`` (new run id, UTC start time); no pytest import."""
    env = os.environ if env is None else env
    provider, job = ci_job(env)
    return RunInfo(
        run_id=str(uuid.uuid4()),
        started_at=utc_now(),
        host=socket.gethostname(),
        os=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        plugin_version=package_version("pytest-tokperf") or UNKNOWN_VERSION,
        pytest_version=pytest_version or package_version("pytest"),
        project_commit=project_commit(cwd or Path.cwd()),
        ci_provider=provider,
        ci_job=job,
    )
