"""Where ``recur status`` reads the store: on PostgreSQL (bounded readings) psycopg
alone (scheduler/store/status_reader.py: no SQLAlchemy, ~0.4 s of the command's
wall); on SQLite, or with ``--exact`` (a scan of the table), a ``DueStore``. Both
give the same values (the logic is scheduler/store/status_readings.py's)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from scheduler.store.connection import is_sqlite
from scheduler.store.status_readings import FairState, Histogram, Readings


class StatusSource(Protocol):
    """The store's part of ``recur status``."""

    def stats(self, buckets: Sequence[str], now: datetime) -> Readings: ...

    def histogram(self, buckets: Sequence[str], now: datetime, minutes: int) -> Histogram: ...

    def paused(self) -> dict[str, datetime]: ...

    def fair_state(self, bucket: str, now: datetime, head_cap: int, cap: int
                   ) -> FairState: ...

    def close(self) -> None: ...


class DueStoreSource:
    """A ``DueStore``'s readings: exact ones (one scan) with ``exact``, else bounded
    (exact anyway on SQLite)."""

    def __init__(self, url: str, exact: bool) -> None:
        from scheduler.store import DueStore

        self.store = DueStore.open(url)
        self.exact = exact

    def stats(self, buckets: Sequence[str], now: datetime) -> Readings:
        from scheduler.store.estimates import bounded_stats

        if self.exact:
            return Readings(self.store.stats(now), exact=True)
        return bounded_stats(self.store, buckets, now)

    def histogram(self, buckets: Sequence[str], now: datetime, minutes: int) -> Histogram:
        from scheduler.store.due_histogram import due_histogram
        from scheduler.store.estimates import bounded_histogram

        if self.exact:
            return Histogram(due_histogram(self.store, buckets, now, minutes))
        return bounded_histogram(self.store, buckets, now, minutes)

    def paused(self) -> dict[str, datetime]:
        from scheduler.store.control import JobControl

        return JobControl(self.store).paused()

    def fair_state(self, bucket: str, now: datetime, head_cap: int, cap: int) -> FairState:
        from scheduler.store.fair import FairRows

        return FairRows(self.store).state(bucket, now, head_cap, cap)

    def close(self) -> None:
        self.store.close()


def open_source(url: str, exact: bool) -> StatusSource:
    """The store at ``url`` as ``recur status`` reads it (its schema checked)."""
    if is_sqlite(url) or exact:
        return DueStoreSource(url, exact)
    from scheduler.store.status_reader import StatusReader

    return StatusReader.open(url)
