"""Moving every job of a user, and cursors of another listing, on the store (SQLite and
PostgreSQL, no processes): what the Scheduled page's per-user actions and paging rely on."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from config.errors import InvalidArgument
from scheduler import jobs as api
from scheduler.store import DueStore, Job
from scheduler.store.control import CANCEL_BATCH, JobControl, JobFilter

NOW = datetime.now(UTC).replace(microsecond=0)


def job(key: str, user: str, due: datetime) -> Job:
    return Job(key, "tasks.process_message", "short", json.dumps([user, None]), due)


def test_a_users_scheduled_jobs_move_in_batches_and_dispatched_ones_stay(
        store: DueStore) -> None:
    ctl = JobControl(store)
    many = CANCEL_BATCH + 5  # more than one batch
    store.schedule([job(f"u-{i:05d}", "mover", NOW + timedelta(hours=1)) for i in range(many)]
                   + [job("other", "stayer", NOW + timedelta(minutes=90))], NOW)
    got: list[object] = []  # the earliest due row: one of the mover's
    store.dispatch("short", 1, NOW + timedelta(hours=2), NOW + timedelta(hours=3), got.extend)
    assert len(got) == 1
    to = NOW + timedelta(minutes=5)
    assert api.reschedule_user(ctl, "mover", to, NOW) == (many - 1, 1)
    page = api.list_jobs(ctl, JobFilter(user="mover", state="scheduled"), 1000)
    assert {(r.due_at, r.early_at) for r in page.jobs} == {(to, to)}
    other = ctl.get("other")
    assert other is not None and other.due_at == NOW + timedelta(minutes=90)
    assert api.reschedule_user(ctl, "nobody", to, NOW) == (0, 0)
    with pytest.raises(InvalidArgument, match="needs a user id"):
        api.reschedule_user(ctl, " ", to, NOW)


def test_a_cursor_of_another_listing_is_refused_by_name(store: DueStore) -> None:
    ctl = JobControl(store)
    store.schedule([job(f"k{i}", "u", NOW + timedelta(minutes=i)) for i in range(3)], NOW)
    by_key = api.list_jobs(ctl, JobFilter(), 1)
    by_due = api.list_jobs(ctl, JobFilter(bucket="short", state="scheduled"), 1)
    assert by_key.cursor and by_due.cursor
    with pytest.raises(InvalidArgument, match="bad cursor"):
        api.list_jobs(ctl, JobFilter(bucket="short", state="scheduled"), 1, by_key.cursor)
    second = api.list_jobs(ctl, JobFilter(bucket="short", state="scheduled"), 1,
                           by_due.cursor)
    assert [r.job_key for r in second.jobs] == ["k1"]


def test_text_the_store_cannot_hold_is_refused_by_name_and_nothing_changes(
        store: DueStore) -> None:
    """A lone surrogate (the Python API's or Flower's input: the command line refuses
    undecodable arguments itself) got the driver's UnicodeEncodeError, not a line."""
    ctl = JobControl(store)
    store.schedule([job("kept", "u", NOW + timedelta(hours=1))], NOW)
    bad = "k\ud800"
    calls = [lambda: api.show(ctl, bad), lambda: api.cancel(ctl, bad),
             lambda: api.reschedule(ctl, bad, NOW, NOW),
             lambda: api.cancel_user(ctl, bad), lambda: api.reschedule_user(ctl, bad, NOW, NOW),
             lambda: api.list_jobs(ctl, JobFilter(user=bad)),
             lambda: api.list_jobs(ctl, JobFilter(task=bad))]
    for call in calls:
        with pytest.raises(InvalidArgument, match="lone surrogate"):
            call()
    assert [r.job_key for r in api.list_jobs(ctl, JobFilter()).jobs] == ["kept"]
