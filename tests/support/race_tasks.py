"""A task for the in-process race tests (tests/integration/test_job_races.py): it calls the
test's hook in the middle of its run, then reschedules itself ``payload.again`` seconds
later, recording whether its reschedule was taken."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tasks.app import app
from tasks.base import MessageTask

#: Called mid-run with the job key (set by the test; None: nothing).
hook: Callable[[str], None] | None = None
#: Whether each run's own reschedule was taken (False: its copy was stale), in order.
accepted: list[bool] = []


@app.task(bind=True, base=MessageTask, name="tests.race_self_reschedule")
def race_self_reschedule(self: MessageTask, message: Any) -> None:
    """Run the hook, then reschedule this job ``payload.again`` seconds later."""
    msg = self.message(message)
    if hook is not None:
        hook(msg["id"])
    result = self.apply_async((message,), countdown=msg["payload"]["again"])
    accepted.append(bool(getattr(result, "accepted", True)))
