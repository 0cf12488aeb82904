"""A rate-limited job takes its place in its key's plan when it is published.

``MessageTask.apply_async`` asks :func:`placed_at_submit` before it publishes a job of a
rate-limited task (its own ``@rate_limit``, or a bucket file's default): one Redis call
(routing/gcra.lua, mode ``submit``) gives the job the key's next place, as a delivery
would, in publication order. A place now: the job is published as usual and starts on
arrival if the runs that really started allow it. A place a short wait away: it is
published into the broker's wait levels (routing/waits.py), which hand it to its queue
at its slot. A place at least RECUR_SCHEDULE_THRESHOLD away: the job goes straight into
the due-jobs store, due at its slot, never pulled forward. So a key sent far over its
limit costs its producer one store write per job, and no worker any delivery before
the job's slot: its jobs cannot crowd other keys out of the workers. Like the lock's
numbering at publish, Redis down means the job is published unplaced and decided on
arrival.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from config.errors import RecurError, ServiceUnavailable
from config.settings import settings
from routing.messages import resolve_bucket
from routing.redis_client import get_redis
from routing.router import queue_for_message
from routing.waits import wait_route
from scheduler.calls import utcnow
from tasks.flow import limiter
from tasks.flow.defaults import limited_somewhere, spec_for
from tasks.flow.rate_limit import RateSpec

log = logging.getLogger("recur.flow")


def placed_at_submit(task: Any, args: Any, kwargs: Any, options: dict[str, Any]
                     ) -> tuple[datetime | None, dict[str, Any]]:
    """Where a job of ``task`` published now waits for its slot: ``(when, options)``
    with ``when`` its slot when that is far enough to wait in the due-jobs store, else
    None and the options to publish it with (into the broker's wait levels when its
    slot is near). Unchanged options when it is not limited, has a delay or a
    destination of its own, or Redis could not be asked."""
    if any(options.get(name) is not None
           for name in ("countdown", "eta", "queue", "exchange", "routing_key")):
        return None, options  # a delay (a retry, a backoff) or a route of its own
    message = args[0] if args else (kwargs or {}).get("message")
    spec = spec_of(task, message)
    if spec is None or not isinstance(message, dict):
        return None, options
    cfg = settings()
    try:
        key = spec.key_of(message)
        decision = limiter.take(get_redis(), cfg.key_prefix, key, str(message["id"]),
                                str(message.get("bucket") or message.get("kind") or ""),
                                spec.rate, mode="submit")
    except ServiceUnavailable as exc:
        log.warning("publishing job %s unplaced: %s; its rate limit decides on arrival",
                    message.get("id"), exc)
        return None, options
    except RecurError:
        return None, options  # a message the limit cannot key: the worker refuses it by name
    if decision.allowed:
        return None, options
    slot = utcnow() + timedelta(seconds=decision.wait)
    route = wait_route(decision.wait) if decision.wait < cfg.schedule_threshold else None
    if route is None:
        return slot, options
    # Near: through the broker's wait levels (routing/waits.py), into its queue at its slot.
    exchange, bits = route
    headers = {**(options.get("headers") or {}), **bits}
    return None, {**options, "headers": headers, "exchange": exchange,
                  "routing_key": queue_for_message(message)}


def spec_of(task: Any, message: Any) -> RateSpec | None:
    """The limit on ``task``'s jobs: its own ``@rate_limit``, else its bucket file
    default for ``message`` (tasks/flow/defaults.py), else None."""
    own = getattr(getattr(task, "run", None), "__rate_limit__", None)
    if isinstance(own, RateSpec):
        return own
    if (not isinstance(message, dict) or not limited_somewhere()
            or not getattr(task, "rate_limit_defaults", True)):
        return None
    try:
        bucket = resolve_bucket(message, settings())
    except RecurError:
        return None
    return spec_for(task.name, bucket)
