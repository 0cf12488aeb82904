"""Each worker process's lock runtime: the store, two background threads, and the
hooks that tie the lock to Celery.

* The *watchdog* extends every lease this process holds, every third of its TTL,
  so a task longer than the TTL keeps its lock. It never publishes, so a slow
  broker cannot delay an extension.
* The *reaper* retries releases that failed while Redis was down, and looks at the users
  whose wake time came (a lease expired with jobs parked behind it, a published handover
  that never arrived, a gap): one query per interval per process, never one per parked
  job. It hands such a user's next job over through the broker. A user whose keys Redis
  refuses (another program wrote them) holds up neither thread for the other users.
* ``MessageTask.apply_async`` numbers each locked job it publishes from one
  global counter (:func:`numbered_at_submit`), so numbers are never reused, and
  refuses one whose user already has RECUR_LOCK_MAX_PARKED jobs in line
  (LockLineFull). ``before_task_publish`` numbers a locked job published by
  other means (``send_task``), then signs the control headers
  (config/signing.py, with RECUR_SIGNING_KEY). A job that already carries a
  number (a Celery retry, a handover, a Redis-down re-enqueue) keeps it. A job
  published with an eta, or while Redis is down, is numbered when it arrives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from celery.signals import before_task_publish, worker_init, worker_process_init

from config import signing
from config.errors import LockLineFull, LockUnavailable
from config.settings import Settings, settings
from routing.redis_client import get_redis
from tasks.distlock import broken, unreadable
from tasks.distlock import job as jobs
from tasks.distlock.store import KEEP_MARGIN, Handover, LockStore, Outcome

log = logging.getLogger("recur.distlock")


@dataclass
class Lease:
    """A lock this process holds while its task runs."""

    user: str
    token: str
    ttl: float
    extended_at: float = field(default_factory=time.monotonic)
    lost: bool = False


@dataclass(frozen=True)
class PendingRelease:
    user: str
    token: str
    seq: int
    outcome: Outcome
    task_id: str


class LeaseKeeper:
    """The process's watchdog, release retrier and reaper (see the module doc)."""

    def __init__(self, store: LockStore, cfg: Settings) -> None:
        self.store, self.cfg = store, cfg
        self._leases: dict[str, Lease] = {}
        self._pending: list[PendingRelease] = []
        self._guard = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the watchdog and reaper threads (idempotent)."""
        with self._guard:
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._loop, args=(self.watch, self._watch_interval),
                                     name="recur-lock-watchdog", daemon=True),
                    threading.Thread(target=self._loop, args=(self.reap, self._reap_interval),
                                     name="recur-lock-reaper", daemon=True)]
                for thread in self._threads:
                    thread.start()

    def hold(self, lease: Lease) -> None:
        with self._guard:
            self._leases[lease.token] = lease
        self.start()

    def drop(self, lease: Lease) -> None:
        with self._guard:
            self._leases.pop(lease.token, None)

    def retry_release_later(self, pending: PendingRelease) -> None:
        with self._guard:
            self._pending.append(pending)

    def _watch_interval(self) -> float:
        with self._guard:
            ttls = [lease.ttl for lease in self._leases.values()]
        return min([self.cfg.lock_ttl, *ttls]) / 6

    def _reap_interval(self) -> float:
        return self.cfg.lock_reap_interval

    def _loop(self, step: Callable[[], None], interval: Callable[[], float]) -> None:
        while True:
            time.sleep(interval())
            try:
                step()
            except LockUnavailable as exc:
                log.warning("lock keeper: %s; trying again in %.1fs", exc, interval())
            except Exception:  # the thread must outlive any one failure
                log.exception("lock keeper: step failed; trying again next interval")

    def watch(self) -> None:
        """Extend the leases that are a third of their TTL old."""
        with self._guard:
            due = [lease for lease in self._leases.values() if not lease.lost
                   and time.monotonic() - lease.extended_at >= lease.ttl / 3]
        for lease in due:
            try:
                held = self.store.extend(lease.user, lease.token, lease.ttl)
            except broken.LockRefused as exc:  # a key another program wrote: this one is lost
                log.error("lock keeper: %s", exc)
                held = False
            if held:
                lease.extended_at = time.monotonic()
            else:
                lease.lost = True
                jobs.lease_lost(lease.user, lease.token)

    def reap(self) -> None:
        """Retry pending releases, then hand over the users whose wake time came."""
        with self._guard:
            pending, self._pending = self._pending, []
        for i, item in enumerate(pending):
            try:
                _, handover = self.store.release(item.user, item.token, item.seq, item.outcome,
                                                 self.cfg.lock_ttl, self.cfg.lock_gap_timeout,
                                                 item.task_id)
            except broken.LockRefused as exc:  # this user's keys: the other users go on
                log.error("lock keeper: %s; tried again next interval", exc)
                self.retry_release_later(item)
                continue
            except LockUnavailable:
                with self._guard:
                    self._pending[:0] = pending[i:]
                raise
            log.info("released the lock of user %s after Redis came back", item.user)
            if handover is not None:
                publish_handover(item.user, handover)
        for user in self.store.due_users():
            try:
                handover = self.store.wake(user, self.cfg.lock_ttl, self.cfg.lock_gap_timeout)
            except broken.LockRefused as exc:  # this user's keys: look again after a lease
                log.error("reaper: %s; looked at again after a lease", exc)
                self.store.look_again(user, self.cfg.lock_ttl)
                continue
            if handover is not None:
                log.info("reaper: lock of user %s is free with job #%d next; publishing it",
                         user, handover.seq)
                publish_handover(user, handover)


@dataclass(frozen=True)
class Runtime:
    cfg: Settings
    store: LockStore
    keeper: LeaseKeeper
    pid: int


_current: Runtime | None = None


def runtime() -> Runtime:
    """This process's lock runtime (a forked child builds its own keeper threads)."""
    global _current
    if _current is None or _current.pid != os.getpid():
        cfg = settings()
        store = LockStore(get_redis(), cfg.key_prefix, cfg.lock_wait_budget + KEEP_MARGIN,
                          cfg.lock_max_parked)
        _current = Runtime(cfg, store, LeaseKeeper(store, cfg), os.getpid())
    return _current


def publish_handover(user: str, handover: Handover) -> None:
    """Publish a parked job whose turn came; its copy takes the free lock on arrival."""
    from tasks.app import app

    found = unreadable.parked_job(runtime().store, user, handover, runtime().cfg)
    if found is None:  # an entry that is no job is dropped, and the next taken: none left
        return
    job, handover = found
    ticket = jobs.Ticket(seq=handover.seq, since=job.since)
    try:
        app.send_task(job.task, args=job.args, kwargs=job.kwargs, task_id=job.id,
                      headers={**job.headers, **ticket.headers()})
    except Exception as exc:  # a reaper looks again soon
        jobs.handover_failed(user, job.id, exc)
        with contextlib.suppress(LockUnavailable):
            runtime().store.look_again(user, runtime().cfg.lock_ttl)
        return
    # Confirmed: the copy is queued. If this call is lost (Redis down, a kill), a
    # reaper publishes the job again after one lease; that copy is then dropped.
    with contextlib.suppress(LockUnavailable):
        runtime().store.published(user, handover.seq, runtime().cfg.lock_gap_timeout)


def lock_spec_of(task: Any) -> Any:
    """The LockSpec of a task object (None when it is not locked)."""
    return getattr(getattr(task, "run", None), "__user_lock__", None)


_task_events = False


@worker_init.connect
def remember_task_events(sender: Any = None, **_: Any) -> None:
    """Whether this worker sends task events (``-E``): its processes then send them
    for the jobs they run by the chain too (inherited by the forked children)."""
    global _task_events
    _task_events = bool(getattr(sender, "task_events", False))


def task_events_on() -> bool:
    return _task_events


@worker_process_init.connect
def start_keeper_in_worker_child(**_: Any) -> None:
    """Every worker process reaps from the start, even before it runs a locked task."""
    from tasks.app import app

    if any(lock_spec_of(task) is not None for task in app.tasks.values()):
        runtime().keeper.start()


def numbered_at_submit(task: Any, args: Any, kwargs: Any, options: dict[str, Any]
                       ) -> dict[str, Any]:
    """``options`` for publishing a call of ``task`` now: a locked job gets its number
    and submission time in its headers, or LockLineFull (nothing is published) when
    its user already has RECUR_LOCK_MAX_PARKED numbers not finished. A job that has
    a number, or an eta or countdown (numbered on arrival), is left as it is; with
    Redis down it goes as number 0 (numbered on arrival; the publish does not ask
    Redis again)."""
    spec = lock_spec_of(task)
    headers = dict(options.get("headers") or {})
    if (spec is None or headers.get(jobs.SEQ) is not None or options.get("eta")
            or options.get("countdown")):
        return options
    user = spec.user_of(args or (), kwargs or {})
    try:
        seq = runtime().store.submit(user)
    except LockUnavailable as exc:
        log.warning("publishing a job of user %s unnumbered: %s; it takes its place in "
                    "line when it reaches a worker", user, exc)
        seq = 0
    since = headers.get(jobs.SINCE)
    headers.update({jobs.SEQ: seq, jobs.SINCE: time.time() if since is None else since})
    return {**options, "headers": headers}


@before_task_publish.connect
def stamp_published_job(sender: str | None = None, body: Any = None,
                        headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Number a locked job published without a number, then sign the message's control
    headers (RECUR_SIGNING_KEY; no key: nothing is signed)."""
    if headers is None:
        return
    try:
        number_locked_job(sender, body, headers)
    finally:  # a job that cannot be numbered here is still signed
        signing.sign(headers, settings().signing_key)


def number_locked_job(sender: str | None, body: Any, headers: dict[str, Any]) -> None:
    """Give a newly published locked job its number and submission time."""
    from tasks.app import app

    spec = lock_spec_of(app.tasks.get(sender)) if sender else None
    if spec is None or headers.get(jobs.SEQ) is not None:
        return
    if headers.get(jobs.SINCE) is None:  # a re-enqueue keeps the time of first submission
        eta = headers.get("eta")
        headers[jobs.SINCE] = datetime.fromisoformat(str(eta)).timestamp() if eta else time.time()
    if headers.get("eta"):  # due later: it must not hold up jobs due before it
        return
    args, kwargs = (body[0], body[1]) if isinstance(body, (list, tuple)) else ((), {})
    user = spec.user_of(args, kwargs)
    try:
        headers[jobs.SEQ] = runtime().store.submit(user)
    except (LockUnavailable, LockLineFull) as exc:  # a signal handler cannot refuse
        log.warning("publishing job %s of user %s unnumbered: %s; it takes its place in "
                    "line when it reaches a worker", headers.get("id"), user, exc)
