"""Where the tool keeps its files outside any project checkout: one policy for all.

``cache_root()`` holds built engines (``engines/``), generated models (``models/``), the
release index and the host's reached bandwidth; ``PYTEST_TOKPERF_CACHE`` overrides it.
The platform's convention comes from ``platformdirs``: ``$XDG_CACHE_HOME/tokperf`` or
``~/.cache/tokperf`` on Linux, ``~/Library/Caches/tokperf`` on macOS,
``%LOCALAPPDATA%\\tokperf\\Cache`` on Windows.
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
    """Virtual environments of Python engines (``mlx``, ``vllm``) that ``.ci/install-engines``
    installs and the plugin starts from."""
    return cache_root() / "venvs"
