"""The process's lock store and keeper, rebuilt after a fork, and the
publishing of handed-over jobs."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from celery.signals import worker_process_init

from config.errors import LockUnavailable
from config.settings import Settings, settings
from tasks.distlock import events
from tasks.distlock.keeper import LeaseKeeper
from tasks.distlock.store import Handover, LockStore
from tasks.distlock.tickets import ParkedJob, Ticket
from tasks.redis_conn import get_redis


@dataclass(frozen=True)
class Runtime:
    cfg: Settings
    store: LockStore
    keeper: LeaseKeeper
    pid: int


_current: Runtime | None = None


def runtime() -> Runtime:
    """This process's lock runtime (a forked child builds its own keeper thread)."""
    global _current
    if _current is None or _current.pid != os.getpid():
        cfg = settings()
        store = LockStore(get_redis(), cfg.key_prefix)
        _current = Runtime(cfg, store, LeaseKeeper(store, cfg, publish_handover), os.getpid())
    return _current


def publish_handover(user: str, handover: Handover) -> None:
    """Publish a parked job whose turn came, with the token reserving the lock for it."""
    from tasks.app import app

    job = ParkedJob.from_json(handover.job)
    ticket = Ticket(seq=handover.seq, epoch=handover.epoch, since=job.since,
                    handover=handover.token)
    try:
        app.send_task(job.task, args=job.args, kwargs=job.kwargs, task_id=job.id,
                      headers={**job.headers, **ticket.headers()})
    except Exception as exc:  # the reservation expires and the reaper tries again
        events.handover_failed(user, job.id, exc)
        return
    with contextlib.suppress(LockUnavailable):
        runtime().store.count("published")


def has_locked_tasks(app: Any) -> bool:
    """Whether ``app`` registers any task decorated with user_lock."""
    return any(lock_spec_of(task) is not None for task in app.tasks.values())


def lock_spec_of(task: Any) -> Any:
    """The LockSpec of a task object (None when it is not locked)."""
    return getattr(getattr(task, "run", None), "__user_lock__", None)


@worker_process_init.connect
def start_keeper_in_worker_child(**_: Any) -> None:
    """Every worker process reaps from the start, even before it runs a locked task."""
    from tasks.app import app

    if has_locked_tasks(app):
        runtime().keeper.start()
