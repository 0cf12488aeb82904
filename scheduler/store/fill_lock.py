"""Several schedulers fill one bucket's queue at once, and the watermark holds for all.

Each dispatch lane asks for room before each batch. Under the bucket's fill
lock (a PostgreSQL advisory lock keyed by the store's schema and the bucket,
held for a few milliseconds) it reads the queue's depth and counts every
batch in flight on that bucket, its own scheduler's and the others'; the
room is the cap (the high watermark) minus both. If there is room, the lane
marks its batch in flight (a second advisory lock, keyed by the bucket and
the lane) before the fill lock is released, and clears the mark once the
batch is confirmed and marked dispatched. A batch in flight counts as a whole
batch until it is cleared, also after its messages reached the queue, so a
reading is only ever too cautious. So the queue holds at most the high
watermark, whatever the number of schedulers, and their lanes overlap their
claims, publishes and confirms instead of taking turns for a whole fill.

Before (#13 to #17), the fill lock was held for a whole fill, and a scheduler
that found it taken skipped the bucket: several schedulers took turns on a
bucket and added nothing to its drain rate.

Both locks live on one connection per scheduler (session locks, released by
unlock or when the connection dies: a killed scheduler leaves no mark and no
lock behind). Its lanes share the connection and take turns through a thread
lock, since PostgreSQL's session locks do not exclude each other within one
session. SQLite has one writer anyway and needs neither.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from scheduler.store.base import StoreCore
from scheduler.store.connection import LOCK_TIMED_OUT, connect_raw, translated
from scheduler.store.text_queries import (
    FILL_LOCK,
    FILL_UNLOCK,
    IN_FLIGHT,
    LANE_SLOTS,
    MARK,
    SET_LOCK_TIMEOUT,
    UNMARK,
)

#: Namespaces of the lock keys (hashed with the schema and the bucket name).
LOCK_NAMESPACE = "recur.fill"
INFLIGHT_NAMESPACE = "recur.inflight"


class FillLocks:
    """Per-bucket fill locks and in-flight marks on one PostgreSQL connection
    (no-ops on SQLite)."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store
        self._conn: psycopg.Connection[Any] | None = None
        self._turn = threading.Lock()

    def reserve(self, bucket: str, lane: int, want: int, batch: int, cap: int,
                depth: Callable[[], int]) -> int:
        """Rows this lane may dispatch now (at most ``want``): ``cap`` minus the
        queue's ``depth()`` and every batch in flight on ``bucket`` (each counted as
        ``batch`` rows). Above 0, the lane's batch is marked in flight until
        :meth:`release`."""
        if self.store.dialect != "postgresql":
            return min(want, max(0, cap - depth()))
        keys = {"fill": f"{LOCK_NAMESPACE}:{bucket}", "mark": f"{INFLIGHT_NAMESPACE}:{bucket}",
                "lane": lane % LANE_SLOTS}
        with self._turn:
            if self._run(f"take the fill lock of bucket {bucket}", FILL_LOCK, keys) is None:
                return 0  # waited LOCK_TIMEOUT: dispatch nothing this pass
            try:
                in_flight = int(self._run(f"count the batches in flight on {bucket}",
                                          IN_FLIGHT, keys) or 0)
                room = min(want, cap - depth() - in_flight * batch)
                if room > 0:
                    self._run(f"mark a batch in flight on {bucket}", MARK, keys)
            finally:
                if self._conn is not None:  # else the lock went with the connection
                    self._run(f"release the fill lock of bucket {bucket}", FILL_UNLOCK, keys)
        return max(0, room)

    def release(self, bucket: str, lane: int) -> None:
        """Clear this lane's in-flight mark on ``bucket`` (its batch is done)."""
        if self.store.dialect != "postgresql":
            return
        with self._turn:
            self._run(f"clear a batch in flight on {bucket}", UNMARK,
                      {"mark": f"{INFLIGHT_NAMESPACE}:{bucket}", "lane": lane % LANE_SLOTS})

    def _run(self, what: str, sql: str, params: dict[str, Any]) -> Any:
        """The statement's one value; None if it waited LOCK_TIMEOUT for a lock."""
        with translated(f"due-jobs store {self.store.url}: cannot {what}",
                        on_outage=self.close):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect_raw(self.store.engine)
                    self._conn.execute(SET_LOCK_TIMEOUT)
                row = self._conn.execute(sql, params).fetchone()
            except LOCK_TIMED_OUT:
                return None
        return row[0] if row else None

    def close(self) -> None:
        """Drop the connection (and with it every lock and mark still held)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
