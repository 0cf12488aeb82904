"""A bucket file's default rate limits (config/bucket_rates.py) on every job of a message
task, without a decorator.

``MessageTask.__call__`` asks :func:`deferral` before each run, where ``@rate_limit``
would be: a task's own ``@rate_limit`` wins (nothing here applies to it), then its
``[tasks."<name>"]`` default, then its message's bucket's. A limited job goes through
``@rate_limit``'s own :class:`~tasks.flow.rate_limit.LimitedCall`, so it has its
guarantees: starts per key within rate + burst in any window over every worker, a job
over its limit back in the due-jobs store for its slot (no worker slot held, no spin,
no delivery spent), order kept per key. The default sits outside a task's ``@user_lock``
(as ``@rate_limit`` stacked over it): a job the lock parks has spent its slot and asks
again when it runs, never over the limit.

A task class with ``rate_limit_defaults = False`` (the resequencer's processing: its
destination's rate is what limits it, and a deferral would run into its gap timeout)
is never limited here.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from celery.signals import worker_ready

from config.bucket_rates import RateDefault
from config.buckets import BucketTable
from config.buckets_in_use import bucket_table
from config.errors import RecurError
from config.settings import settings
from routing.messages import resolve_bucket
from tasks.flow.rate_limit import LimitedCall, RateSpec

log = logging.getLogger("recur.flow")


def deferral(task: Any, args: Any, kwargs: Any) -> str | None:
    """None when the job may run now (no default applies, or its slot is now); else what
    its deferred delivery returns (the job is back in the store for its slot)."""
    if not limited_somewhere() or not getattr(task, "rate_limit_defaults", True):
        return None
    if getattr(task.run, "__rate_limit__", None) is not None:
        return None  # its own @rate_limit wins
    message = args[0] if args else (kwargs or {}).get("message")
    if not isinstance(message, dict):
        return None  # not a message: the task's own check says so
    try:
        bucket = resolve_bucket(message, settings())
    except RecurError:
        return None  # an invalid message fails in the task, as without a limit
    spec = spec_for(task.name, bucket)
    return None if spec is None else LimitedCall(spec, task, args, kwargs).deferred()


@cache
def limited_somewhere() -> bool:
    """Whether the bucket file gives any default rate (else a job costs one call here)."""
    table = bucket_table()
    return bool(table.task_rates) or any(b.rate is not None for b in table.buckets)


@cache
def spec_for(task_name: str, bucket: str) -> RateSpec | None:
    """The default limit of ``task_name``'s jobs in ``bucket`` in the table in use."""
    found = default_for(bucket_table(), task_name, bucket)
    return None if found is None else RateSpec(found.key_of, found.rate)


def default_for(table: BucketTable, task_name: str, bucket: str) -> RateDefault | None:
    """The task's own default, else its bucket's, else None."""
    found = table.task_rates.get(task_name)
    if found is None and bucket in table.by_name:
        found = table.by_name[bucket].rate
    return found



@worker_ready.connect
def check_task_rates(sender: Any = None, **_: Any) -> None:
    """Say once, at a worker's start, which ``[tasks."<name>"]`` rate applies to nothing
    here: a name no task of this worker has (misspelt?), or a task whose own
    ``@rate_limit`` wins."""
    registered = getattr(getattr(sender, "app", None), "tasks", None)
    table = bucket_table()
    if registered is None or not table.task_rates:
        return
    for name in sorted(table.task_rates):
        task = registered.get(name)
        if task is None:
            log.warning("bucket file %s: [tasks.%s] names no task this worker has; its "
                        "rate_limit applies to nothing here", table.source, name)
        elif getattr(task.run, "__rate_limit__", None) is not None:
            log.warning("bucket file %s: [tasks.%s] is not used: the task's own @rate_limit "
                        "wins", table.source, name)
        elif not getattr(task, "rate_limit_defaults", True):
            log.warning("bucket file %s: [tasks.%s] is not used: this task takes no default "
                        "rate (a resequencer destination's rate= limits its sends)",
                        table.source, name)
