"""Two background threads per worker process keep the lock promises that do not
belong to a single task call:

* the watchdog extends every lease this process holds, every third of its TTL,
  so a task longer than the TTL keeps its lock; it never publishes, so a slow
  broker cannot delay an extension;
* the reaper retries releases that failed while Redis was down (so the user's
  next job is not held up by a finished one) and looks at the users whose wake
  time came (a lease expired with jobs parked behind it, a handover never
  claimed, a gap): one query per interval per process, never one per parked job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from config.errors import LockUnavailable
from config.settings import Settings
from tasks.distlock import events
from tasks.distlock.store import Handover, LockStore, Outcome

log = logging.getLogger("recur.distlock")

Publish = Callable[[str, Handover], None]


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


class LeaseKeeper:
    """The process's watchdog, release retrier and reaper (see the module doc)."""

    def __init__(self, store: LockStore, cfg: Settings, publish: Publish) -> None:
        self.store = store
        self.cfg = cfg
        self.publish = publish
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

    def reap(self) -> None:
        """Retry pending releases, then hand over the users whose wake time came."""
        self._retry_releases()
        self._reap()

    def watch(self) -> None:
        """Extend the leases that are a third of their TTL old."""
        with self._guard:
            due = [lease for lease in self._leases.values() if not lease.lost
                   and time.monotonic() - lease.extended_at >= lease.ttl / 3]
        for lease in due:
            if self.store.extend(lease.user, lease.token, lease.ttl):
                lease.extended_at = time.monotonic()
            else:
                lease.lost = True
                events.lease_lost(lease.user, lease.token)

    def _retry_releases(self) -> None:
        with self._guard:
            pending, self._pending = self._pending, []
        for i, item in enumerate(pending):
            try:
                _, handover = self.store.release(item.user, item.token, item.seq, item.outcome,
                                                 self.cfg.lock_ttl, self.cfg.lock_gap_timeout)
            except LockUnavailable:
                with self._guard:
                    self._pending[:0] = pending[i:]
                raise
            log.info("released the lock of user %s after Redis came back", item.user)
            if handover is not None:
                self.publish(item.user, handover)

    def _reap(self) -> None:
        for user in self.store.due_users():
            handover = self.store.wake(user, self.cfg.lock_ttl, self.cfg.lock_gap_timeout)
            if handover is not None:
                log.info("reaper: lock of user %s was free with jobs parked; handing over #%d",
                         user, handover.seq)
                self.publish(user, handover)
