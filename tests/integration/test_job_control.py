"""Job control and the pull-forward floor, on the store (SQLite and PostgreSQL, no processes).

The floor each write gives a row, the idle claim that honours it, and the
operator's list/show/cancel/reschedule/pause through ``scheduler.jobs``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import InvalidArgument, InvalidMessage, JobInFlight, UnknownJob
from config.settings import settings
from scheduler import jobs as api
from scheduler.calls import ScheduledJob
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.control import WALK, JobControl, JobFilter
from scheduler.store.schema import NO_FLOOR
from tasks.process import process_message
from tests.support import services

NOW = datetime.now(UTC).replace(microsecond=0)


def message(ident: str, user: str = "u-1", bucket: str = "short",
            payload: Any = None) -> dict[str, Any]:
    return {"id": ident, "user_id": user, "bucket": bucket, "payload": payload}


def job(ident: str, due: datetime, user: str = "u-1", bucket: str = "short",
        early: datetime | None = None) -> Job:
    return Job(ident, "tasks.process_message", bucket,
               json.dumps([user, None]), due, early)


@pytest.fixture
def ctl(store: DueStore) -> JobControl:
    return JobControl(store)


def claim(store: DueStore, bucket: str, now: datetime, *, early: bool) -> list[Claimed]:
    got: list[Claimed] = []
    store.dispatch(bucket, 100, now, now + timedelta(minutes=30), got.extend, early=early)
    return got


# -- the floor ---------------------------------------------------------------------


def test_a_first_run_has_no_floor_and_not_before_opts_out(store_in_use: DueStore) -> None:
    ctl = JobControl(store_in_use)
    process_message.apply_async((message("in-an-hour"),), countdown=3600)
    process_message.apply_async((message("exactly"),), countdown=3600, not_before=True)
    free, exact = ctl.get("in-an-hour"), ctl.get("exactly")
    assert free is not None and exact is not None
    assert free.early_at == NO_FLOOR and exact.early_at == exact.due_at
    # Idle pull-forward takes the first now, the opted-out one only at its time.
    assert [c.job_key for c in claim(store_in_use, "short", datetime.now(UTC), early=True)
            ] == ["in-an-hour"]
    assert claim(store_in_use, "short", exact.due_at - timedelta(seconds=1), early=True) == []
    assert [c.job_key for c in claim(store_in_use, "short", exact.due_at, early=True)
            ] == ["exactly"]
    with pytest.raises(Exception, match="not_before"):
        process_message.apply_async((message("x"),), countdown=60, not_before="yes")


def test_a_producers_write_never_lowers_a_floor(store: DueStore, ctl: JobControl) -> None:
    floor = NOW + timedelta(minutes=30)
    store.schedule([job("k", NOW + timedelta(hours=1), early=floor)], NOW)
    store.schedule([job("k", NOW + timedelta(hours=2))], NOW)  # re-sent, no floor of its own
    row = ctl.get("k")
    assert row is not None and (row.due_at, row.early_at) == (NOW + timedelta(hours=2), floor)


def test_the_idle_claim_takes_rows_whose_floor_passed_never_before(store: DueStore) -> None:
    store.schedule([job("seeded-late", NOW + timedelta(hours=2)),
                    job("seeded-soon", NOW + timedelta(hours=1)),
                    job("floored", NOW + timedelta(minutes=10), early=NOW + timedelta(minutes=5)),
                    job("ripe", NOW + timedelta(hours=3), early=NOW - timedelta(seconds=1))],
                   NOW)
    got = [c.job_key for c in claim(store, "short", NOW, early=True)]
    # Never-run rows first (earliest due first), then rows by when their floor passed.
    assert got == ["seeded-soon", "seeded-late", "ripe"]
    assert [c.job_key for c in claim(store, "short", NOW + timedelta(minutes=5),
                                     early=True)] == ["floored"]


def test_a_run_reschedules_with_its_floor(store: DueStore) -> None:
    from scheduler.pullforward import pull_floor

    cfg = settings()
    store.schedule([job("r", NOW + timedelta(seconds=60))], NOW)
    (row,) = claim(store, "short", NOW, early=True)  # pulled forward: due at +60, ran at 0
    due = NOW + timedelta(seconds=60)
    floor = pull_floor(NOW, due, cfg, ran_due=row.due_at)
    assert floor == NOW + timedelta(seconds=60)  # never twice before its natural due time
    assert store.reschedule("r", row.token, due, NOW, early_at=floor)
    assert claim(store, "short", NOW + timedelta(seconds=59), early=True) == []
    assert [c.job_key for c in claim(store, "short", due, early=True)] == ["r"]


# -- schedules checked at publish ------------------------------------------------------


@pytest.mark.parametrize(("payload", "field"), [
    ({"every": "x"}, "payload.every"), ({"every": -1}, "payload.every"),
    ({"every": True}, "payload.every"), ({"every": 1e300}, "payload.every"),
    ({"every": 60, "runs": "3"}, "payload.runs"), ({"every": 60, "runs": 0}, "payload.runs"),
    ({"runs": 3}, "payload.every")])
def test_a_malformed_schedule_is_refused_at_apply_async(
        store_in_use: DueStore, payload: dict[str, Any], field: str) -> None:
    for delay in (0, 3600):
        with pytest.raises(InvalidMessage) as err:
            process_message.apply_async((message("bad", payload=payload),), countdown=delay)
        assert err.value.field == field
    assert JobControl(store_in_use).get("bad") is None


# -- show, list ----------------------------------------------------------------------


def page_all(ctl: JobControl, f: JobFilter, limit: int) -> list[str]:
    keys: list[str] = []
    after = None
    for _ in range(1000):
        page = api.list_jobs(ctl, f, limit, after)
        assert page.walked <= max(WALK, limit)
        keys += [j.job_key for j in page.jobs]
        if page.cursor is None:
            return keys
        after = page.cursor
    raise AssertionError("paging did not end")


def test_list_pages_every_filter_exactly_once(store: DueStore, ctl: JobControl) -> None:
    jobs = [job(f"k{i:03}", NOW + timedelta(minutes=i % 7), user=f"u-{i % 3}",
                bucket=("short", "long")[i % 2]) for i in range(60)]
    store.schedule(jobs, NOW)
    store.schedule([Job("other-task", "tests.other", "short", json.dumps(["u-0", None]), NOW)],
                   NOW)
    claim(store, "long", NOW + timedelta(minutes=2), early=False)  # some long ones dispatched
    rows = {j.job_key: j for j in jobs}
    dispatched = {k for k, j in rows.items() if j.bucket == "long"
                  and j.due_at <= NOW + timedelta(minutes=2)}
    cases: list[tuple[JobFilter, set[str]]] = [
        (JobFilter(), {*rows, "other-task"}),
        (JobFilter(user="u-1"), {k for k, j in rows.items() if j.args.startswith('["u-1"')}),
        (JobFilter(bucket="short", state="scheduled"),
         {"other-task", *(k for k, j in rows.items() if j.bucket == "short")}),
        (JobFilter(bucket="long", state="scheduled",
                   due_after=NOW + timedelta(minutes=3), due_before=NOW + timedelta(minutes=5)),
         {k for k, j in rows.items() if j.bucket == "long" and k not in dispatched
          and NOW + timedelta(minutes=3) <= j.due_at < NOW + timedelta(minutes=5)}),
        (JobFilter(state="dispatched"), dispatched),
        (JobFilter(task="tests.other"), {"other-task"}),
        (JobFilter(task="no.such.task"), set()),
        (JobFilter(user="u-0", bucket="long"),
         {k for k, j in rows.items() if j.args.startswith('["u-0"') and j.bucket == "long"}),
    ]
    for f, want in cases:
        for limit in (1, 7, 100):
            got = page_all(ctl, f, limit)
            assert sorted(got) == sorted(want), (f, limit)
    assert api.list_jobs(ctl, JobFilter(user="u-1"), 5).index == "ix_due_jobs_user"
    assert api.list_jobs(ctl, JobFilter(bucket="short", state="scheduled"), 5
                         ).index == "ix_due_jobs_scheduled"


def test_show_a_job_and_refuse_bad_input(store: DueStore, ctl: JobControl) -> None:
    store.schedule([job("s1", NOW + timedelta(hours=1))], NOW)
    row = api.show(ctl, "s1")
    assert (row.state, row.bucket, row.task, row.due_at, row.early_at, row.runs) == (
        "scheduled", "short", "tasks.process_message", NOW + timedelta(hours=1), NO_FLOOR, 0)
    with pytest.raises(UnknownJob):
        api.show(ctl, "nope")
    for f in (JobFilter(bucket="tiny"), JobFilter(state="running"),
              JobFilter(due_before=NOW, due_after=NOW)):
        with pytest.raises(InvalidArgument):
            api.list_jobs(ctl, f)
    with pytest.raises(InvalidArgument):
        api.list_jobs(ctl, JobFilter(), after="not a cursor!")


# -- cancel, reschedule, pause ---------------------------------------------------------


def test_cancel_a_scheduled_and_a_dispatched_job(store: DueStore, ctl: JobControl) -> None:
    store.schedule([job("sched", NOW + timedelta(hours=1)), job("disp", NOW)], NOW)
    (copy,) = claim(store, "short", NOW, early=False)
    assert copy.job_key == "disp"
    assert api.cancel(ctl, "sched").state == "scheduled"
    assert api.cancel(ctl, "disp").state == "dispatched"
    # The copy in flight: its reschedule and its finish find no row; nothing comes back.
    assert not store.reschedule("disp", copy.token, NOW + timedelta(minutes=1), NOW)
    assert not store.finish("disp", copy.token)
    assert store.live_dispatch("disp") is None
    assert ctl.get("sched") is None and ctl.get("disp") is None
    assert claim(store, "short", NOW + timedelta(days=1), early=True) == []
    with pytest.raises(UnknownJob):
        api.cancel(ctl, "sched")


def test_cancel_every_job_of_a_user(store: DueStore, ctl: JobControl, celery_app: Any) -> None:
    """Batch by batch (more than one), each job's REVOKED stored as a cancel by key does."""
    from tasks.revoke import cancel_user
    from tests.support.result_tasks import answer

    run = uuid.uuid4().hex[:8]
    mine = [Job(f"mine-{run}-{i}", answer.name, "short", json.dumps(["victim", None]),
                NOW + timedelta(minutes=i)) for i in range(2500)]
    store.schedule([*mine, job(f"theirs-{run}", NOW, user="someone-else")], NOW)
    claim(store, "short", NOW + timedelta(minutes=1), early=False)  # two of mine dispatched
    counts = cancel_user(celery_app, ctl, "victim")
    assert counts == {"scheduled": 2498, "dispatched": 2}
    assert page_all(ctl, JobFilter(), 1000) == [f"theirs-{run}"]
    assert {celery_app.AsyncResult(j.job_key).state for j in mine} == {"REVOKED"}
    assert celery_app.AsyncResult(f"theirs-{run}").state == "PENDING"
    assert api.cancel_user(ctl, "victim") == {}


def test_reschedule_moves_a_scheduled_job_only(store: DueStore, ctl: JobControl) -> None:
    store.schedule([job("later", NOW + timedelta(hours=5)), job("running", NOW)], NOW)
    claim(store, "short", NOW, early=False)
    at = NOW + timedelta(minutes=10)
    row = api.reschedule(ctl, "later", at, NOW)
    assert (row.due_at, row.early_at) == (at, at)  # an operator's time is not pulled forward
    assert claim(store, "short", at - timedelta(seconds=1), early=True) == []
    with pytest.raises(JobInFlight):
        api.reschedule(ctl, "running", at, NOW)
    with pytest.raises(UnknownJob):
        api.reschedule(ctl, "nope", at, NOW)
    assert api.show(ctl, "running").state == "dispatched"


def test_pause_and_resume_are_stored(ctl: JobControl) -> None:
    assert api.pause(ctl, "long") and not api.pause(ctl, "long")
    assert set(ctl.paused()) == {"long"}
    with pytest.raises(InvalidArgument):
        api.pause(ctl, "tiny")
    assert api.resume(ctl, "long") and not api.resume(ctl, "long")
    assert ctl.paused() == {}


def recur(url: str, *argv: str) -> Any:
    """Run ``recur *argv`` in this process (click's runner) on the store at ``url``."""
    from click.testing import CliRunner

    from tasks.cli import cli

    return CliRunner().invoke(cli, list(argv), env={"RECUR_DATABASE_URL": url})


@pytest.mark.parametrize(("argv", "words"), [
    (["jobs", "show", "nope"], "no job 'nope'"),
    (["jobs", "reschedule", "nope", "--in", "ten minutes"], "bad duration"),
    (["jobs", "reschedule", "nope", "--in", "-5m"], "bad duration"),
    (["jobs", "reschedule", "nope", "--at", "2030-01-01T10:00:00"], "is naive"),
    (["jobs", "reschedule", "nope", "--at", "tomorrow"], "bad time"),
    (["jobs", "cancel"], "give a job KEY or --user"),
    (["jobs", "list", "--state", "running"], "unknown state"),
    (["bucket", "pause", "tiny"], "unknown bucket"),
])
def test_commands_refuse_bad_input(
        sqlite_url: str, use_store: Callable[[str], None], argv: list[str], words: str) -> None:
    use_store(sqlite_url)
    result = recur(sqlite_url, *argv)
    assert isinstance(result.exception, InvalidArgument) and words in str(result.exception)


def test_a_refused_command_prints_one_line_and_exits_2(sqlite_url: str) -> None:
    env = {**os.environ, **services.test_environment(), "RECUR_DATABASE_URL": sqlite_url}
    done = subprocess.run([sys.executable, "-m", "tasks.cli", "jobs", "reschedule", "k", "--at",
                           "2030-01-01T10:00:00"], capture_output=True, text=True, env=env,
                          cwd=services.ROOT, timeout=120)
    assert done.returncode == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("recur: time '2030-01-01T10:00:00' is naive")


def test_commands_show_list_cancel_reschedule_pause(
        sqlite_url: str, use_store: Callable[[str], None]) -> None:
    use_store(sqlite_url)
    store = DueStore.open(sqlite_url)
    store.schedule([job("a", NOW + timedelta(hours=1)), job("b", NOW + timedelta(hours=2))], NOW)
    claim(store, "short", NOW + timedelta(hours=3), early=False)
    store.schedule([job("c", NOW + timedelta(hours=1))], NOW)
    store.close()

    def out(*argv: str) -> str:
        result = recur(sqlite_url, *argv)
        assert result.exit_code == 0, (argv, result.output, result.exception)
        return str(result.output)

    assert json.loads(out("jobs", "show", "a", "--json"))["message"]["user_id"] == "u-1"
    assert "lease until" in out("jobs", "show", "a")
    first = out("jobs", "list", "--limit", "1").splitlines()
    assert first[0].startswith("a ") and "--after" in first[-1]
    cursor = first[-1].split("--after ")[1]
    assert out("jobs", "list", "--limit", "1", "--after", cursor).startswith("b ")
    assert "it will not run" in out("jobs", "cancel", "c")
    assert "its reschedule will be dropped" in out("jobs", "cancel", "a")
    assert "dispatched" in out("jobs", "cancel", "--user", "u-1")
    assert "paused" in out("bucket", "pause", "medium")
    assert "resumed" in out("bucket", "resume", "medium")


def test_scheduled_job_is_what_apply_async_returns(store_in_use: DueStore) -> None:
    result = process_message.apply_async((message("ret"),), countdown=120)
    assert isinstance(result, ScheduledJob)
