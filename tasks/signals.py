"""Worker start-up hooks."""

from __future__ import annotations

import logging
import sys
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
def check_store_before_consuming(**_: Any) -> None:
    """A store at another schema revision would fail every stored job's run, each failure
    spending one of the message's deliveries until it is dead-lettered: the worker refuses
    to start, as the scheduler does (one ``recur: ...`` line, exit 2). No store at all (the
    default SQLite file not created) is a WARNING line: a worker that only runs published
    work needs none. A store that cannot be reached is an outage, ridden out run by run."""
    from config.errors import EXIT_ERROR, StoreUnavailable, StoreUnusable
    from scheduler.store.worker_store import check_store_at_start

    url = settings().database_url
    try:
        warning = check_store_at_start(url)
    except StoreUnusable as exc:
        print(f"recur: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_ERROR) from exc
    except StoreUnavailable as exc:
        log.warning("due-jobs store unreachable at start (%s): runs ride it out", exc)
    else:
        if warning is not None:
            log.warning("%s", warning)


@celeryd_init.connect
def declare_queues_before_consuming(sender: Any = None, instance: Any = None,
                                    **_: Any) -> None:
    """Declare every queue first: a dead-letter queue must exist before anything
    is dead-lettered into it (the broker drops what has nowhere to go), and Celery's
    delayed delivery binds every bucket queue, not only the ones consumed."""
    app = instance.app if instance is not None else None
    if app is None:
        return
    from config.errors import EXIT_ERROR, ServiceRefused, one_line
    from routing.broker import check_access

    names: list[str] = []
    try:  # a refused user, password, vhost or permission: one line, no Celery traceback
        if check_access(app.conf.broker_url,
                        lambda conn: names.extend(declare_topology(conn, settings()))):
            log.info("declared queues: %s", ", ".join(names))
            return
    except ServiceRefused as exc:
        print(f"recur: {one_line(exc)}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_ERROR) from exc

    def waiting(exc: Exception, interval: float) -> None:
        log.warning("broker %s unreachable: %s; worker waiting for it, next try in %.0fs",
                    conn.as_uri(), exc, interval)

    with app.connection_for_write() as conn:
        conn.ensure_connection(errback=waiting, max_retries=10)
        names = declare_topology(conn, settings())
    log.info("declared queues: %s", ", ".join(names))
