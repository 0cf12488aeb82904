"""The due-jobs store: the only home of recur's SQL.

Every statement is named once (``queries.py``); PostgreSQL and SQLite are opened,
and their driver errors translated, in one place (``connection.py``); only the
store's modules send statements. ``DueStore`` (``core.py``) is the narrow
interface the scheduler and the workers use; operators' statements, the
dead-letter sweep's, set-aside rows', the seed's bulk path, the fill locks, the
schema and its migrations each have a module of their own here.

Importing this package loads no SQLAlchemy: a worker on PostgreSQL settles its rows
without it (``worker_store.py``), so ``DueStore``, ``get_store`` and the statements
are imported on first use.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

from scheduler.store.records import (
    DEAD_LETTERED,
    MAX_REASON,
    RECOVERED,
    BucketHead,
    BucketStats,
    Claimed,
    Job,
    refused_rows,
)

if TYPE_CHECKING:
    from scheduler.store.base import task_codes
    from scheduler.store.core import DueStore, get_store
    from scheduler.store.queries import CLAIM_EARLY, RECORD_SET_ASIDE

#: Names imported on first use, and the module each comes from.
_LAZY = {"DueStore": "core", "get_store": "core", "task_codes": "base",
         "CLAIM_EARLY": "queries", "RECORD_SET_ASIDE": "queries"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def close_stores() -> None:
    """Close every store this process opened (``get_store``'s and the worker's)."""
    from scheduler.store.worker_store import close_worker_stores

    close_worker_stores()
    core = sys.modules.get(f"{__name__}.core")
    if core is not None:
        core.close_stores()


__all__ = ["CLAIM_EARLY", "DEAD_LETTERED", "MAX_REASON", "RECORD_SET_ASIDE", "RECOVERED",
           "BucketHead", "BucketStats", "Claimed", "DueStore", "Job", "close_stores",
           "get_store", "refused_rows", "task_codes"]
