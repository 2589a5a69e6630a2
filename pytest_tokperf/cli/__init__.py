"""The ``tokperf`` command: the library's verbs without pytest.

``main`` (parser and dispatch; install-engine, make-model, predict), ``bench``
(llama-bench's job over HTTP), ``data`` (verbs over stored results).
"""

from pytest_tokperf.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
