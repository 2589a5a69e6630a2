"""The results store: every measurement with its environment, in one SQLite file or one
PostgreSQL database a fleet of runners shares.

``store`` (``ResultStore``: open, migrate, record, read back), ``backend`` (the one
interface both databases implement: ``sqlite_backend`` through sqlite-utils, the default,
and ``postgres`` through psycopg 3), ``location`` (a DB path or ``postgresql://`` URL,
its password never shown), ``records`` (the values it returns), ``schema`` (tables,
views, migrations), ``env_hash`` (an environment's identity), ``rows`` (value types <->
rows, the series key), ``history`` (the one store -> points function), ``exchange``
(export, import, merge, reference runs as text), ``journal`` (each result on disk the
moment it is measured). No pytest. The names below load their modules when first used,
so importing ``storage.location`` (the settings do) loads no database library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_tokperf.storage.records import (
        Acceptance as Acceptance,
        GateVerdict as GateVerdict,
        HistoryRow as HistoryRow,
        Stored as Stored,
        StoredResult as StoredResult,
        StoredRun as StoredRun,
    )
    from pytest_tokperf.storage.store import (
        BUSY_TIMEOUT_S as BUSY_TIMEOUT_S,
        DB_ENV_VAR as DB_ENV_VAR,
        ResultStore as ResultStore,
    )

_LAZY = {
    **dict.fromkeys(("Acceptance", "GateVerdict", "HistoryRow", "Stored", "StoredResult",
                     "StoredRun"), "pytest_tokperf.storage.records"),
    **dict.fromkeys(("BUSY_TIMEOUT_S", "DB_ENV_VAR", "ResultStore"),
                    "pytest_tokperf.storage.store"),
}

__all__ = ["BUSY_TIMEOUT_S", "DB_ENV_VAR", "Acceptance", "GateVerdict", "HistoryRow",
           "ResultStore", "Stored", "StoredResult", "StoredRun"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
