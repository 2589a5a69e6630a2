"""The ``tokperf`` command: the library's verbs without pytest, parsers and handlers only.

``main`` (the parser and dispatch), one module per group of verbs: ``models``
(make-model, predict), ``builds`` (install-engine, compare-builds, bisect, watch),
``bench``, ``results`` (history, compare, changes, accept), ``files`` (plot, report,
export, import, merge, save-reference), ``llama_bench`` (import-llama-bench, outliers);
``common`` and ``output`` what they share.
"""

from pytest_tokperf.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
