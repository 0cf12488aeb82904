"""What ``apply_async`` returns for a call that went to the due-jobs store: a Celery
``AsyncResult`` whose id is the job key, so Celery code runs on it unchanged.

The scheduler publishes every run of a stored job with the job key as its task id
(scheduler/task_message.py), so the result backend holds the job's latest run under
the key. A stored job is one Celery task that is not over while it has a row:

- ``state``: ``SCHEDULED``, ``DISPATCHED`` (leased: queued or running) or
  ``SET_ASIDE`` while the job has a row; once the row is gone (finished, cancelled,
  dead), the result backend's state of its last run (``PENDING`` when nothing was
  stored: results ignored, expired, or a cancel that was not a revoke).
- ``get()``: waits until the job has left the store, then returns (or raises) its
  last run's result. A recurring job is over when it stops recurring;
  ``result``/``info`` read its latest finished run meanwhile.
- ``revoke()``: through ``app.control.revoke`` (tasks/revoke.py), which deletes the
  row, stores REVOKED and still broadcasts to the workers.

``app.AsyncResult(key)`` builds the same class (tasks/app.py), so a result rebuilt
from a saved id reads the store too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery import states
from celery.backends.base import E_NO_BACKEND, DisabledBackend
from celery.result import AsyncResult, assert_will_not_block

from config.errors import StoreError
from config.settings import settings
from scheduler.calls import ScheduledJob
from scheduler.store.connection import is_sqlite

log = logging.getLogger(__name__)

#: The store's states as Celery states (a row's state names: scheduler/store/control.py).
STORE_STATES = {"scheduled": "SCHEDULED", "dispatched": "DISPATCHED",
                "set-aside": "SET_ASIDE"}
#: Longest pause (seconds) between two looks at the store while ``get()`` waits for a
#: job that is still scheduled (a dispatched one is looked at every ``interval``).
MAX_POLL = 5.0
#: Seconds ``get()`` gives a job that left the store to replace a result its earlier
#: attempt stored (a failed run retried, a parked or deferred delivery) with its last.
SETTLE_GRACE = 2.0


class StoredResult(AsyncResult):  # type: ignore[misc]
    """A Celery ``AsyncResult`` for a job in the due-jobs store (``id`` is its key)."""

    def __init__(self, id: str, backend: Any = None, task_name: Any = None,
                 app: Any = None, parent: Any = None, *, due_at: datetime | None = None,
                 accepted: bool = True, stored: bool | None = None) -> None:
        super().__init__(id, backend, task_name, app, parent)
        #: When the call is due (None: not known, a result built from an id).
        self.due_at = due_at
        #: False when a stale copy tried to reschedule its job (nothing was changed).
        self.accepted = accepted
        #: True: apply_async wrote a row; False: published to the broker (plain
        #: Celery); None: built from an id (the store is asked).
        self.stored = stored

    @property
    def job_key(self) -> str:
        return str(self.id)

    def store_state(self) -> str | None:
        """The job's state in the store while it has a row; None once it has none."""
        url = settings().database_url
        if self.stored is False or (self.stored is None and not store_exists(url)):
            return None
        from scheduler.store import get_store  # SQLAlchemy: not in a worker until asked
        from scheduler.store.control import JobControl

        try:
            row = JobControl(get_store(url)).get(self.job_key)
        except StoreError as exc:
            if self.stored:
                raise
            unreadable(exc)  # a result built from an id: answer as plain Celery does
            return None
        return None if row is None else STORE_STATES.get(row.state, row.state.upper())

    @property
    def state(self) -> str:
        """The store's state while the job has a row, else its last run's (Celery's)."""
        where = self.store_state()
        if where is not None:
            return where
        if isinstance(self.backend, DisabledBackend):
            raise NotImplementedError(E_NO_BACKEND.strip())
        return str(self._get_task_meta()["status"])

    status = state

    def _get_task_meta(self) -> Any:
        # A stored job's meta is its latest run's until get() saw the job over: read
        # it fresh (Celery caches a ready meta for good, and may cache a SUCCESS).
        if self.stored is False or self._cache is not None:
            return super()._get_task_meta()
        return self.backend.get_task_meta(self.id, cache=False)

    def get(self, timeout: float | None = None, propagate: bool = True,
            interval: float = 0.5, no_ack: bool = True, follow_parents: bool = True,
            callback: Callable[..., Any] | None = None, on_message: Any = None,
            on_interval: Callable[[], Any] | None = None,
            disable_sync_subtasks: bool = True, **kwargs: Any) -> Any:
        """Celery's ``get``: wait (up to ``timeout`` seconds) until the job has left the
        store and its last run's result is stored; return it, or raise its exception.

        A task that ignores its results answers None at once (as in Celery); without
        a result backend this raises Celery's NotImplementedError."""
        plain = dict(timeout=timeout, propagate=propagate, interval=interval, no_ack=no_ack,
                     follow_parents=follow_parents, callback=callback,
                     on_message=on_message, on_interval=on_interval,
                     disable_sync_subtasks=disable_sync_subtasks, **kwargs)
        if self.stored is False or self.ignored:
            return super().get(**plain)
        if isinstance(self.backend, DisabledBackend):
            raise NotImplementedError(E_NO_BACKEND.strip())
        if disable_sync_subtasks:
            assert_will_not_block()
        if self.stored is None and self._cache is None and self.store_state() is None:
            return super().get(**plain)  # not (or no longer) a stored job: Celery's wait
        self._set_cache(self._last_meta(timeout, interval, on_interval))
        if propagate:
            self.maybe_throw(callback=callback)
        elif callback is not None:
            callback(self.id, self.result)
        return self.result

    wait = get

    def _last_meta(self, timeout: float | None, interval: float,
                   on_interval: Callable[[], Any] | None) -> Any:
        """The job's last run's meta, once the job has left the store."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause, seen, gone_at = max(interval, 0.01), None, None
        while True:
            where = self.store_state()
            meta = self.backend.get_task_meta(self.id, cache=False)
            mark = (meta.get("status"), str(meta.get("date_done")))
            now = time.monotonic()
            if where is not None:  # still in the store: what is stored is an earlier run's
                seen, gone_at = mark, None
                pause = min(pause * 1.5, MAX_POLL) if where == "SCHEDULED" else interval
            elif meta.get("status") in states.READY_STATES:
                gone_at = gone_at or now
                if mark != seen or now - gone_at >= SETTLE_GRACE:
                    return meta
                pause = interval
            if on_interval is not None:
                on_interval()
            if deadline is not None and now >= deadline:
                raise self.TimeoutError("The operation timed out.")
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - now)))


ScheduledJob.register(StoredResult)

_warned: list[str] = []


def unreadable(exc: StoreError) -> None:
    """Say once per process that results built from an id answer without the store."""
    if not _warned:
        _warned.append(str(exc))
        log.warning("the due-jobs store cannot be read (%s): AsyncResult(id) answers from "
                    "the result backend only, as plain Celery does", exc)


def store_exists(url: str) -> bool:
    """False for an SQLite store whose file does not exist (reading it would create an
    empty one): a process with no store answers for ids as plain Celery."""
    if not is_sqlite(url):
        return True
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    path = parsed.database or ""
    return path in ("", ":memory:") or os.path.exists(path)


def stored_result(task: Any, written: ScheduledJob) -> StoredResult:
    """The AsyncResult ``apply_async`` returns for a call ``written`` to the store."""
    result = StoredResult(written.job_key, backend=task.backend, app=task._get_app(),
                          due_at=written.due_at, accepted=written.accepted, stored=True)
    # A stored run follows the task's own setting (a per-call ignore_result is not kept).
    result.ignored = bool(task.ignore_result)
    return result


def forget_last_run(task: Any) -> None:
    """Before a dispatched run's result is stored: forget its job's previous run's. A
    successful run is stored once per task id (Celery keeps a SUCCESS for good, so a
    lost copy cannot overwrite it); a stored job's runs share one id, the job key."""
    forget_stored(task, str(task.request.id), "its previous run's result")


def forget_previous(task: Any, job_key: str) -> None:
    """Before a new job is written under ``job_key``: forget what an earlier job of that
    key stored, so the new call does not answer with the old job's result."""
    forget_stored(task, job_key, "the result an earlier job of this key stored")


def keeps_results(task: Any) -> bool:
    """Whether a key's stored result must be forgotten before a new one: the task keeps
    its results (one that ignores them stores no SUCCESS, which Celery never
    overwrites, and its later error or REVOKED replaces an earlier one)."""
    return not task.ignore_result and not isinstance(task.backend, DisabledBackend)


def forget_stored(task: Any, job_key: str, what: str) -> None:
    """Forget ``job_key``'s stored result when ``task`` keeps its results. Best effort:
    a result backend that is down only costs a warning."""
    if not keeps_results(task):
        return
    try:
        task.backend.forget(job_key)
    except Exception as exc:  # the result backend's error: the call or run still goes
        log.warning("job %s: cannot forget %s (%s)", job_key, what, exc)
