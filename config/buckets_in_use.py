"""The bucket table in use: the process settings' (RECUR_BUCKETS_FILE, else built-in).

Kept apart from :mod:`config.buckets` (the types and the built-in table), which
the settings themselves need: this module needs both, and nothing below it needs it.
"""

from __future__ import annotations

from typing import Any

from config.buckets import BucketTable
from config.settings import settings


def bucket_table() -> BucketTable:
    """The table in use: the process settings' (RECUR_BUCKETS_FILE, else built-in)."""
    return settings().buckets


def __getattr__(name: str) -> Any:
    """``BUCKETS``, ``BUCKETS_BY_NAME``, ``BUCKETS_BY_QUEUE``: the configured table's,
    for code written before the table became configurable (prefer bucket_table())."""
    if name == "BUCKETS":
        return bucket_table().buckets
    if name == "BUCKETS_BY_NAME":
        return bucket_table().by_name
    if name == "BUCKETS_BY_QUEUE":
        return bucket_table().by_queue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
