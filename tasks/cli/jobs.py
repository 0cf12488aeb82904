"""``recur jobs …`` and ``recur bucket pause|resume``: job control from the command line.

Thin over :mod:`scheduler.jobs`: parse, call, print. Bad input ends with one
``recur: …`` line and exit code 2 (config/entry.py's ``main``), nothing changed.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

import click

from config.errors import InvalidArgument, InvalidMessage
from config.settings import settings
from config.text import visible
from scheduler.wire import decode_call
from tasks.cli.group import cli

if TYPE_CHECKING:
    from scheduler.store.control import JobRow


def jobs_api() -> ModuleType:
    """scheduler.jobs, imported when a command runs (it loads the database drivers)."""
    from scheduler import jobs as api

    return api


def revoke() -> ModuleType:
    """tasks.revoke: the one cancel by key or user (deletes the rows, stores REVOKED)."""
    from tasks import revoke as cancelling

    return cancelling


def celery_app() -> Any:
    """The Celery app whose result backend a cancel stores REVOKED in."""
    from tasks.app import app

    return app


#: Characters of a job key, user id, bucket or task name a text line shows, and of a job's
#: message (``recur jobs show``): a 100 kB key written into the store stays one readable
#: line, cut as config/text.py cuts; ``--json`` shows them whole.
SHOWN, MESSAGE_SHOWN = 200, 2000

IN_FLIGHT_NOTE = ("a copy in flight may finish its current run; its reschedule will be "
                  "dropped, so the job does not run again")


def message_of(row: JobRow) -> Any:
    """The job's call as it will be published (message first), or its stored text when it
    cannot be decoded (a row another writer put in the store): one such row must not stop
    a listing of every other."""
    try:
        args, kwargs, _ = decode_call(row.args, row.job_key, row.bucket)
    except InvalidMessage:
        return row.args
    return args[0] if len(args) == 1 and not kwargs else {"args": args, "kwargs": kwargs}


def as_dict(row: JobRow) -> dict[str, Any]:
    doc = asdict(row)
    doc["message"] = message_of(row)
    del doc["args"]
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in doc.items()}


def describe(row: JobRow) -> str:
    """``recur jobs show``: one field a line."""
    when = ("lease until" if row.state == "dispatched" else "due at")
    early = ("never pulled forward" if row.early_at >= row.due_at else
             f"may be pulled forward from {row.early_at.isoformat()}")
    message = json.dumps(message_of(row), separators=(",", ":"))
    lines = [f"job {visible(row.job_key, SHOWN)}", f"  state      {visible(row.state, SHOWN)} "
             f"(token {row.token}, attempts {row.attempts})",
             f"  bucket     {visible(row.bucket, SHOWN)}",
             f"  task       {visible(row.task, SHOWN)}",
             f"  {when:<10} {row.due_at.isoformat()}"]
    if row.state == "scheduled":
        lines.append(f"  floor      {early}")
    lines += [f"  runs       {row.runs} (runs that rescheduled it)",
              f"  last change {row.updated_at.isoformat()} (dispatch, reschedule or write)",
              f"  created    {row.created_at.isoformat()}",
              f"  message    {visible(message, MESSAGE_SHOWN)}"]
    return "\n".join(lines)


def line_of(row: JobRow) -> str:
    """One job on one line of ``recur jobs list``."""
    return (f"{visible(row.job_key, SHOWN)}  {visible(row.state, SHOWN):<10} "
            f"{visible(row.bucket, SHOWN):<7} {row.due_at.isoformat()}  "
            f"{visible(row.task, SHOWN)}  runs={row.runs}")


def time_option(value: str | None) -> datetime | None:
    return None if value is None else jobs_api().parse_time(value)


@cli.group()
def jobs() -> None:
    """Show, list, cancel and reschedule due jobs (through the store)."""


@jobs.command("show")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def jobs_show(key: str, as_json: bool) -> None:
    """State, bucket, task, due time, floor, runs, lease and message of job KEY."""
    api = jobs_api()
    with api.control(settings().database_url) as ctl:
        row = api.show(ctl, key)
    click.echo(json.dumps(as_dict(row)) if as_json else describe(row))


@jobs.command("list")
@click.option("--bucket")
@click.option("--user", help="The messages' user_id.")
@click.option("--task", help="Task name, e.g. tasks.process_message.")
@click.option("--state", help="scheduled or dispatched.")
@click.option("--due-before", help="ISO time with offset (dispatched jobs: lease end).")
@click.option("--due-after", help="ISO time with offset.")
@click.option("--limit", default=50, show_default=True, help="Jobs per page.")
@click.option("--after", help="The cursor a previous page printed.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job, then the cursor.")
def jobs_list(bucket: str | None, user: str | None, task: str | None, state: str | None,
              due_before: str | None, due_after: str | None, limit: int, after: str | None,
              as_json: bool) -> None:
    """One page of jobs (keyset-paged: never a scan of the table for a page)."""
    from scheduler.store.control import JobFilter

    api = jobs_api()
    f = JobFilter(bucket, user, task, state, time_option(due_before), time_option(due_after))
    api.check_filter(f)  # a bad filter is named before the store is opened
    with api.control(settings().database_url) as ctl:
        page = api.list_jobs(ctl, f, limit, after)
    for row in page.jobs:
        click.echo(json.dumps(as_dict(row)) if as_json else line_of(row))
    if as_json:
        click.echo(json.dumps({"next": page.cursor, "walked": page.walked, "index": page.index}))
    elif page.cursor:
        click.echo(f"-- {len(page.jobs)} job(s), {page.walked} row(s) walked on {page.index}; "
                   f"next page: --after {page.cursor}")
    else:
        click.echo(f"-- {len(page.jobs)} job(s); end of list")


@jobs.command("cancel")
@click.argument("key", required=False)
@click.option("--user", help="Cancel every job of this user instead.")
def jobs_cancel(key: str | None, user: str | None) -> None:
    """Cancel job KEY (or every job of --user): it never runs again."""
    api = jobs_api()
    if (key is None) == (user is None):
        raise InvalidArgument("give a job KEY or --user USER (one of them)")
    with api.control(settings().database_url) as ctl:
        if user is not None:
            counts = revoke().cancel_user(celery_app(), ctl, user)  # REVOKED for each
            others = "".join(f", {n} {visible(state, SHOWN)}" for state, n in sorted(counts.items())
                             if state not in ("scheduled", "dispatched"))
            click.echo(f"cancelled {sum(counts.values())} job(s) of user {visible(user, SHOWN)}: "
                       f"{counts['scheduled']} scheduled, {counts['dispatched']} dispatched"
                       f"{others}")
            if counts["dispatched"]:
                click.echo(f"  dispatched ones: {IN_FLIGHT_NOTE}")
            return
        assert key is not None
        row = revoke().cancel_job(celery_app(), ctl, key)
    if row.state == "dispatched":
        click.echo(f"cancelled job {visible(key, SHOWN)} (it was dispatched, token {row.token}): "
                   f"{IN_FLIGHT_NOTE}")
    else:
        click.echo(f"cancelled job {visible(key, SHOWN)} (it was scheduled for "
                   f"{row.due_at.isoformat()}): it will not run")


@jobs.command("reschedule")
@click.argument("key")
@click.option("--in", "delay", help="From now: 90s, 10m, 1h30m, 2d.")
@click.option("--at", "at", help="ISO time with offset.")
def jobs_reschedule(key: str, delay: str | None, at: str | None) -> None:
    """Make scheduled job KEY due at a new time (not pulled forward before it)."""
    api = jobs_api()
    if (delay is None) == (at is None):
        raise InvalidArgument("give --in DURATION or --at TIME (one of them)")
    now = datetime.now(UTC)
    due = now + api.parse_duration(delay) if delay is not None else api.parse_time(at or "")
    with api.control(settings().database_url) as ctl:
        row = api.reschedule(ctl, key, due, now)
    click.echo(f"job {visible(key, SHOWN)} now due at {row.due_at.isoformat()}")


@cli.group()
def bucket() -> None:
    """Pause or resume the scheduler's dispatch of a bucket."""


@bucket.command("pause")
@click.argument("name")
def bucket_pause(name: str) -> None:
    """Stop dispatching bucket NAME (due jobs and periodic entries wait in the store)."""
    api = jobs_api()
    with api.control(settings().database_url) as ctl:
        changed = api.pause(ctl, name)
    click.echo(f"bucket {name} {'paused' if changed else 'was already paused'}: the "
               "scheduler dispatches none of its jobs until `recur bucket resume " + name + "`")


@bucket.command("resume")
@click.argument("name")
def bucket_resume(name: str) -> None:
    """Dispatch bucket NAME again."""
    api = jobs_api()
    with api.control(settings().database_url) as ctl:
        changed = api.resume(ctl, name)
    click.echo(f"bucket {name} {'resumed' if changed else 'was not paused'}")

