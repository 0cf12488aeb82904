"""Counters another writer left at their column's top (token and runs INTEGER, attempts
SMALLINT) never overflow a dispatch or a reschedule: on PostgreSQL one such row made
the whole claim batch fail after its messages were published (every row of the bucket,
every pass), and a run's reschedule fail. The token wraps to 1; attempts and runs stay
at the top. On SQLite and PostgreSQL; the worker's batched reschedule too."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.store import Claimed, DueStore, Job
from scheduler.store.settle_batch import Reschedule, batched, reschedule_many

pytestmark = pytest.mark.services

TASK = "tasks.process_message"
INT_MAX, SMALLINT_MAX = 2**31 - 1, 2**15 - 1
#: key -> the columns written by hand next to the good rows.
AT_THE_TOP = {"token-top": {"token": INT_MAX}, "attempts-top": {"attempts": SMALLINT_MAX},
              "runs-top": {"runs": INT_MAX}, "runs-top-2": {"runs": INT_MAX}}


def rows(store: DueStore) -> dict[str, tuple[int, int, int, int]]:
    with store.engine.connect() as conn:
        return {k: (s, t, a, r) for k, s, t, a, r in conn.exec_driver_sql(
            "SELECT job_key, state, token, attempts, runs FROM due_jobs")}


def test_counters_at_their_top_neither_overflow_nor_stop_the_batch(store_url: str) -> None:
    store = DueStore.open(store_url)
    now = datetime.now(UTC)
    keys = ["good-1", *AT_THE_TOP, "good-2"]
    store.schedule([Job(k, TASK, "short", json.dumps([f"user-{k}", {"n": 1}]),
                        now - timedelta(seconds=1)) for k in keys], now)
    with store.engine.begin() as conn:
        for key, columns in AT_THE_TOP.items():
            sets = ", ".join(f"{name} = {value}" for name, value in columns.items())
            conn.exec_driver_sql(f"UPDATE due_jobs SET {sets} WHERE job_key = '{key}'")
    sent: list[Claimed] = []

    def publish(claimed: list[Claimed]) -> Any:
        sent.extend(claimed)
        return None  # every one confirmed

    lease = now + timedelta(minutes=30)
    assert store.dispatch("short", 100, now, lease, publish) == len(keys)
    tokens = {c.job_key: c.token for c in sent}
    assert tokens == {k: 1 for k in keys}  # the message's token is the row's (wrapped)
    found = rows(store)
    assert {k: found[k][:2] for k in keys} == {k: (1, 1) for k in keys}
    assert found["attempts-top"][2] == SMALLINT_MAX
    # A run reschedules its job: one row alone, then two at once (PostgreSQL's batch).
    later = now + timedelta(hours=1)
    assert store.reschedule("runs-top", 1, later, now)
    calls = [Reschedule(k, 1, later, now) for k in ("good-1", "runs-top-2")]
    if batched(store):
        reschedule_many(store, calls)
    else:
        for call in calls:
            call.accepted = store.reschedule(call.job_key, call.token, later, now)
    assert all(call.accepted for call in calls)
    found = rows(store)
    assert {k: (found[k][0], found[k][3]) for k in ("runs-top", "runs-top-2", "good-1")} == {
        "runs-top": (0, INT_MAX), "runs-top-2": (0, INT_MAX), "good-1": (0, 1)}
    store.close()


def test_a_time_sqlite_holds_as_garbage_text_reads_as_overdue(sqlite_url: str) -> None:
    """SQLite keeps any text another writer puts in a time column: one due row (or periodic
    entry) whose time is not a time failed every claim of its bucket (and every firing).
    It reads as the epoch: overdue, so it runs, and its dispatch writes a real time."""
    from sqlalchemy import text

    from scheduler.periodic import PeriodicEntry
    from scheduler.store.periodic_entries import fire_due_entries, sync_periodic
    from scheduler.store.schema import UNREADABLE_TIME

    store = DueStore.open(sqlite_url)
    now = datetime.now(UTC)
    store.schedule([Job(f"g{i}", TASK, "short", json.dumps(["u", None]),
                        now - timedelta(seconds=5)) for i in range(3)], now)
    sync_periodic(store, [PeriodicEntry("tick", TASK, "short", json.dumps(["u", None]),
                                        "every 60")], now)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE due_jobs SET due_at = '1999-garbage' WHERE job_key = 'g1'"))
        conn.execute(text("UPDATE periodic_entries SET next_run_at = '1999-garbage'"))
    got: list[Claimed] = []
    assert store.dispatch("short", 10, now + timedelta(minutes=30), now, got.extend) == 3
    assert {c.job_key: c.due_at for c in got}["g1"] == UNREADABLE_TIME
    assert fire_due_entries(store, now) == ["tick"]
    assert fire_due_entries(store, now) == []  # its next run is a real time again
    store.close()
