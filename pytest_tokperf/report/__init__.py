"""What a user reads: the terminal table, markdown/JSON/JUnit, plots and HTML.

``table`` (the terminal summary; light), ``data`` (the one reader of a results DB for
reports), ``formats`` (markdown, JSON, JUnit properties), ``plots`` (matplotlib),
``html`` (one self-contained page), ``files`` (what a session writes at its end).
Only ``table`` is imported here, so the plugin stays light.
"""

from pytest_tokperf.report.table import Row, summary_table

__all__ = ["Row", "summary_table"]
