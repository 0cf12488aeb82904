"""Beat-style entries in the store: kept equal to the configuration, and each period's
due job written once, however many schedulers run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from config.errors import InvalidMessage, InvalidSchedule
from config.first_seen import FirstSeen
from scheduler.periodic import PeriodicEntry, next_run
from scheduler.store.base import StoreCore, task_codes
from scheduler.store.queries import (
    drop_periodic,
    due_periodic,
    fire_periodic,
    next_periodic,
    upsert_periodic,
)
from scheduler.wire import decode_call

log = logging.getLogger("recur.scheduler")


def sync_periodic(store: StoreCore, entries: Sequence[PeriodicEntry], now: datetime) -> None:
    """Make the stored entries exactly ``entries``; a new or changed schedule
    starts from ``now``, an unchanged one keeps its next run."""
    names = [e.name for e in entries]
    with store.transaction("store periodic entries") as conn:
        conn.execute(drop_periodic(names))
        if not entries:
            return
        conn.execute(upsert_periodic(store.dialect),
                     [{"name": e.name, "task": e.task, "bucket": e.bucket,
                       "args": e.args, "schedule": e.schedule,
                       "next_run_at": next_run(e.schedule, now)} for e in entries])


def fire_due_entries(store: StoreCore, now: datetime) -> list[str]:
    """Write one due job for every entry whose time came; returns their names.

    The job key names the period, so a period fires once even if two
    schedulers got here (the entry row is locked, the job insert is idempotent).
    A row this version cannot use (one another writer or version left: a schedule
    or call it cannot read) is reported once and left as it is; the others fire.
    """
    with store.transaction("fire periodic entries") as conn:
        usable = []
        for entry in conn.execute(due_periodic(now)):
            try:
                following = next_run(entry.schedule, max(now, entry.next_run_at))
                decode_call(entry.args)
            except (InvalidSchedule, InvalidMessage) as exc:
                _report_once(entry.name, entry.schedule, entry.args, exc)
                continue
            usable.append((entry, following))
        # Registered in this transaction: codes it adds are not cached.
        codes = task_codes(conn, {entry.task for entry, _ in usable})
        for entry, following in usable:
            key = f"periodic:{entry.name}:{entry.next_run_at.isoformat()}"
            conn.execute(fire_periodic(store.dialect),
                         {"job_key": key, "task_id": codes[entry.task], "bucket": entry.bucket,
                          "args": entry.args, "due_at": entry.next_run_at,
                          "early_at": entry.next_run_at,  # a beat entry runs at its time
                          "created_at": now, "updated_at": now})
            conn.execute(next_periodic(entry.name, following, entry.next_run_at))
    return [entry.name for entry, _ in usable]


#: Unusable rows already reported (name, schedule, args): once each, not every pass.
_reported = FirstSeen()


def _report_once(name: str, schedule: str, args: str, exc: Exception) -> None:
    if _reported.first((name, schedule, args)):
        log.warning("periodic entry %.80r in the store is skipped (not fired, left as it "
                    "is): %s", name, exc)
