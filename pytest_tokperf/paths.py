"""Where the tool keeps its files outside any project checkout: one policy for all.

``cache_root()`` follows ``platformdirs``; ``PYTEST_TOKPERF_CACHE`` overrides it.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "PYTEST_TOKPERF_CACHE"


def cache_root() -> Path:
    """The tool's cache folder (not created here)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs  # small, pure Python; loaded only when a path is asked for

    return Path(platformdirs.user_cache_dir("tokperf", appauthor=False))


def engines_dir() -> Path:
    """Built engine binaries, their logs and the build journal."""
    return cache_root() / "engines"


def models_dir() -> Path:
    """Generated model files, keyed by a hash of their spec."""
    return cache_root() / "models"


def engine_venvs_dir() -> Path:
    """Virtual environments of Python engines that ``.ci/install-engines`` installs."""
    return cache_root() / "venvs"
