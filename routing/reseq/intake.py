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

The Celery tasks it publishes and the check of a named step live in ``tasks``
(tasks/resequence.py, tasks/reseq_steps.py), which hands them over with
:func:`use_celery` when the app is set up (importing ``tasks`` does it). A
producer that submits before it imported the app gets it loaded by name, as
``celery -A tasks`` does, so routing holds no import of tasks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery import chord, uuid

from config.errors import ConfigError, InvalidMessage, ServiceUnavailable, UnknownDestination
from config.settings import Settings, settings
from routing.broker import PUBLISH_ERRORS
from routing.messages import validate_message
from routing.redis_client import get_redis
from routing.reseq.state import Resequencer


@dataclass(frozen=True)
class CeleryFace:
    """What tasks/ hands the intake: the resequencer's Celery tasks, and the check of a
    named step (UnknownStep unless the destination's or registered with ``@reseq_step``;
    modules of RECUR_IMPORTS are imported first if it is not registered yet)."""

    process: Any  # tasks.resequence_process
    batch: Any  # tasks.resequence_batch (a batch's chord body)
    check_step: Callable[[str, Any, Settings], object]


_face: CeleryFace | None = None
#: The module that sets up recur's Celery app (what ``celery -A`` names); importing it
#: calls :func:`use_celery`.
APP_MODULE = "tasks"


def use_celery(face: CeleryFace) -> None:
    """Called by tasks/resequence.py when the app is set up."""
    global _face
    _face = face


def celery_face() -> CeleryFace:
    """The registered Celery face, loading the app module by name the first time (a
    producer need not import it first); ConfigError if that sets up no face."""
    if _face is None:
        importlib.import_module(APP_MODULE)
    if _face is None:
        raise ConfigError("the resequencer's tasks are not set up in this process: "
                          "import tasks (recur's Celery app) before submitting")
    return _face


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


def submit_batch(destination: str, messages: Sequence[Any] | Iterable[Any],
                 cfg: Settings | None = None, step: Any = None) -> list[Accepted]:
    """Take several messages (a list, or any iterable but a single message), numbered in
    order; one chord processes them."""
    cfg = cfg or settings()
    check_destination(destination, cfg)
    if isinstance(messages, Mapping | str | bytes) or not isinstance(messages, Iterable):
        raise InvalidMessage("messages", f"must be a list of messages, got "
                             f"{type(messages).__name__}")
    messages = list(messages)  # a generator: numbered as many as it gave, each published
    face = celery_face()
    resequence_process, resequence_batch = face.process, face.batch
    name = step_name(step)
    if name is not None:  # the destination's own, or registered as a step: UnknownStep if not
        face.check_step(destination, step, cfg)
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
    except PUBLISH_ERRORS as exc:
        raise ServiceUnavailable(f"broker: cannot publish {len(messages)} message(s) for "
                                 f"{destination!r} (seq {first}..): {exc}") from exc
    return accepted
