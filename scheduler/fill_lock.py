"""One scheduler at a time tops up a bucket's queue, so the watermark holds for all.

Each scheduler reads a queue's depth and fills the room up to the high
watermark. Two schedulers reading the same depth at once would each fill the
same room: with N schedulers the queue reached N times the watermark. A
PostgreSQL advisory lock per bucket (``pg_try_advisory_lock``, keyed by the
store's schema and the bucket) is held from reading the depth until the last
batch is confirmed; a scheduler that finds it taken skips the bucket for this
pass (the holder is filling it). So the depth stays within the high watermark
plus what one reading can be stale by, whatever the number of schedulers.

The lock lives on its own connection (a session lock, released by unlock or
when the connection dies: a killed scheduler never leaves it held). SQLite
has one writer anyway and needs no lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from config.errors import StoreUnavailable
from scheduler.store import DueStore

#: Namespace of the lock keys (hashed with the schema and the bucket name).
LOCK_NAMESPACE = "recur.fill"


class FillLocks:
    """Per-bucket fill locks on one PostgreSQL connection (no-ops on SQLite)."""

    def __init__(self, store: DueStore) -> None:
        self.store = store
        self._conn: psycopg.Connection[Any] | None = None

    @contextmanager
    def hold(self, bucket: str) -> Iterator[bool]:
        """Yields whether this scheduler holds ``bucket``'s fill lock (False: another
        scheduler is filling it now)."""
        if self.store.dialect != "postgresql":
            yield True
            return
        key = f"{LOCK_NAMESPACE}:{bucket}"
        got = self._run("take the fill lock of bucket " + bucket,
                        "SELECT pg_try_advisory_lock(hashtext(current_schema() || ':' || %s))",
                        key)
        if not got:
            yield False
            return
        try:
            yield True
        finally:
            self._run("release the fill lock of bucket " + bucket,
                      "SELECT pg_advisory_unlock(hashtext(current_schema() || ':' || %s))", key)

    def _run(self, what: str, sql: str, key: str) -> bool:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self.store.raw_connection()
            row = self._conn.execute(sql, (key,)).fetchone()
        except psycopg.Error as exc:
            self.close()
            raise StoreUnavailable(f"due-jobs store {self.store.url}: cannot {what}: "
                                   f"{exc}") from exc
        return bool(row and row[0])

    def close(self) -> None:
        """Drop the connection (and with it any lock still held)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
