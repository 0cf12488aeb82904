"""The Scheduled page's actions: cancel, reschedule and run-now per job and per user,
pause and resume per bucket.

Each is one call of :mod:`scheduler.jobs`, the API behind ``recur jobs`` and
``recur bucket``, so the page and the command line change the store the same way
(and refuse the same bad input, by raising before anything is changed); a job's
cancel is ``tasks.revoke.cancel_job`` and a user's ``tasks.revoke.cancel_user``, as
``recur jobs cancel [--user]`` and a revoke, so each job's AsyncResult says REVOKED.
Each returns the one line the page shows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime

from config.errors import InvalidArgument
from scheduler import jobs as api
from scheduler.store.control import JobControl
from tasks.app import app
from tasks.cli.scheduled_view import control, stamp
from tasks.revoke import cancel_job
from tasks.revoke import cancel_user as cancel_users_jobs  # not this module's action

IN_FLIGHT = ("a copy in flight may finish its current run; its reschedule will be dropped, "
             "so the job does not run again")


@dataclass(frozen=True)
class Form:
    """An action's own fields (the page's filters travel beside them)."""

    key: str = ""
    target_user: str = ""
    target_bucket: str = ""
    when: str = ""

    @classmethod
    def read(cls, arg: Callable[[str, str], str | None]) -> Form:
        return cls(**{f.name: (arg(f.name, "") or "") for f in fields(cls)})

    def job(self) -> str:
        if not self.key:
            raise InvalidArgument("no job key given")
        return self.key

    def user(self) -> str:
        if not self.target_user.strip():
            raise InvalidArgument("no user id given")
        return self.target_user

    def due(self, now: datetime) -> datetime:
        """The new due time: a delay from now (``10m``) or an ISO time with its offset."""
        text = self.when.strip()
        if not text:
            raise InvalidArgument("give a new time: a delay from now (90s, 10m, 1h30m, 2d) "
                                  "or an ISO 8601 time with its offset")
        if "-" in text or ":" in text:
            return api.parse_time(text)
        if not text[0].isdigit():
            raise InvalidArgument(f"bad time {text!r}: give a delay from now (90s, 10m, "
                                  "1h30m, 2d) or an ISO 8601 time with its offset")
        return now + api.parse_duration(text)


def cancel(ctl: JobControl, form: Form, now: datetime) -> str:
    row = cancel_job(app, ctl, form.job())  # as a revoke: REVOKED stored for the key
    if row.state == "dispatched":
        return f"cancelled job {row.job_key} (it was dispatched, token {row.token}): {IN_FLIGHT}"
    return (f"cancelled job {row.job_key} (it was {row.state}, due {stamp(row.due_at)}): "
            "it will not run")


def reschedule(ctl: JobControl, form: Form, now: datetime) -> str:
    row = api.reschedule(ctl, form.job(), form.due(now), now)
    return f"job {row.job_key} now due at {stamp(row.due_at)}"


def run_now(ctl: JobControl, form: Form, now: datetime) -> str:
    row = api.reschedule(ctl, form.job(), now, now)
    return f"job {row.job_key} is due now: the scheduler dispatches it on its next pass"


def cancel_user(ctl: JobControl, form: Form, now: datetime) -> str:
    counts = cancel_users_jobs(app, ctl, form.user())  # REVOKED stored for each
    line = (f"cancelled {sum(counts.values())} job(s) of user {form.target_user}: "
            f"{counts['scheduled']} scheduled, {counts['dispatched']} dispatched")
    return f"{line}; dispatched ones: {IN_FLIGHT}" if counts["dispatched"] else line


def _moved(user: str, moved: int, left: int, when: str) -> str:
    line = f"{moved} scheduled job(s) of user {user} {when}"
    return f"{line}; {left} in flight or set aside left as they were" if left else line


def reschedule_user(ctl: JobControl, form: Form, now: datetime) -> str:
    due = form.due(now)
    moved, left = api.reschedule_user(ctl, form.user(), due, now)
    return _moved(form.target_user, moved, left, f"now due at {stamp(due)}")


def run_now_user(ctl: JobControl, form: Form, now: datetime) -> str:
    moved, left = api.reschedule_user(ctl, form.user(), now, now)
    return _moved(form.target_user, moved, left, "due now")


def pause(ctl: JobControl, form: Form, now: datetime) -> str:
    name = form.target_bucket
    if api.pause(ctl, name):
        return f"bucket {name} paused: the scheduler dispatches none of its jobs until resumed"
    return f"bucket {name} was already paused"


def resume(ctl: JobControl, form: Form, now: datetime) -> str:
    name = form.target_bucket
    return f"bucket {name} resumed" if api.resume(ctl, name) else f"bucket {name} was not paused"


ACTIONS: dict[str, Callable[[JobControl, Form, datetime], str]] = {
    "cancel": cancel, "reschedule": reschedule, "run-now": run_now,
    "cancel-user": cancel_user, "reschedule-user": reschedule_user,
    "run-now-user": run_now_user, "pause": pause, "resume": resume,
}


def perform(action: str, form: Form) -> str:
    """Run ``action`` on the store; its line (InvalidArgument & co. before any change)."""
    if action not in ACTIONS:
        shown = repr(action[:40]) + ("..." if len(action) > 40 else "")  # 1 MB: one line
        raise InvalidArgument(f"unknown action {shown} (known: {', '.join(ACTIONS)})")
    return ACTIONS[action](control(), form, datetime.now(UTC))
