"""llama-server: its adapter, its speed settings from every source, its start-up log reader.

The adapter loads on first use, so reading settings costs no HTTP client import."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_tokperf.engines.llama_server.log import parse_llama_server_log, read_log
from pytest_tokperf.engines.speed_settings import (ServerSettings, parse_llama_server_args,
                                                   parse_props)


def llama_server_settings(pairs: Mapping[str, str], props: Mapping[str, Any]) -> ServerSettings:
    """A llama-server's speed settings: session args, ``/props``, then the log."""
    settings = ServerSettings.from_pairs(pairs)
    if pairs.get("server_args"):
        settings = settings.merged(parse_llama_server_args(pairs["server_args"].split()))
    settings = settings.merged(parse_props(props))
    log_path = pairs.get("log_path")
    if log_path:
        settings = settings.merged(parse_llama_server_log(read_log(Path(log_path))))
    return settings
