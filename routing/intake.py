"""Intake: accept messages for a destination, number them, process them in parallel.

``submit`` validates the destination and the message (the message contract
of :mod:`routing.messages`), assigns the next per-destination arrival
sequence number atomically in Redis, then publishes the processing task to
the message's bucket queue. ``submit_batch`` does the same for several
messages at once (consecutive sequence numbers) and publishes them as a
Celery chord. Bad input is refused before anything is numbered or published;
a destination at capacity refuses with ResequencerFull.

If publishing fails after numbering, those sequence numbers are skipped
after the gap timeout (and reported), never sent out of order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from celery import chord, uuid
from kombu.exceptions import KombuError

from config.errors import InvalidMessage, ServiceUnavailable, UnknownDestination
from config.settings import Settings, settings
from routing.messages import validate_message
from routing.resequencer import Resequencer


@dataclass(frozen=True)
class Accepted:
    """A message taken in: its destination and arrival sequence number."""

    destination: str
    seq: int
    message_id: str


def check_destination(destination: Any, cfg: Settings) -> str:
    """The destination name, if configured; UnknownDestination otherwise."""
    if not isinstance(destination, str) or destination not in cfg.destinations:
        known = ", ".join(sorted(cfg.destinations)) or "none: set RECUR_DESTINATIONS"
        raise UnknownDestination("destination",
                                 f"unknown destination {destination!r} (known: {known})")
    return destination


def step_name(step: Any) -> str | None:
    """A step given as a task or a task name, as the name (None: the destination's)."""
    name = getattr(step, "name", step)
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InvalidMessage("step", f"must be a task or a task name, got {step!r:.60}")
    return name


def submit(destination: str, message: Any, cfg: Settings | None = None,
           step: Any = None) -> Accepted:
    """Take one message for ``destination``; it is sent after every earlier one.

    ``step`` (a task or its name) processes it: the destination's step in
    RECUR_RESEQ_STEPS or a task registered with ``@reseq_step`` (tasks/reseq_steps.py),
    else UnknownStep; None: the destination's step, else the bucket's simulated work.
    """
    return submit_batch(destination, [message], cfg, step)[0]


def submit_batch(destination: str, messages: Sequence[Any],
                 cfg: Settings | None = None, step: Any = None) -> list[Accepted]:
    """Take several messages, numbered in list order; one chord processes them."""
    from tasks.redis_conn import get_redis
    from tasks.reseq_steps import step_for
    from tasks.resequence import resequence_batch, resequence_process

    cfg = cfg or settings()
    check_destination(destination, cfg)
    name = step_name(step)
    if name is not None:  # the destination's own, or registered as a step: UnknownStep if not
        step_for(destination, step, cfg, load=True)
    options = {"step": name} if name else {}
    if not messages:
        raise InvalidMessage("messages", "empty batch")
    ids = [validate_message(m, cfg)["id"] for m in messages]
    first = Resequencer(get_redis(), cfg).assign(destination, ids)
    accepted = [Accepted(destination, first + i, ident) for i, ident in enumerate(ids)]
    try:
        if len(messages) == 1:
            resequence_process.apply_async((messages[0], destination, first), options,
                                           ignore_result=True)
        else:
            header = [resequence_process.s(m, destination, a.seq, **options).set(
                task_id=uuid())
                      for m, a in zip(messages, accepted, strict=True)]
            chord(header)(resequence_batch.s(destination, [sig.id for sig in header]))
    except (OSError, KombuError) as exc:
        raise ServiceUnavailable(f"broker: cannot publish {len(messages)} message(s) for "
                                 f"{destination!r} (seq {first}..): {exc}") from exc
    return accepted
