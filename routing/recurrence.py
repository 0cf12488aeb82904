"""A recurring message's schedule: ``{"every": <seconds>, "runs": <runs left>}`` in its payload.

The one place that reads it: ``tasks.process_message`` asks it for the next
run, and ``apply_async`` on a task that recurs by its payload checks it
before anything is written, so a malformed schedule is refused at the call
(``InvalidMessage`` naming ``payload.every`` or ``payload.runs``), not
dead-lettered by the worker later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.errors import InvalidMessage

#: Ten years: a longer ``every`` is a mistake (and overflows a datetime sooner or later).
MAX_EVERY = 10 * 365 * 24 * 3600.0


@dataclass(frozen=True)
class Recurrence:
    """How often a message runs, and how many runs it has left (None: forever)."""

    every: float
    runs: int | None

    @property
    def again(self) -> bool:
        """Whether the run now in progress is followed by another."""
        return self.runs is None or self.runs > 1

    def after_this_run(self) -> Recurrence:
        return Recurrence(self.every, None if self.runs is None else self.runs - 1)


def recurrence_of(payload: Any) -> Recurrence | None:
    """The payload's schedule, or None when it does not recur; InvalidMessage if malformed."""
    if not isinstance(payload, Mapping) or ("every" not in payload and "runs" not in payload):
        return None
    if "every" not in payload:
        raise InvalidMessage("payload.every", "missing: 'runs' needs 'every'")
    every, runs = payload["every"], payload.get("runs")
    if (isinstance(every, bool) or not isinstance(every, int | float)
            or not math.isfinite(every) or not 0 <= every <= MAX_EVERY):
        raise InvalidMessage("payload.every", f"must be a number of seconds from 0 to "
                             f"{MAX_EVERY:.0f}, got {every!r:.60}")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise InvalidMessage("payload.runs", f"must be a positive integer (runs left) or null "
                             f"(forever), got {runs!r:.60}")
    return Recurrence(float(every), runs)


def check_call(args: Any, kwargs: Any) -> None:
    """Refuse a call whose message (first argument or ``message=``) has a malformed schedule.

    Anything else wrong with the call is left to the message validator.
    """
    message = args[0] if isinstance(args, list | tuple) and args else (
        kwargs.get("message") if isinstance(kwargs, Mapping) else None)
    if isinstance(message, Mapping):
        recurrence_of(message.get("payload"))
