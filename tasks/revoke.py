"""Celery's revoke for jobs in the due-jobs store: both halves.

A stored job is not in any worker until the scheduler dispatches it, so a plain
Celery revoke (a broadcast to the workers) would not stop it. recur's app control
(:class:`RecurControl`, the app's ``control_cls``) deletes the row of every revoked
id the store holds *first*, stores ``REVOKED`` for it in the result backend (what a
Celery worker stores for a task it discards), then broadcasts as Celery does (a
running copy can still be terminated; ids that are not job keys are plain Celery
revokes). Every revoke through the app goes this way: ``AsyncResult.revoke()``,
``app.control.revoke``, ``celery -A tasks control revoke``, Flower's revoke button.
Every other cancel of a job by its key (``recur jobs cancel``, the Scheduled page's
cancel button) goes through :func:`cancel_job` too, and every cancel of a user's jobs
(``recur jobs cancel --user``, the page's per-user cancel) through :func:`cancel_user`,
so ``AsyncResult(key).state`` is REVOKED whichever way the job was cancelled.

A worker keeps revoked ids for hours, while a job key is reused (it is the message
id by default). So a scheduler-dispatched copy is never discarded for its task id
being revoked (:class:`StoreAwareRequest`): its row decides, and a revoked job's
row is gone, so its copy is dropped as stale at its token check; a job created
again under the key runs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from celery.app.control import Control
from celery.backends.base import DisabledBackend
from celery.worker import state as worker_state

from config.errors import StoreError, UnknownJob
from config.settings import settings
from scheduler.wire import DISPATCH_HEADER
from tasks.distlock.job import ParkAwareRequest
from tasks.stored_result import store_exists

if TYPE_CHECKING:  # SQLAlchemy's store: imported by a cancel, not by every worker
    from scheduler.store.control import JobControl, JobRow

log = logging.getLogger(__name__)

#: What a revoked stored job's REVOKED result says.
REASON = "revoked: its row was deleted from the due-jobs store"


class RecurControl(Control):  # type: ignore[misc]
    """Celery's remote control; ``revoke`` also cancels the revoked jobs in the store."""

    def broadcast(self, command: str, arguments: dict[str, Any] | None = None,
                  *args: Any, **kwargs: Any) -> Any:
        """Celery's broadcast; a ``revoke`` cancels the ids the store holds first. If the
        store cannot be reached the broadcast still goes, then the StoreError is raised
        (a stored job may still run)."""
        failed: StoreError | None = None
        if command == "revoke":
            try:
                cancel_stored(self.app, (arguments or {}).get("task_id"))
            except StoreError as exc:
                failed = exc
        replies = super().broadcast(command, arguments, *args, **kwargs)
        if failed is not None:
            raise failed
        return replies


def ids_of(task_ids: Any) -> list[str]:
    """A revoke's ``task_id`` argument (one id or several) as a list of ids."""
    if isinstance(task_ids, str):
        return [task_ids]
    if isinstance(task_ids, Iterable):
        return [str(one) for one in task_ids if isinstance(one, str) and one]
    return []


def cancel_stored(app: Any, task_ids: Any) -> list[JobRow]:
    """Cancel the ids that are job keys in the store (:func:`cancel_job`); the rows as
    they were (ids the store does not hold are left to Celery's broadcast)."""
    ids, url = ids_of(task_ids), settings().database_url
    if not ids or not store_exists(url):  # no store (an SQLite file never made): no jobs
        return []
    from scheduler.store import get_store
    from scheduler.store.control import JobControl

    ctl = JobControl(get_store(url))
    rows = []
    for key in ids:
        try:
            rows.append(cancel_job(app, ctl, key))
        except UnknownJob:
            continue
    return rows


def cancel_job(app: Any, ctl: JobControl, job_key: str) -> JobRow:
    """The one cancel of a job by its key: delete its row, then store REVOKED for it (as
    a revoke does), so ``AsyncResult(key)`` says REVOKED after any cancel. The row as it
    was; UnknownJob (nothing changed) when the store has no such job."""
    from scheduler import jobs as api

    row = api.cancel(ctl, job_key)
    log.info("job %s (%s, %s): cancelled, its row deleted from the due-jobs store",
             row.job_key, row.task, row.state)
    mark_revoked(app, row)
    return row


def cancel_user(app: Any, ctl: JobControl, user: str) -> Counter[str]:
    """The one cancel of every job of ``user``: their rows go a batch per transaction,
    then REVOKED is stored for each row of the batch (as :func:`cancel_job` does), with
    no transaction open. The count per state they were in. If the result backend
    fails, the rest are cancelled without REVOKED (logged once)."""
    unmarked: list[int] = []  # once the backend failed: the rows left without REVOKED

    def revoked(rows: list[JobRow]) -> None:
        for n, row in enumerate(rows):
            if unmarked:
                unmarked[0] += len(rows) - n
                return
            if not mark_revoked(app, row):
                unmarked.append(1)

    from scheduler import jobs as api

    counts = api.cancel_user(ctl, user, revoked)
    log.info("user %s: %d job(s) cancelled, their rows deleted from the due-jobs store",
             user, sum(counts.values()))
    if unmarked:
        log.warning("user %s: REVOKED not stored for %d cancelled job(s) (the result "
                    "backend failed)", user, unmarked[0])
    return counts


def mark_revoked(app: Any, row: JobRow) -> bool:
    """Store REVOKED for a revoked job, as a worker that discards a revoked task does
    (unless its task keeps nothing). Best effort: the row is already gone. False when
    the result backend failed."""
    task = app.tasks.get(row.task)
    backend = task.backend if task is not None else app.backend
    if isinstance(backend, DisabledBackend):
        return True
    if task is not None and task.ignore_result and not task.store_errors_even_if_ignored:
        return True
    try:
        backend.mark_as_revoked(row.job_key, REASON)
    except Exception as exc:  # the result backend's error: the job is cancelled anyway
        log.warning("job %s: revoked, but REVOKED could not be stored (%s)", row.job_key, exc)
        return False
    return True


class StoreAwareRequest(ParkAwareRequest):
    """The worker's request of a message task: a scheduler-dispatched copy is not
    discarded because its task id (its job key) was revoked; its row decides."""

    def revoked(self) -> bool:
        if (not self._already_revoked and not self.expires
                and self.id in worker_state.revoked
                and self.request_dict.get(DISPATCH_HEADER) is not None):
            return False
        return bool(super().revoked())
