"""Flower's Scheduled page (``/scheduled``): the jobs waiting in the due-jobs store.

Flower shows only tasks it received events for; a job waiting in the store is
none of those. This page lists them (``scheduled_view.py``) and acts on them
(``scheduled_actions.py``) through the same API as ``recur jobs``.

- Behind Flower's own login (``web.authenticated``: RECUR_FLOWER_USER /
  RECUR_FLOWER_PASSWORD), for reading and for every action.
- Every action is a POST carrying tornado's XSRF token (its ``_xsrf`` cookie and
  form field). Flower skips that check under basic auth, relying on the
  browser's fetch-metadata and ``Origin`` headers; this page checks both, since a
  browser that holds a basic-auth login sends it with any site's form.
- Bad input (an unknown job, bucket or state, a bad time, a stale cursor) is one
  line on the page with status 400, nothing changed; a store that cannot be
  reached is one line with status 503. Never a traceback.
- Store calls run on Flower's thread pool, never on its event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flower.views import BaseHandler
from tornado import web
from tornado.ioloop import IOLoop

from config.errors import InvalidArgument, RecurError, one_line
from tasks.cli.scheduled_actions import Form, perform
from tasks.cli.scheduled_view import Listing, View, bucket_names, read_listing, state_names

#: The page's route name (Flower's navbar links to it) and template.
ROUTE = "recur-scheduled"
TEMPLATE = "recur_scheduled.html"
T = TypeVar("T")


@dataclass(frozen=True)
class Notice:
    text: str
    failed: bool = False


def status_of(exc: RecurError) -> int:
    """400 for what the operator gave (nothing changed), 503 for a store out of reach."""
    return 400 if isinstance(exc, InvalidArgument) else 503


def empty() -> Listing:
    return Listing([], 0, "", None, [])


class ScheduledView(BaseHandler):  # type: ignore[misc]
    """GET: one page of jobs; POST: one action, then the page again with its line."""

    @web.authenticated
    async def get(self) -> None:
        await self.show(View.read(self.get_query_argument), None, 200)

    @web.authenticated
    async def post(self) -> None:
        view = View.read(self.get_body_argument)
        action = self.get_body_argument("action", "") or ""
        try:
            done = await self.blocking(perform, action, Form.read(self.get_body_argument))
        except RecurError as exc:
            await self.show(view, Notice(self.line(exc), True), status_of(exc))
            return
        await self.show(view, Notice(done), 200)

    async def show(self, view: View, notice: Notice | None, status: int) -> None:
        try:
            listing = await self.blocking(read_listing, view)
        except RecurError as exc:
            listing = empty()
            if notice is None or not notice.failed:
                text = self.line(exc) if notice is None else f"{notice.text}; {self.line(exc)}"
                notice, status = Notice(text, True), max(status, status_of(exc))
        self.set_status(status)
        self.render(TEMPLATE, view=view, listing=listing, notice=notice,
                    bucket_names=bucket_names(), state_names=state_names())

    @staticmethod
    def line(exc: RecurError) -> str:
        return one_line(exc) or type(exc).__name__

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on Flower's thread pool (the store's calls block)."""
        return await IOLoop.current().run_in_executor(None, fn, *args)

    def check_xsrf_cookie(self) -> None:
        """Flower's cross-site and Origin checks, and always tornado's token check."""
        super().check_xsrf_cookie()
        web.RequestHandler.check_xsrf_cookie(self)
