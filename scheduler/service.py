"""``recur scheduler``: the process around the drain loop (scheduler/drain.py).

Start-up checks, the store opened once the database answers, the broker
publisher that declares the topology on every (re)connect, the beat schedule
handed in by the caller (the Celery app's, so the scheduler never imports the
app), and SIGTERM/SIGINT finishing the batch in hand.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Collection, Mapping
from types import FrameType
from typing import Any

from config.errors import ServiceUnavailable, StoreError
from config.settings import Settings
from routing import tracing
from routing.broker import check_access
from routing.queues import TASK_EXCHANGE, declare_topology
from routing.redis_check import check_redis_at_start
from scheduler.drain import Scheduler, check_watermarks
from scheduler.outages import Backoff
from scheduler.periodic import entries_from_beat
from scheduler.publisher import ConfirmingPublisher
from scheduler.stop import Stop
from scheduler.store import DueStore
from scheduler.store.connection import refused_settings
from scheduler.store.schema_check import sqlite_unwritable

log = logging.getLogger("recur.scheduler")


def open_store(cfg: Settings, stopping: threading.Event) -> DueStore | None:
    """Open the store, waiting out a database that is down (None if stopped first); one
    that refuses the URL's settings is :class:`StoreError` (exit 2), as a broker refusing
    the credentials is."""
    backoff = Backoff()
    while not stopping.is_set():
        try:
            store = DueStore.open(cfg.database_url)
            try:
                refused = sqlite_unwritable(store.engine)  # a read-only SQLite file
            except ServiceUnavailable:  # another writer held the lock: waited out below
                store.close()
                raise
            if refused is not None:
                store.close()
                raise refused
            return store
        except ServiceUnavailable as exc:
            if refused_settings(exc):  # the URL's options, sslmode, credentials: not an outage
                raise StoreError(f"{exc}: the server refuses this URL's settings, waiting "
                                 "will not help: fix RECUR_DATABASE_URL") from exc
            wait = backoff.next()
            log.warning("%s; retrying in %.1fs", exc, wait)
            stopping.wait(wait)
    return None


def run_scheduler(cfg: Settings, beat_schedule: Mapping[str, Mapping[str, Any]] | None,
                  registered: Collection[str] | None = None) -> None:
    """``recur scheduler``: run until SIGTERM/SIGINT, finishing the batch in hand.

    ``beat_schedule`` is the Celery app's (``app.conf.beat_schedule``): its entries
    are the periodic entries the scheduler fires; each names one of ``registered``
    (the app's task names). A bad entry ends the start before any service is waited on.
    """
    check_watermarks(cfg)
    periodic = entries_from_beat({} if beat_schedule is None else beat_schedule, cfg,
                                 registered)
    check_redis_at_start(cfg, "scheduler")  # the deployment's Redis (routing/redis_check.py)
    # A broker refusing the credentials, vhost or permissions ends the start (one line, exit
    # 2); a broker that is down is waited out by the drain loop.
    check_access(cfg.broker_url, lambda conn: declare_topology(conn, cfg))
    tracing.setup("scheduler")  # RECUR_OTEL; off: nothing (routing/tracing/)
    stop = Stop()  # a second signal gives up the batch in hand (scheduler/stop.py)
    stopping = stop.requested

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not stop.requested.is_set():
            log.info("%s: stopping after the batch in hand (a second signal: at once)", name)
        stop.signal()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    store = open_store(cfg, stopping)
    if store is None:
        return
    publisher = ConfirmingPublisher(cfg.broker_url, TASK_EXCHANGE.name,
                                    on_connect=lambda conn: declare_topology(conn, cfg))
    publisher.stop = stop
    try:
        Scheduler(store, publisher, cfg, stopping, periodic).run()
    finally:
        store.close()
