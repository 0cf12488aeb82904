"""The resequencer's tasks: process a destination's message, hand results over, send.

``tasks.resequence_process`` runs on the message's bucket queue (in parallel,
in any order), runs the destination's processing step (a task of the user's
modules, named per call or per destination in RECUR_RESEQ_STEPS, sync or
``async def``) in the same worker, and hands its result to the resequencer state
in Redis, so a result is kept the moment it exists. In a batch it is a chord's header task
(results stored, as chords need) and ``tasks.resequence_batch``, the chord's
body, hands the batch's ordered results over once more (a no-op for those
already there). ``tasks.resequence_send`` runs on the ``outbound`` queue and
sends a destination's ready messages in order. The intake (routing/reseq/intake.py)
is handed these tasks and the step check at import (``use_celery``): routing never
imports tasks.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from functools import cache, partial
from typing import Any

from celery import Task
from celery.exceptions import Reject
from celery.signals import worker_process_init

from config.errors import ConfigError, PermanentFailure, RecurError, ServiceUnavailable
from config.settings import settings
from routing.messages import Message
from routing.queues import OUTBOUND
from routing.redis_client import get_redis, out_of_memory
from routing.reseq.intake import CeleryFace, use_celery
from routing.reseq.state import Resequencer
from scheduler.outages import budget_for, ride_out
from tasks import aio
from tasks.app import app
from tasks.base import MessageTask
from tasks.process import simulated_work_seconds
from tasks.reseq_steps import check_result, step_for

log = logging.getLogger(__name__)
#: What a processing run returns when its result could not be handed over (Redis down).
HANDED_BACK = "handed_back"
#: Seconds before a handed-back message comes round again (the broker's own wait).
HAND_BACK_AFTER = 2

def simulated_processing(message: Message) -> Any:
    """Default processing: the bucket's simulated work; the result is the payload."""
    time.sleep(simulated_work_seconds(message["bucket"]))
    return message["payload"]


def step_task(name: str) -> Any:
    """The registered task called ``name`` (a step must be imported: RECUR_IMPORTS)."""
    task = app.tasks.get(name)
    if task is None:
        raise PermanentFailure(f"processing step {name!r} is not a registered task in this "
                               f"worker: import its module with RECUR_IMPORTS")
    return task


def run_step(name: str | None, message: Message) -> Any:
    """The message's result: its step task called here (sync or async), or the
    simulated work when it has no step."""
    if not name:
        return simulated_processing(message)
    task = step_task(name)
    return aio.settle(task, task(message))


@cache
def resequencer() -> Resequencer:
    """The process's resequencer, on the shared Redis client."""
    return Resequencer(get_redis(), settings())


@worker_process_init.connect
def warm_up_in_background(**_: Any) -> None:
    """When a worker child starts (and destinations are configured), connect to Redis,
    load the Lua scripts and check the destinations' steps in the background: the
    first messages after a restart are not the slow ones, a step that is not
    registered is logged at start-up, and a Redis that is down delays nothing."""
    if settings().destinations:
        threading.Thread(target=warm_up, name="resequencer-warm-up", daemon=True).start()


def warm_up() -> None:
    try:
        for destination, name in settings().reseq_steps.items():
            if name not in app.tasks:
                raise ConfigError(f"RECUR_RESEQ_STEPS: destination {destination!r}: task "
                                  f"{name!r} is not registered (import it with RECUR_IMPORTS)")
        resequencer().preload()
    except RecurError as exc:
        log.error("resequencer warm-up failed: %s (each message will try again)", exc)


def hand_over(reseq: Resequencer, destination: str, seq: int, entry: dict[str, Any],
              count_late: bool = True) -> str:
    """Buffer one entry; start a sender if none runs and one is needed."""
    outcome = reseq.deposit(destination, seq, entry, count_late)
    if outcome == "kick":
        resequence_send.delay(destination)
    elif outcome == "late" and count_late:
        log.warning("destination %s: seq %d (message %s) finished after it was sent or "
                    "skipped; dropped", destination, seq, entry.get("id"))
    return outcome


def entry_of(message: Any, step: str | None, **outcome: Any) -> dict[str, Any]:
    """A buffer entry: the outcome ({"result"} or {"failed"}) with what a replay of the
    message needs if the destination refuses it (the message as submitted, the call's
    step): the sender sets it aside with them (routing/reseq/dead_letters.py)."""
    entry = {"id": message.get("id", "") if isinstance(message, dict) else "", **outcome}
    if isinstance(message, dict):
        entry["message"] = message
    if step:
        entry["step"] = step
    return entry


class ResequenceProcessTask(MessageTask):
    """A message task whose failure for good is handed over as a failed entry, so
    the sender sets it aside in the destination's dead letter at once (replayable)
    instead of waiting for the gap timeout."""

    abstract = True
    #: Its destination's rate limits it (RECUR_DESTINATIONS rate=), not a bucket's.
    rate_limit_defaults = False

    def on_failure(self, exc: BaseException, task_id: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any], einfo: Any) -> None:
        if len(args) < 3:  # not called the way intake calls it: nothing to hand over
            return
        message, destination, seq = args[:3]
        step = args[3] if len(args) > 3 else kwargs.get("step")
        hand_over(resequencer(), destination, int(seq),
                  entry_of(message, step if isinstance(step, str) else None,
                           failed=f"{type(exc).__name__}: {exc}"))


@app.task(bind=True, base=ResequenceProcessTask, name="tasks.resequence_process",
          ignore_result=False)
def resequence_process(self: MessageTask, message: Any, destination: str,
                       seq: int, step: str | None = None) -> dict[str, Any]:
    """Process one message of ``destination`` with its step and hand the result to the
    resequencer (``step``: the intake's choice; None: the destination's, if any)."""
    msg = self.message(message)
    result = run_step(step_for(destination, step), msg)
    check_result(result, destination, seq, msg["id"])
    entry = entry_of(message, step, result=result)
    reseq = resequencer()
    queue = (self.request.delivery_info or {}).get("routing_key")
    try:  # Redis down or full: ridden out in place, then the message goes round again
        ride_out(f"destination {destination}: seq {seq}: hand the result over",
                 lambda: hand_over(reseq, destination, seq, entry),
                 budget_for(settings(), queue))
    except ServiceUnavailable as exc:
        return hand_back(self, exc, destination, seq)
    return {"seq": seq, **entry}


def hand_back(task: MessageTask, exc: ServiceUnavailable, destination: str,
              seq: int) -> dict[str, Any]:
    """Publish the message again (same task id) and let this delivery be acknowledged: a
    result that cannot be kept now is made again later, never lost with a failed task
    (its dead letter, replayed after the sender skipped it, would be dropped as late)."""
    log.log(logging.INFO if out_of_memory(exc) else logging.WARNING,  # said once a minute
            "destination %s: seq %d: %s; handing the message back to its queue",
            destination, seq, exc)
    request = task.request
    try:
        Task.apply_async(task, request.args, request.kwargs, task_id=request.id,
                         retries=request.retries or 0, countdown=HAND_BACK_AFTER)
    except Exception as publish_exc:  # broker down too: the delivery is returned
        raise Reject(exc, requeue=True) from publish_exc
    return {"seq": seq, HANDED_BACK: True}


@app.task(name="tasks.resequence_batch", queue=OUTBOUND.queue)
def resequence_batch(results: list[dict[str, Any]], destination: str,
                     header_ids: list[str]) -> int:
    """Chord body: hand the batch's results over in sequence order, then drop the
    header's stored results (kept only for the chord: nothing else reads them)."""
    reseq = resequencer()
    for result in sorted(results, key=lambda r: int(r["seq"])):
        if result.get(HANDED_BACK):  # its message goes round again and hands over itself
            continue
        entry = {k: v for k, v in result.items() if k != "seq"}
        hand_over(reseq, destination, int(result["seq"]), entry, count_late=False)
    for task_id in header_ids:
        app.AsyncResult(task_id).forget()
    return len(results)


@app.task(name="tasks.resequence_send", queue=OUTBOUND.queue)
def resequence_send(destination: str) -> str:
    """Send ``destination``'s ready messages in order (one sender at a time)."""
    # Here, not at the top: the sender brings httpx, which only the outbound worker uses.
    from routing.reseq.sender import run_sender

    reseq = resequencer()

    def wake(delay: float) -> None:
        if delay <= 0:  # the sender's turn is over: queue it again at once
            resequence_send.delay(destination)
            return
        # Whole seconds, never early: the broker's native delayed delivery counts in
        # seconds, and a run before its booked time would find it still booked.
        seconds = max(1, math.ceil(delay))
        if reseq.book_wake(destination, seconds) is not None:
            resequence_send.apply_async((destination,), countdown=seconds)

    return run_sender(reseq, destination, wake)


use_celery(CeleryFace(resequence_process, resequence_batch, partial(step_for, load=True)))
