"""Worker start-up hooks."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import celeryd_init

from config.settings import settings
from routing.queues import declare_topology

log = logging.getLogger(__name__)


@celeryd_init.connect
def check_redis_before_consuming(**_: Any) -> None:
    """Redis must keep parked jobs and lock state (routing/redis_check.py): a WARNING line
    per missing setting, or with RECUR_STRICT=1 no worker (one `recur: ...` line, exit 2)."""
    from routing.redis_check import exit_unless_redis_ok

    exit_unless_redis_ok(settings(), "worker")


@celeryd_init.connect
def declare_queues_before_consuming(sender: Any = None, instance: Any = None,
                                    **_: Any) -> None:
    """Declare every queue first: a dead-letter queue must exist before anything
    is dead-lettered into it (the broker drops what has nowhere to go), and Celery's
    delayed delivery binds every bucket queue, not only the ones consumed."""
    app = instance.app if instance is not None else None
    if app is None:
        return
    def waiting(exc: Exception, interval: float) -> None:
        log.warning("broker %s unreachable: %s; worker waiting for it, next try in %.0fs",
                    conn.as_uri(), exc, interval)

    with app.connection_for_write() as conn:
        conn.ensure_connection(errback=waiting, max_retries=10)
        names = declare_topology(conn, settings())
    log.info("declared queues: %s", ", ".join(names))
