"""What a producer's stored call does with each Celery option: kept, harmless, or refused.

A call that goes to the due-jobs store is not published now: the scheduler publishes
its run later as recur's own message (scheduler/task_message.py): JSON, uncompressed,
persistent, mandatory, to its bucket's queue on ``recur.tasks``, its job key as task id
and correlation id, recur's headers only, with its bucket's limits. An option that would
change that message is refused with one line naming it (``InvalidSchedule``) rather than
lost; one that changes nothing there, or only this call's publish now, is harmless.
``task_id`` is kept: it names the stored job (scheduler/calls.py). A task's retry and a
run's reschedule of its own job are not checked here: Celery fills them from the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from config.errors import InvalidSchedule
from routing.queues import TASK_EXCHANGE

#: Celery options a stored call cannot keep: the scheduler publishes it later with its
#: bucket's limits. A producer's call that sets one is refused rather than run without it
#: (a task's retry, which Celery fills from its request, keeps the bucket's).
NOT_STORED = ("time_limit", "soft_time_limit", "expires", "priority")

#: Options the store path reads itself (scheduler/calls.py): the delay, the retry count,
#: the task id (the job key) and the callbacks (refused there).
READ = frozenset({"countdown", "eta", "retries", "task_id", "link", "link_error"})

#: Options about this call's publish now (the store write stands in for it), or ids
#: Celery's canvas fills in for its bookkeeping (a group's id and index, the root and
#: parent, the producer thread's ``reply_to``): the stored run lacks nothing a worker,
#: the result backend or recur's AsyncResult reads. ``mandatory``: the run is published
#: mandatory (a run no queue takes is set aside, never dropped).
HARMLESS = frozenset({
    "producer", "publisher", "connection", "retry", "retry_policy", "timeout",
    "confirm_timeout", "add_to_parent", "root_id", "parent_id", "group_id", "group_index",
    "origin", "replaced_task_nesting", "reply_to", "mandatory",
})

#: Why the stored run cannot carry an option.
PUBLISHED_AS = {
    "routes": "its run is published to its bucket's queue {queue}",
    "json": "its run is published as JSON (utf-8)",
    "compression": "its run is published uncompressed",
    "delivery_mode": "its run is published persistent (delivery_mode 2)",
    "headers": "its run carries recur's headers only",
    "ignore_result": "its run follows the task's ignore_result ({ignores})",
    "correlation_id": "its run's correlation id is its job key",
    "canvas": "its run carries no chain or chord, so the rest would never run",
    "shadow": "its run is named by its task",
    "other": "its run is published without it",
}

Harmless = Callable[[Any, "StoredRun"], bool]


class StoredRun:
    """What the stored run's message will be, to compare an option's value with."""

    def __init__(self, task: str, queue: str, job_key: str, ignores_result: bool | None):
        self.task, self.queue, self.job_key = task, queue, job_key
        self.ignores_result = ignores_result


def _name(value: Any) -> Any:
    return getattr(value, "name", value)  # a kombu Queue or Exchange: its name


#: Options whose value is harmless when it names what the stored run does anyway; any
#: other value is refused for the reason named.
CHECKED: dict[str, tuple[str, Harmless]] = {
    "queue": ("routes", lambda v, run: _name(v) == run.queue),
    "routing_key": ("routes", lambda v, run: v == run.queue),
    "exchange": ("routes", lambda v, run: _name(v) in ("", TASK_EXCHANGE.name)),
    "exchange_type": ("routes", lambda v, run: v in ("direct", TASK_EXCHANGE.type)),
    "declare": ("routes", lambda v, run: not v),
    "serializer": ("json", lambda v, run: v == "json"),
    "content_type": ("json", lambda v, run: v == "application/json"),
    "content_encoding": ("json", lambda v, run: str(v).lower() in ("utf-8", "utf8")),
    "compression": ("compression", lambda v, run: not v),
    "delivery_mode": ("delivery_mode", lambda v, run: v in (2, "persistent")),
    "headers": ("headers", lambda v, run: not v),
    "stamped_headers": ("headers", lambda v, run: not v),
    "ignore_result": ("ignore_result",
                      lambda v, run: run.ignores_result is not None
                      and bool(v) == run.ignores_result),
    "correlation_id": ("correlation_id", lambda v, run: v == run.job_key),
    "chain": ("canvas", lambda v, run: not v),
    "chord": ("canvas", lambda v, run: not v),
    "shadow": ("shadow", lambda v, run: v == run.task),
    "immediate": ("other", lambda v, run: not v),
}


def check_stored_options(options: Mapping[str, Any], run: StoredRun, threshold: float) -> None:
    """Refuse the first option of a producer's stored call that its run would not carry
    (``InvalidSchedule``, one line naming it and why); None values are not given."""
    for name, value in options.items():
        if value is None or name in READ or name in HARMLESS:
            continue
        if name in NOT_STORED:
            why = "it runs with its bucket's"
        else:
            reason, harmless = CHECKED.get(name, ("other", _never))
            if harmless(value, run):
                continue
            why = (PUBLISHED_AS[reason].format(queue=run.queue, ignores=run.ignores_result)
                   + f" (got {value!r:.60})")
        raise InvalidSchedule(f"{name} is not kept by a call that goes to the due-jobs store "
                              f"(delay >= {threshold}s or a job key): {why}")


def kept_by_any_run(options: Mapping[str, Any]) -> bool:
    """Whether :func:`check_stored_options` passes ``options`` whatever the run (each one
    None, read by the store path or harmless): then no call needs them checked again."""
    return all(value is None or name in READ or name in HARMLESS
               for name, value in options.items())


def _never(value: Any, run: StoredRun) -> bool:
    return False
