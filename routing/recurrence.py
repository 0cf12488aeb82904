"""A recurring message's schedule: ``{"every": <seconds>, "runs": <runs left>,
"jitter": <fraction>}`` in its payload.

The one place that reads it: ``tasks.process_message`` asks it for the next
run, and ``apply_async`` on a task that recurs by its payload checks it
before anything is written, so a malformed schedule is refused at the call
(``InvalidMessage`` naming ``payload.every`` or ``payload.runs``), not
dead-lettered by the worker later. ``every`` is at least RECUR_MIN_EVERY
(default 0.1 s) and at most ten years; ``runs`` is null or 1 to a billion;
``jitter`` (optional, default the bucket's ``jitter``, itself 0) is a fraction
from 0 to 1 of ``every``: the job then runs on its key's phase
(:mod:`routing.jitter`).
A row stored before the minimum was raised runs at the minimum (the worker
raises its ``every``), never faster, and is not dead-lettered for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from config.errors import InvalidMessage
from config.settings import settings
from config.text import CONTROL, NUL_REASON
from routing import jitter as phases

NUL_IN_RECURRING = f"{NUL_REASON}: a recurring message is stored for its next run"

#: Ten years: a longer ``every`` is a mistake (and overflows a datetime sooner or later).
MAX_EVERY = 10 * 365 * 24 * 3600.0
#: Runs left of one message: a billion runs, even a second apart, is 31 years; more is a typo.
MAX_RUNS = 1_000_000_000


@dataclass(frozen=True)
class Recurrence:
    """How often a message runs, and how many runs it has left (None: forever)."""

    every: float
    runs: int | None
    #: Fraction of ``every`` the job's phase may take (None: the bucket's default).
    jitter: float | None = None

    @property
    def again(self) -> bool:
        """Whether the run now in progress is followed by another."""
        return self.runs is None or self.runs > 1

    def after_this_run(self) -> Recurrence:
        return Recurrence(self.every, None if self.runs is None else self.runs - 1,
                          self.jitter)

    def next_due(self, job_key: str, jitter: float, ran_due: float | None,
                 now: float) -> float | None:
        """Epoch seconds of the next run on the key's phase (``jitter``: the payload's
        or the bucket's); None with jitter 0: the caller runs it ``every`` after now."""
        if jitter <= 0:
            return None
        return phases.next_due(job_key, self.every, jitter, ran_due, now)


def recurrence_of(payload: Any, min_every: float | None = None) -> Recurrence | None:
    """The payload's schedule, or None when it does not recur; InvalidMessage if malformed.

    ``every`` must be at least ``min_every`` (default RECUR_MIN_EVERY): a shorter
    one, 0 above all, would run the job back to back for ever.
    """
    if not isinstance(payload, Mapping) or ("every" not in payload and "runs" not in payload):
        return None
    if "every" not in payload:
        raise InvalidMessage("payload.every", "missing: 'runs' needs 'every'")
    every, runs = payload["every"], payload.get("runs")
    _check_every(every, settings().min_every if min_every is None else min_every)
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int)
                             or not 1 <= runs <= MAX_RUNS):
        raise InvalidMessage("payload.runs", f"must be a whole number of runs left from 1 to "
                             f"{MAX_RUNS} or null (forever), got {_shown(runs)}")
    jitter = payload.get("jitter")
    if jitter is not None and (isinstance(jitter, bool) or not isinstance(jitter, int | float)
                               or not 0 <= jitter <= 1):
        raise InvalidMessage("payload.jitter", f"must be a fraction of 'every' from 0 to 1 "
                             f"or null (the bucket's), got {_shown(jitter)}")
    return Recurrence(float(every), runs, None if jitter is None else float(jitter))


def jittered_due(payload: Any, bucket_jitter: float, job_key: str,
                 ran_due: datetime | None, now: datetime) -> datetime | None:
    """When the next run of a recurring message is due on its key's phase, or None
    when its jitter (the payload's, else the bucket's) is 0: then it is ``every``
    after now, as without jitter."""
    recurrence = recurrence_of(payload, min_every=0.0)
    if recurrence is None:
        return None
    jitter = bucket_jitter if recurrence.jitter is None else recurrence.jitter
    every = max(recurrence.every, settings().min_every)
    due = Recurrence(every, None).next_due(
        job_key, jitter, None if ran_due is None else ran_due.timestamp(), now.timestamp())
    return None if due is None else datetime.fromtimestamp(due, UTC)


def _check_every(every: Any, floor: float) -> None:
    if isinstance(every, bool) or not isinstance(every, int | float):
        raise InvalidMessage("payload.every", f"must be a number of seconds from {floor:g} "
                             f"(RECUR_MIN_EVERY) to {MAX_EVERY:.0f}, got {_shown(every)}")
    if every != every:
        raise InvalidMessage("payload.every", "must be a finite number of seconds, got nan")
    if every < floor:
        raise InvalidMessage("payload.every", f"must be at least RECUR_MIN_EVERY = {floor:g} s "
                             f"(a shorter interval runs the job back to back), "
                             f"got {_shown(every)}")
    if not every <= MAX_EVERY:
        raise InvalidMessage("payload.every", f"must be at most {MAX_EVERY:.0f} s (ten years), "
                             f"got {_shown(every)}")


def _shown(value: Any) -> str:
    """A value for an error line: at most 60 characters, even for an int of a million digits."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"an integer of {value.bit_length()} bits"
    return f"{value!r:.60}"


def check_call(args: Any, kwargs: Any) -> None:
    """Refuse a call whose message (first argument or ``message=``) has a malformed schedule.

    Anything else wrong with the call is left to the message validator.
    """
    message = args[0] if isinstance(args, list | tuple) and args else (
        kwargs.get("message") if isinstance(kwargs, Mapping) else None)
    if isinstance(message, Mapping):
        recurrence_of(message.get("payload"))


def check_published_recurring(args: Any, kwargs: Any) -> None:
    """Refuse a call published now (no job key, not a run's own reschedule) whose message
    recurs but whose next run the due-jobs store would refuse: its row is keyed by the
    message's id (printable characters only) and PostgreSQL holds no NUL. Unchecked, the
    worker's reschedule would fail after the first run and the schedule would stop."""
    message = args[0] if isinstance(args, list | tuple) and args else (
        kwargs.get("message") if isinstance(kwargs, Mapping) else None)
    if not isinstance(message, Mapping):
        return
    recurrence = recurrence_of(message.get("payload"))
    if recurrence is None or not recurrence.again:
        return
    ident, user_id = message.get("id"), message.get("user_id")
    bad = CONTROL.search(ident) if isinstance(ident, str) else None
    if bad is not None:
        raise InvalidMessage("id", f"control character U+{ord(bad.group()):04X} at position "
                             f"{bad.start()}: a recurring message's id is its job key in the "
                             "store, which holds printable characters only")
    if isinstance(user_id, str) and "\x00" in user_id:
        raise InvalidMessage("user_id", NUL_IN_RECURRING)
    try:
        text = json.dumps(message.get("payload"))
    except (TypeError, ValueError, RecursionError):
        return  # not JSON: the message check says what is wrong
    if "\\u0000" in text:
        raise InvalidMessage("payload", NUL_IN_RECURRING)
