"""The pull-forward floor: how early an idle bucket may run a job.

Idle workers run the work that is next due, but a job is never run again
sooner than a floor after its last run: the work is I/O against other
people's services, and a message that recurs every ten minutes must not run
every second because its bucket is idle. When a run reschedules its job at
``asked_at`` for ``due_at``, the floor is

    max(asked_at, due time of the run) + max(min seconds, fraction × delay)

capped at ``due_at`` (``RECUR_PULL_FORWARD_FRACTION``, default 0.5, and
``RECUR_PULL_FORWARD_MIN_SECONDS``, default 1). Counting from the run's own
due time when it ran early means a job never runs twice before its natural
due time, and one recurring message on an idle system runs about once per
interval (every 60 s: at 0, 30, 90, 120, 180 s...), not hundreds of times.

A job that has not run yet (a producer's ``apply_async(countdown=3600)``, a
seeded row) has no floor: it is the backlog idle workers exist for, and runs
early when its bucket is idle. ``not_before=True`` opts a call out (floor =
due time): "in an hour" then means not before.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from config.settings import Settings


def pull_floor(asked_at: datetime, due_at: datetime, cfg: Settings, *,
               ran_due: datetime | None = None, not_before: bool = False) -> datetime:
    """The earliest time the idle pull-forward may dispatch this job (at most ``due_at``).

    ``ran_due`` is the due time of the run that asks for the next one (None
    when unknown: a message dispatched by an older scheduler).
    """
    if not_before:
        return due_at
    start = asked_at if ran_due is None else max(asked_at, ran_due)
    delay = max((due_at - asked_at).total_seconds(), 0.0)
    gap = max(cfg.pull_forward_min_seconds, cfg.pull_forward_fraction * delay)
    try:
        return min(start + timedelta(seconds=gap), due_at)
    except OverflowError:  # a run due near year 9999 (a row another writer put there)
        return due_at
