"""The results store: every measurement with its environment, in one SQLite file.

``store`` (``ResultStore``: open, migrate, record, read back), ``schema`` (tables,
views, migrations), ``rows`` (value types <-> rows, the series key), ``exchange``
(export, import, merge, reference runs as text). sqlite-utils only; no pytest.
"""

from pytest_tokperf.storage.store import (
    BUSY_TIMEOUT_S,
    DB_ENV_VAR,
    Acceptance,
    GateVerdict,
    HistoryRow,
    ResultStore,
    Stored,
    StoredResult,
    StoredRun,
)

__all__ = ["BUSY_TIMEOUT_S", "DB_ENV_VAR", "Acceptance", "GateVerdict", "HistoryRow",
           "ResultStore", "Stored", "StoredResult", "StoredRun"]
