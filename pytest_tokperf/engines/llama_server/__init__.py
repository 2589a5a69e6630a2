"""llama-server: its adapter (``adapter``), its typed speed settings (``settings``) and
what its start-up log says (``log``); ``llama_server_settings`` merges the three sources.

The adapter module loads on first use (``registry``); this package's face only merges
settings, so reading settings costs no HTTP client import.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_tokperf.engines.llama_server.log import parse_llama_server_log, read_log
from pytest_tokperf.engines.llama_server.settings import (
    ServerSettings,
    parse_llama_server_args,
    parse_props,
)


def llama_server_settings(pairs: Mapping[str, str], props: Mapping[str, Any]) -> ServerSettings:
    """Everything known about a llama-server's speed settings, later sources winning:
    the pairs the session passed (``server_args``, ``threads``, ``parallel``, facts from
    ``--list-devices``), then ``/props``, then the start-up log at ``log_path`` when the
    session started the server (observed beats requested)."""
    settings = ServerSettings.from_pairs(pairs)
    if pairs.get("server_args"):
        settings = settings.merged(parse_llama_server_args(pairs["server_args"].split()))
    settings = settings.merged(parse_props(props))
    log_path = pairs.get("log_path")
    if log_path:
        settings = settings.merged(parse_llama_server_log(read_log(Path(log_path))))
    return settings
