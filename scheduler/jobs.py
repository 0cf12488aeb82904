"""Job control: the Python API behind ``recur jobs …`` and ``recur bucket pause|resume``.

Everything goes through the store (``scheduler/store/control.py`` holds the
SQL), so it works with any number of schedulers and workers running:

- :func:`cancel` deletes a job's row. A scheduled job never runs. A
  dispatched one may be queued or running: a queued copy finds no row and is
  dropped as stale; a running copy finishes its current run, but its
  reschedule finds no row and is dropped (logged by the worker), so the job
  never comes back.
- :func:`reschedule` moves a scheduled job to a new due time, which is also
  its floor (an operator's time is not pulled forward). A dispatched job is
  refused: its running copy decides its next time. One that its running copy
  rescheduled between the move and the read that explains a refusal is moved.
  :func:`reschedule_user` moves every scheduled job of a user and leaves the
  dispatched ones.
- :func:`pause` makes the scheduler stop dispatching a bucket (due jobs and
  periodic entries keep accumulating in the store); :func:`resume` undoes it.

Bad input raises :class:`InvalidArgument` (or :class:`UnknownJob`,
:class:`JobInFlight`) before anything is changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from config.buckets_in_use import bucket_table
from config.durations import duration_seconds
from config.errors import InvalidArgument, JobInFlight, UnknownJob
from config.text import LONE_SURROGATE, is_unicode
from scheduler.store import DueStore
from scheduler.store.control import STATES, JobControl, JobFilter, JobRow, Page

#: Largest page of ``recur jobs list``.
MAX_PAGE = 1000
#: Longest delay, or time ahead, a job can be given (seconds: 10 years).
MAX_DELAY = 3650 * 86400
#: Characters of an argument an error line echoes.
SHOWN = 100
#: Moves :func:`reschedule` tries when the row was dispatched at the move but scheduled
#: again when read (its running copy rescheduled it in between).
MOVE_ATTEMPTS = 3


@contextmanager
def control(url: str) -> Iterator[JobControl]:
    """Job control on the store at ``url`` (closed on exit)."""
    store = DueStore.open(url)
    try:
        yield JobControl(store)
    finally:
        store.close()


def parse_duration(text: str) -> timedelta:
    """``90``, ``90s``, ``10m``, ``1h30m``, ``2d``, ``1w`` → a positive timedelta."""
    try:
        seconds = duration_seconds(text)
    except ValueError:
        raise InvalidArgument(f"bad duration {_shown(text)}: give e.g. 90s, 10m, 1h30m, 2d"
                              ) from None
    if not 0 < seconds <= MAX_DELAY:
        raise InvalidArgument(f"bad duration {_shown(text)}: must be more than 0 and at most "
                              "10 years")
    return timedelta(seconds=seconds)


def parse_time(text: str) -> datetime:
    """An ISO 8601 time with its offset (``2026-11-23T15:00:00+00:00`` or ``...Z``)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument(f"bad time {_shown(text)}: give an ISO 8601 time with its offset, "
                              "e.g. 2026-11-23T15:00:00+00:00") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidArgument(f"time {_shown(text)} is naive: give its offset, e.g. "
                              f"{moment.isoformat()}+00:00")
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in the year 10000 in UTC
        raise InvalidArgument(f"time {_shown(text)} is out of range: give one between "
                              "0001-01-02 and 9999-12-30") from None


def check_bucket(name: str) -> str:
    table = bucket_table()
    if name not in table.by_name:
        raise InvalidArgument(f"unknown bucket {_shown(name)} (known: {', '.join(table.names)})")
    return name


def _shown(text: str) -> str:
    """What an error line echoes of an argument: its start, quoted (a 10 kB key stays one
    readable line)."""
    return repr(text[:SHOWN]) + ("..." if len(text) > SHOWN else "")


def _text(what: str, text: str) -> str:
    """``text`` if the store can hold it (a lone surrogate: one line, not the driver's
    UnicodeEncodeError), for the Python API and Flower as the command line refuses it."""
    if not is_unicode(text):
        raise InvalidArgument(f"{what} {_shown(text)} {LONE_SURROGATE}")
    return text


def _user(user: str) -> str:
    if not _text("user id", user).strip():  # as cancel does: blank is a mistake
        raise InvalidArgument("--user needs a user id")
    return user


def check_filter(f: JobFilter) -> JobFilter:
    """Refuse a filter that names an unknown bucket or state, or an empty range."""
    for what, text in (("user id", f.user), ("task", f.task), ("bucket", f.bucket)):
        if text is not None:
            _text(what, text)
    if f.user is not None and not f.user.strip():  # as cancel does: blank is a mistake
        raise InvalidArgument("--user needs a user id")
    if f.task is not None and not f.task.strip():
        raise InvalidArgument("--task needs a task name")
    if f.bucket is not None:
        check_bucket(f.bucket)
    if f.state is not None and f.state not in STATES:
        raise InvalidArgument(f"unknown state {_shown(f.state)} (known: {', '.join(STATES)})")
    if f.due_before and f.due_after and f.due_before <= f.due_after:
        raise InvalidArgument("--due-before must be later than --due-after")
    return f


def show(ctl: JobControl, job_key: str) -> JobRow:
    row = ctl.get(_text("job key", job_key))
    if row is None:
        raise UnknownJob(f"no job {_shown(job_key)}")
    return row


def list_jobs(ctl: JobControl, f: JobFilter, limit: int = 50, after: str | None = None
              ) -> Page:
    """One page of jobs matching ``f``; pass its ``cursor`` as ``after`` for the next."""
    check_filter(f)
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"page size must be 1..{MAX_PAGE}, got {limit}")
    if after is not None:
        try:
            ctl.walk_of(f, None).after(after)  # the walk does not depend on the task's code
        except ValueError:
            raise InvalidArgument(f"bad cursor {_shown(after)}: pass the one a page printed"
                                  ) from None
    return ctl.page(f, limit, after)


def cancel(ctl: JobControl, job_key: str) -> JobRow:
    """Delete the job; the row as it was (its ``state`` says whether a copy was in flight)."""
    row = ctl.cancel(_text("job key", job_key))
    if row is None:
        raise UnknownJob(f"no job {_shown(job_key)}")
    return row


def cancel_user(ctl: JobControl, user: str,
                then: Callable[[list[JobRow]], None] | None = None) -> Counter[str]:
    """Delete every job of ``user``; the count per state they were in (``then`` gets
    each batch's rows once deleted: JobControl.cancel_user)."""
    return ctl.cancel_user(_user(user), then)


def reschedule(ctl: JobControl, job_key: str, due_at: datetime,
               now: datetime | None = None) -> JobRow:
    """Make the scheduled job due at ``due_at`` (not pulled forward before it)."""
    now = now or datetime.now(UTC)
    due, row = _due(due_at, now), None
    for _ in range(MOVE_ATTEMPTS):
        moved = ctl.move(_text("job key", job_key), due, now)
        if moved is not None:
            return moved
        row = ctl.get(job_key)
        if row is None:
            raise UnknownJob(f"no job {_shown(job_key)}")
        if row.state != "scheduled":
            break
        # dispatched at the move, scheduled again by its run's own reschedule since: move it
    assert row is not None
    if row.state == "scheduled":
        raise JobInFlight(f"job {_shown(job_key)} was dispatched at each of "
                          f"{MOVE_ATTEMPTS} tries (its runs keep rescheduling it): try again")
    if row.state != "dispatched":  # set aside, or a state another writer put there
        raise JobInFlight(f"job {_shown(job_key)} is {row.state}, not scheduled: `recur dead "
                          "list --store` says why a set-aside job is, `recur dead replay "
                          "--store --key KEY` schedules it again, `recur jobs cancel` drops it")
    raise JobInFlight(f"job {_shown(job_key)} is dispatched (token {row.token}, lease until "
                      f"{row.due_at.isoformat()}): its running copy sets its next time; "
                      "cancel it, or reschedule it once it is scheduled again")


def reschedule_user(ctl: JobControl, user: str, due_at: datetime,
                    now: datetime | None = None) -> tuple[int, int]:
    """Make every scheduled job of ``user`` due at ``due_at`` (not pulled forward before
    it); dispatched ones keep the time their running copy sets. (moved, left as they were)."""
    _user(user)
    now = now or datetime.now(UTC)
    return ctl.move_user(user, _due(due_at, now), now)


def _due(due_at: datetime, now: datetime) -> datetime:
    """``due_at`` if a job can wait for it: aware, and within a delay's 10 years (a job
    moved to 9999-12-31 would sit in the store as a silent cancel)."""
    if due_at.tzinfo is None:
        raise InvalidArgument(f"time {due_at.isoformat()} is naive: give a timezone-aware time")
    if due_at - now > timedelta(seconds=MAX_DELAY):
        raise InvalidArgument(f"time {due_at.isoformat()} is more than 10 years ahead: cancel "
                              "a job that should not run")
    return due_at


def pause(ctl: JobControl, bucket: str) -> bool:
    return ctl.pause(check_bucket(bucket), datetime.now(UTC))


def resume(ctl: JobControl, bucket: str) -> bool:
    return ctl.resume(check_bucket(bucket))
