"""What a user reads: every table, document, plot and page.

``tables`` (the one table writer and its escapers), ``table`` (the terminal summary;
light), ``report_data`` (the one reader of a results DB for reports), ``formats``
(markdown, the JSON documents, JUnit properties), ``plots`` (matplotlib), ``html`` (one
self-contained page), ``files`` (what a session writes at its end, exports), and what the
verbs print: ``history``, ``verdicts``, ``builds``, ``watch``, ``llama_bench``, ``live``
(progress). Only ``table`` is imported here, so the plugin stays light.
"""

from pytest_tokperf.report.table import Row, summary_table

__all__ = ["Row", "summary_table"]
