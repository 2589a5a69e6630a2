"""The results store: every measurement with its environment, in one SQLite file.

``store`` (``ResultStore``: open, migrate, record, read back), ``records`` (the values
it returns), ``schema`` (tables, views, migrations), ``identity`` (an environment's
hash), ``rows`` (value types <-> rows, the series key), ``history`` (the one store ->
points function), ``exchange`` (export, import, merge, reference runs as text),
``journal`` (each result on disk the moment it is measured), ``llama_bench`` and
``llama_bench_import`` (llama-bench's own output as results), ``band_rows`` (stored
rows as the efficiency model's observations). sqlite-utils only; no
pytest.
"""

from pytest_tokperf.storage.records import (
    Acceptance,
    GateVerdict,
    HistoryRow,
    Stored,
    StoredResult,
    StoredRun,
)
from pytest_tokperf.storage.store import BUSY_TIMEOUT_S, DB_ENV_VAR, ResultStore

__all__ = ["BUSY_TIMEOUT_S", "DB_ENV_VAR", "Acceptance", "GateVerdict", "HistoryRow",
           "ResultStore", "Stored", "StoredResult", "StoredRun"]
