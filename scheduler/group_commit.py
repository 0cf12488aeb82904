"""Group commit: the store writes of concurrent ``apply_async`` calls share one commit.

A durable commit waits for the database's WAL flush (milliseconds); one commit per
call capped a producer process at a few hundred calls a second whatever its
threads did. Here the calls of one process that arrive while a commit is in
flight are written together in the next transaction (leader/follower, no timer):
the first caller to find no commit in flight becomes the leader and commits
everything queued so far, its own row included; the others wait on that result,
and the first of those still queued when it ends leads the next commit. A lone
caller commits its one row at once, as before: nobody waits for company.

Every call returns only once its own row is committed, and raises its own error:
a batch the store refuses for what a row holds is written again row by row, so one
bad row fails only its call. An outage (the database or the connection failed,
store/connection.py ``rows_refused``) fails the whole batch at once (row by row would
only wait the same outage out once per row); the caller retries as it would any
failed ``apply_async`` (the write is an idempotent upsert). A batch is written in
job-key order, so two processes' batches that share keys cannot deadlock. A process
killed mid-commit loses only calls that had not returned.

The same leader/follower batching serves a threads-pool worker's per-run statements
(PostgreSQL, scheduler/store/settle_batch.py): the token check of the runs that start
together is one read, their token-checked reschedules one statement; each run still
gets its own answer (``peek_dispatch``, ``reschedule_job``). A store is a DueStore or
a worker's (scheduler/store/worker_store.py): any with the worker's calls.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Generic, TypeVar

from config.errors import StoreUnavailable
from config.settings import Settings
from scheduler.store.connection import rows_refused
from scheduler.store.records import Job
from scheduler.store.settle_batch import Peek, Reschedule, batched, peek_many, reschedule_many
from scheduler.store.worker_store import SettleStore

T = TypeVar("T")

#: Rows one commit takes at most; the rest wait for the next (bounds a leader's wait).
MAX_BATCH = 512


@dataclass(eq=False)
class _Call(Generic[T]):
    """One waiting call: its row, and what became of it."""

    item: T
    #: Held until the call is answered (done or failed) or made the next leader.
    gate: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    error: BaseException | None = None
    #: Made the next leader (set under the committer's lock).
    lead: bool = False

    def answer(self) -> None:
        """Return once written, or raise the row's error."""
        if self.error is not None:
            raise self.error
        assert self.done, "group commit: a call was woken without an answer"


class GroupCommit(Generic[T]):
    """Writes items submitted by many threads, a batch per transaction.

    ``write`` writes a batch in one durable transaction (all or nothing); it is
    called by one thread at a time (the leader), and for single rows when a batch
    failed with an error ``by_row`` says a row may have caused (else every call of
    the batch gets that error).
    """

    def __init__(self, write: Callable[[Sequence[T]], None],
                 by_row: Callable[[BaseException], bool] = lambda exc: True,
                 max_batch: int = MAX_BATCH) -> None:
        self._write = write
        self._by_row = by_row
        self._max = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Call[T]] = []
        self._busy = False  # a leader is committing (or about to)
        #: Transactions committed and rows written (the benchmark reads the batch sizes).
        self.commits = 0
        self.rows = 0

    @property
    def waiting(self) -> int:
        """Calls queued for the next commit."""
        return len(self._queue)

    @property
    def committing(self) -> bool:
        """Whether a leader holds the lead (a commit is in flight)."""
        return self._busy

    def submit(self, item: T) -> None:
        """Write ``item`` with whatever else is queued; return once it is durable."""
        call: _Call[T] = _Call(item)
        call.gate.acquire()
        with self._lock:
            self._queue.append(call)
            lead = not self._busy
            self._busy = True
        if not lead:
            try:
                call.gate.acquire()  # answered, or made the next leader
            except BaseException:  # interrupted (Ctrl-C): never leave the lead unheld
                self._abandon(call)
                raise
            if call.done or call.error is not None:
                return call.answer()
        self._lead()
        call.answer()

    def _abandon(self, call: _Call[T]) -> None:
        """A waiting call gave up: out of the queue, and the lead passed on if it had it
        (a call already taken into a batch is written or not without its caller)."""
        with self._lock:
            if call not in self._queue:
                return
            self._queue.remove(call)
            if not call.lead:
                return
            after = self._queue[0] if self._queue else None
            self._busy = after is not None
            if after is not None:
                after.lead = True
        if after is not None:
            after.gate.release()

    def _lead(self) -> None:
        """Commit the head of the queue (the leader's own call is in it), answer those
        calls, and hand the lead to the first call still queued."""
        with self._lock:
            batch = self._queue[:self._max]
            del self._queue[:self._max]
        try:
            self._commit(batch)
        except BaseException as exc:  # KeyboardInterrupt and the like: nobody hangs
            for call in batch:
                if not call.done and call.error is None:
                    call.error = exc
            raise
        finally:
            with self._lock:
                after = self._queue[0] if self._queue else None
                self._busy = after is not None
                if after is not None:
                    after.lead = True
            for call in batch[1:]:  # batch[0] is the leader itself
                call.gate.release()
            if after is not None:
                after.gate.release()  # it leads the next commit

    def _commit(self, batch: list[_Call[T]]) -> None:
        try:
            self._write([call.item for call in batch])
        except Exception as exc:
            if len(batch) > 1 and self._by_row(exc):
                self._one_by_one(batch)
            else:
                for call in batch:
                    call.error = exc
            return
        self._count(len(batch))
        for call in batch:
            call.done = True

    def _one_by_one(self, batch: list[_Call[T]]) -> None:
        """The batch was refused: each row in its own transaction, its own answer."""
        for call in batch:
            try:
                self._write([call.item])
            except Exception as exc:
                call.error = exc
            else:
                self._count(1)
                call.done = True

    def _count(self, rows: int) -> None:
        self.commits += 1
        self.rows += rows


_committers: weakref.WeakKeyDictionary[SettleStore, tuple[int, dict[str, GroupCommit[Any]]]] = (
    weakref.WeakKeyDictionary())
_committers_lock = threading.Lock()


def _committer(store: SettleStore, kind: str,
               make: Callable[[weakref.ref[SettleStore]], GroupCommit[Any]]) -> GroupCommit[Any]:
    """This process's committer of ``kind`` for ``store``, made on first use; a forked
    child makes its own (the parent's could have been mid-commit at the fork)."""
    pid = os.getpid()
    found = _committers.get(store)
    if found is None or found[0] != pid or kind not in found[1]:
        with _committers_lock:
            found = _committers.get(store)
            if found is None or found[0] != pid:
                found = _committers[store] = (pid, {})
            if kind not in found[1]:
                found[1][kind] = make(weakref.ref(store))
    return found[1][kind]


def committer(store: SettleStore) -> GroupCommit[Job]:
    """This process's committer of upserts for ``store``."""
    return _committer(store, "schedule",
                      lambda ref: GroupCommit(_writer(ref), rows_refused))


def _writer(ref: weakref.ref[SettleStore]) -> Callable[[Sequence[Job]], None]:
    """The batch write of the store ``ref`` names (weakly: a closed store goes away)."""
    def write(jobs: Sequence[Job]) -> None:
        store = ref()
        if store is None:
            raise StoreUnavailable("the due-jobs store was closed")
        store.schedule(sorted(jobs, key=attrgetter("job_key")), datetime.now(UTC))
    return write


def _batch(ref: weakref.ref[SettleStore], run: Callable[[SettleStore, Sequence[T]], None]
           ) -> Callable[[Sequence[T]], None]:
    def write(items: Sequence[T]) -> None:
        store = ref()
        if store is None:
            raise StoreUnavailable("the due-jobs store was closed")
        run(store, items)
    return write


def peek_dispatch(store: SettleStore, job_key: str, cfg: Settings
                  ) -> tuple[int, datetime | None] | None:
    """``DueStore.live_dispatch(job_key, wait=False)``; on PostgreSQL with
    RECUR_GROUP_COMMIT one read shared with this process's concurrent runs (an outage
    fails every run of the read: no row can cause it)."""
    if not (cfg.group_commit and batched(store)):
        return store.live_dispatch(job_key, wait=False)
    peek = Peek(job_key)
    _committer(store, "peek", lambda ref: GroupCommit(_batch(ref, peek_many),
                                                      lambda exc: False)).submit(peek)
    return peek.live


def reschedule_job(store: SettleStore, call: Reschedule, cfg: Settings) -> bool:
    """``DueStore.reschedule`` of ``call`` (token-checked; False: a stale copy); on
    PostgreSQL with RECUR_GROUP_COMMIT one statement shared with this process's
    concurrent reschedules (a batch refused for a row is written again row by row)."""
    if cfg.group_commit and batched(store):
        _committer(store, "reschedule", lambda ref: GroupCommit(
            _batch(ref, reschedule_many), rows_refused)).submit(call)
        return call.accepted
    return store.reschedule(call.job_key, call.token, call.due_at, call.now, args=call.args,
                            early_at=call.early_at)


def schedule_job(store: SettleStore, job: Job, cfg: Settings) -> None:
    """Upsert ``job`` durably (``DueStore.schedule``): in a commit shared with this
    process's other callers (RECUR_GROUP_COMMIT), or in one of its own."""
    if cfg.group_commit:
        committer(store).submit(job)
    else:
        store.schedule([job], datetime.now(UTC))
