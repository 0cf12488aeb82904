"""What Flower's Scheduled page shows: one keyset page of the due-jobs store, as text.

It reads through :func:`scheduler.jobs.list_jobs`, the same bounded, index-served
walk as ``recur jobs list`` (``scheduler/store/control.py`` says which index each
filter combination walks): a page costs the same at 10 million rows as at ten, and
the page never counts rows. Everything here is plain text; the template escapes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from config.buckets_in_use import bucket_table
from config.errors import InvalidArgument, InvalidMessage
from config.settings import settings
from scheduler import jobs as api
from scheduler.store import get_store
from scheduler.store.control import STATES, JobControl, JobFilter, JobRow
from scheduler.wire import decode_call

#: Jobs a page shows unless the operator asks for another size.
PAGE = 50
_control_lock = threading.Lock()
_controls: dict[str, JobControl] = {}


def control() -> JobControl:
    """This Flower process's job control on the configured store (opened once, kept)."""
    url = settings().database_url
    with _control_lock:
        if url not in _controls:
            _controls[url] = JobControl(get_store(url))
        return _controls[url]


@dataclass(frozen=True)
class View:
    """The page's filters and position, as the operator typed them (query or form)."""

    bucket: str = ""
    user: str = ""
    task: str = ""
    state: str = ""
    limit: str = str(PAGE)
    after: str = ""

    @classmethod
    def read(cls, arg: Callable[[str, str], str | None]) -> View:
        """The view from a request's arguments (``get_query_argument`` or a form's)."""
        defaults = cls()
        return cls(**{f.name: (arg(f.name, getattr(defaults, f.name)) or "").strip()
                      for f in fields(cls)})

    def job_filter(self) -> JobFilter:
        return JobFilter(self.bucket or None, self.user or None, self.task or None,
                         self.state or None)

    def page_size(self) -> int:
        try:
            return int(self.limit or PAGE)
        except ValueError:
            raise InvalidArgument(f"bad page size {self.limit!r}: give a number of jobs, "
                                  f"1..{api.MAX_PAGE}") from None

    def pairs(self, **changes: str) -> list[tuple[str, str]]:
        """The non-empty fields (with ``changes``), for a link or a form's hidden inputs."""
        view = replace(self, **changes)
        return [(f.name, getattr(view, f.name)) for f in fields(view)
                if getattr(view, f.name) and not (f.name == "limit"
                                                  and view.limit == str(PAGE))]

    def query(self, **changes: str) -> str:
        """``?…`` of this view with ``changes`` (no cursor unless given)."""
        pairs = self.pairs(**{"after": "", **changes})
        return "?" + urlencode(pairs) if pairs else ""


@dataclass(frozen=True)
class JobLine:
    """One job as the page shows it."""

    key: str
    user: str
    task: str
    bucket: str
    state: str
    due: str
    lateness: str
    runs: int
    last_dispatch: str
    #: Only a scheduled job can be moved (a dispatched one's running copy sets its time).
    movable: bool


@dataclass(frozen=True)
class BucketLine:
    name: str
    paused_since: str


@dataclass(frozen=True)
class Listing:
    """A page of jobs, what its walk cost, the next page's cursor and the buckets."""

    jobs: list[JobLine]
    walked: int
    index: str
    cursor: str | None
    buckets: list[BucketLine]


def span(seconds: float) -> str:
    """A short duration: ``45s``, ``12m 05s``, ``3h 07m``, ``2d 04h``."""
    s = int(abs(seconds))
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit} {(s % size) // sub_size:02d}{sub}"
    return f"{s}s"


def stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def user_of(row: JobRow) -> str:
    """The user id of the row's message ("" when the call carries none)."""
    try:
        args, kwargs, _ = decode_call(row.args, row.job_key, row.bucket)
    except InvalidMessage:
        return ""
    message: Any = args[0] if args else kwargs.get("message")
    user = message.get("user_id") if isinstance(message, dict) else None
    return "" if user is None else str(user)


def lateness(row: JobRow, now: datetime) -> str:
    if row.state != "scheduled":
        return "in flight" if row.state == "dispatched" else "set aside"
    ahead = (row.due_at - now).total_seconds()
    return f"due in {span(ahead)}" if ahead > 0 else f"{span(ahead)} late"


def last_dispatch(row: JobRow) -> str:
    """The token counts the row's dispatches; the store keeps the time of the last one
    only while it is in flight (``updated_at``: a reschedule writes it too)."""
    if row.token == 0:
        return "never"
    if row.state == "dispatched":
        return (f"#{row.token} at {stamp(row.updated_at)}, lease until {stamp(row.due_at)}"
                f" (attempt {row.attempts})")
    return f"#{row.token} (last change {stamp(row.updated_at)})"


def line_of(row: JobRow, now: datetime) -> JobLine:
    return JobLine(row.job_key, user_of(row), row.task, row.bucket, row.state,
                   stamp(row.due_at), lateness(row, now), row.runs, last_dispatch(row),
                   row.state == "scheduled")


def buckets(ctl: JobControl) -> list[BucketLine]:
    paused = ctl.paused()
    names = [*bucket_table().names, *sorted(set(paused) - set(bucket_table().names))]
    return [BucketLine(n, stamp(paused[n]) if n in paused else "") for n in names]


def read_listing(view: View) -> Listing:
    """One page of ``view`` (InvalidArgument for a bad filter, size or cursor)."""
    ctl = control()
    page = api.list_jobs(ctl, view.job_filter(), view.page_size(), view.after or None)
    now = datetime.now(UTC)
    return Listing([line_of(r, now) for r in page.jobs], page.walked, page.index,
                   page.cursor, buckets(ctl))


def bucket_names() -> list[str]:
    return list(bucket_table().names)


def state_names() -> list[str]:
    return list(STATES)
