"""Settle writes a database crash may have lost, written again once it is back.

A worker's reschedule, finish and lease moves commit with ``synchronous_commit
off`` (scheduler/store/base.py ``_settle``): PostgreSQL acknowledges the commit
before its WAL is flushed, and flushes it within 3 × ``wal_writer_delay``
(0.6 s by default). A crash (not a clean stop, which flushes) loses what was
not flushed yet: a restart, and also a crash *without* one, when one backend
dies (an OOM kill, ``kill -9``) and the postmaster resets shared memory and
replays the WAL. The worker has acknowledged the message by then, so no copy
is left: the row would stay dispatched until its 30-minute lease ran out.

So each process keeps its settle writes of the last ``KEEP`` seconds. A
background thread reads the server's *identity* once a second (the store's
``server identity``: when the postmaster started, when the statistics were
last reset, which crash recovery does, and how many of this process's
connections broke). An unchanged identity means the server ran ``KEEP``
seconds after the writes without a crash, so they were flushed, and they are
forgotten; any change (a restart, a crash-restart cycle, any broken
connection) means they may be lost, and every one kept is written again. Each
is token-checked, so one that did take effect finds its row moved on and
changes nothing: a change that was not a crash costs a few no-op writes.

The thread outlives any error (logged at WARNING with what it does next), and
``record`` starts it again should it ever be gone. At most ``MAX_ENTRIES``
writes are kept: past that the oldest are let go unchecked (counted in
``recur_settles_unguarded_total``, logged): if a crash lost one of those, its
row waits for its lease, as it would without the journal. What is still lost:
a settle whose process was killed in the same crash (its row waits for the
lease).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from config.errors import StoreUnavailable

log = logging.getLogger("recur.store")

#: Seconds a settle write is kept: well above 3 × wal_writer_delay (0.2 s by default;
#: a server with wal_writer_delay over 1 s needs a longer KEEP).
KEEP = 3.0
#: Seconds between two checks of the server's identity while writes are kept.
CHECK_EVERY = 1.0
#: Writes kept at most (a few seconds of a busy threads-pool worker is thousands):
#: bounded memory even if the checks keep failing while writes succeed.
MAX_ENTRIES = 50_000

#: Runs one statement: (what, statement, parameters) → (first row, rowcount).
Execute = Callable[[str, Any, dict[str, Any]], tuple[Any, int]]


def counters() -> Any:
    """scheduler.metrics (its counters), imported when a count is due: a process that only
    reads the store (``recur status``) never loads it (its counters are lazy too:
    config/lazy_metrics.py)."""
    from scheduler import metrics

    return metrics


@dataclass(frozen=True)
class Entry:
    """One settle write: when, and the statement to run again."""

    at: float
    what: str
    stmt: Any
    params: dict[str, Any]


class SettleJournal:
    """This process's recent settle writes against one PostgreSQL store.

    ``identify`` reads the server's identity (StoreUnavailable when it is down):
    any value that changes when the server may have lost unflushed commits.
    """

    def __init__(self, execute: Execute, identify: Callable[[], Any]) -> None:
        self._execute = execute
        self._identify = identify
        self._server: Any = None
        self._entries: deque[Entry] = deque()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._full = False

    def before_write(self) -> None:
        """Learn which server the writes go to (once): a crash is told by its change.
        Raises StoreUnavailable like any statement when the store is down."""
        if self._server is None:
            self._server = self._identify()

    def record(self, what: str, stmt: Any, params: dict[str, Any]) -> None:
        """Keep a settle write that just committed."""
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.popleft()
                self._let_go_unchecked()
            self._entries.append(Entry(time.monotonic(), what, stmt, params))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._watch, name="settle-journal",
                                                daemon=True)
                self._thread.start()

    def _let_go_unchecked(self) -> None:
        """The journal is full: the oldest write goes unchecked (once logged per episode)."""
        counters().SETTLES_UNGUARDED.inc()
        if not self._full:
            self._full = True
            log.warning("settle journal: %d settle writes kept and the server's identity not "
                        "confirmed; letting the oldest go unchecked (a crash that lost one "
                        "leaves its job to its lease) until a check succeeds", MAX_ENTRIES)

    def close(self) -> None:
        self._closed.set()

    def size(self) -> int:
        """Settle writes kept now (for status and tests)."""
        with self._lock:
            return len(self._entries)

    def _watch(self) -> None:
        while not self._closed.wait(CHECK_EVERY):
            try:
                self.check()
            except Exception as exc:  # the watcher must outlive any one failure
                log.warning("settle journal: checking the database failed: %r; keeping its "
                            "%d settle writes and checking again in %gs",
                            exc, self.size(), CHECK_EVERY)

    def check(self) -> None:
        """One look at the server: let go what it surely flushed, or write all again."""
        with self._lock:
            kept = list(self._entries)
        if not kept:
            return
        try:
            server = self._identify()
        except StoreUnavailable:
            return  # down (or recovering): keep everything, ask again
        if server == self._server:
            self._forget(lambda e: e.at < time.monotonic() - KEEP)
            self._full = False
        else:
            self._write_again(kept, server)

    def _forget(self, done: Callable[[Entry], bool]) -> None:
        with self._lock:
            while self._entries and done(self._entries[0]):
                self._entries.popleft()

    def _write_again(self, kept: list[Entry], server: Any) -> None:
        """Run every kept write again (token-checked: those that took effect do nothing).
        A write that fails for itself (not an outage) is logged and let go: one bad
        write must not hold the others back."""
        lost = failed = 0
        for entry in kept:
            try:
                _, count = self._execute(entry.what, entry.stmt, entry.params)
            except StoreUnavailable:
                return  # down again: the next check starts over (re-runs change nothing)
            except Exception as exc:  # this write's own failure (StoreError or a bug)
                failed += 1
                log.warning("settle journal: writing %s again failed: %s; letting it go "
                            "(its job waits for its lease if the crash lost it)",
                            entry.what, exc)
                continue
            lost += count
        self._forget(lambda e: e.at <= kept[-1].at)
        self._server, self._full = server, False
        reapplied = counters().SETTLES_REAPPLIED
        reapplied.labels("yes").inc(lost)
        reapplied.labels("no").inc(len(kept) - lost - failed)
        log.warning("the database restarted, recovered from a crash or a connection to it "
                    "broke: wrote this process's last %d settle writes again; %d had been "
                    "lost (their jobs would have waited for the lease)", len(kept), lost)
