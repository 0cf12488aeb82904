"""The due-jobs store: the only home of recur's SQL.

Every statement is named once (``queries.py``); PostgreSQL and SQLite are opened,
and their driver errors translated, in one place (``connection.py``); only the
store's modules send statements. ``DueStore`` (``core.py``) is the narrow
interface the scheduler and the workers use; operators' statements, the
dead-letter sweep's, set-aside rows', the seed's bulk path, the fill locks, the
schema and its migrations each have a module of their own here.
"""

from scheduler.store.base import task_codes
from scheduler.store.core import DueStore, close_stores, get_store
from scheduler.store.queries import CLAIM_EARLY, RECORD_SET_ASIDE
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

__all__ = ["CLAIM_EARLY", "DEAD_LETTERED", "MAX_REASON", "RECORD_SET_ASIDE", "RECOVERED",
           "BucketHead", "BucketStats", "Claimed", "DueStore", "Job", "close_stores",
           "get_store", "refused_rows", "task_codes"]
