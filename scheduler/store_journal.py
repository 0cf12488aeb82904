"""Settle writes a database crash may have lost, written again once it is back.

A worker's reschedule, finish and lease moves commit with ``synchronous_commit
off`` (scheduler/store.py ``_settle``): PostgreSQL acknowledges the commit
before its WAL is flushed, and flushes it within 3 × ``wal_writer_delay``
(0.6 s by default). A crash (not a clean stop, which flushes) loses what was
not flushed yet. The worker has acknowledged the message by then, so no copy
is left: the row would stay dispatched until its 30-minute lease ran out.

So each process keeps its settle writes of the last ``KEEP`` seconds. A
background thread asks the server once a second when it started
(``pg_postmaster_start_time``): the same server as before the writes means
they were flushed (it ran for ``KEEP`` seconds after them), and they are
forgotten; a restarted server means they may be lost, and every one kept is
written again. Each is token-checked, so one that did take effect finds its
row moved on and changes nothing. What is still lost: a settle whose process
was killed in the same crash (its row waits for the lease).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from config.errors import StoreError
from scheduler.metrics import SETTLES_REAPPLIED

log = logging.getLogger("recur.store")

#: Seconds a settle write is kept: well above 3 × wal_writer_delay (0.2 s by default;
#: a server with wal_writer_delay over 1 s needs a longer KEEP).
KEEP = 3.0
#: Seconds between two checks of the server's start time while writes are kept.
CHECK_EVERY = 1.0

#: Runs one statement: (what, statement, parameters) → (first row, rowcount).
Execute = Callable[[str, Any, dict[str, Any]], tuple[Any, int]]


@dataclass(frozen=True)
class Entry:
    """One settle write: when, and the statement to run again."""

    at: float
    what: str
    stmt: Any
    params: dict[str, Any]


class SettleJournal:
    """This process's recent settle writes against one PostgreSQL store."""

    def __init__(self, execute: Execute, server_started: Callable[[], Any]) -> None:
        self._execute = execute
        self._server_started = server_started
        self._server: Any = None
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def before_write(self) -> None:
        """Learn which server the writes go to (once): a restart is told by its change.
        Raises StoreUnavailable like any statement when the store is down."""
        if self._server is None:
            self._server = self._server_started()

    def record(self, what: str, stmt: Any, params: dict[str, Any]) -> None:
        """Keep a settle write that just committed."""
        with self._lock:
            self._entries.append(Entry(time.monotonic(), what, stmt, params))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="settle-journal",
                                                daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _watch(self) -> None:
        while not self._closed.wait(CHECK_EVERY):
            with self._lock:
                kept = list(self._entries)
            if not kept:
                continue
            try:
                server = self._server_started()
            except StoreError:
                continue  # down (or restarting): keep everything, ask again
            if server == self._server:
                self._forget(lambda e: e.at < time.monotonic() - KEEP)
            else:
                self._write_again(kept, server)

    def _forget(self, done: Callable[[Entry], bool]) -> None:
        with self._lock:
            while self._entries and done(self._entries[0]):
                self._entries.popleft()

    def _write_again(self, kept: list[Entry], server: Any) -> None:
        """Run every kept write again (token-checked: those that took effect do nothing)."""
        lost = 0
        for entry in kept:
            try:
                _, count = self._execute(entry.what, entry.stmt, entry.params)
            except StoreError:
                return  # down again: the next check starts over (re-runs change nothing)
            lost += count
        self._forget(lambda e: e.at <= kept[-1].at)
        self._server = server
        SETTLES_REAPPLIED.labels("yes").inc(lost)
        SETTLES_REAPPLIED.labels("no").inc(len(kept) - lost)
        log.warning("the database restarted: wrote this process's last %d settle writes "
                    "again; %d had been lost (their jobs would have waited for the lease)",
                    len(kept), lost)
