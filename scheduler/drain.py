"""The scheduler process: keep every bucket queue fed from the due-jobs store.

Each pass: move jobs whose lease ran out ``max_deliveries`` times to their dead-letter
queue, put other rows whose lease ran out back to scheduled, judge the copies in the
``.dead`` queues (scheduler/dead_sweep.py), then per bucket, when its queue holds fewer
ready messages than the low watermark, dispatch due rows (earliest first) until it holds
the high watermark; if nothing is due and pull-forward is on for the bucket, dispatch its
earliest future rows up to the low watermark so idle workers run them early. Broker or
database trouble is logged with what happens next and retried with backoff (a bucket whose
queue refuses publishes is held back alone: held_buckets.py); SIGTERM finishes the batch
in hand, then stops.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from config.buckets import Bucket
from config.errors import ConfigError, PublishRefused, ServiceUnavailable
from config.settings import Settings
from routing import tracing
from scheduler.calls import utcnow
from scheduler.dead_sweep import DeadSweep
from scheduler.fair_share import FairShare
from scheduler.held_buckets import HeldBuckets
from scheduler.idle import IdleWait
from scheduler.lanes import Budget, Lane
from scheduler.outages import Backoff
from scheduler.periodic import PeriodicEntry
from scheduler.publisher import ConfirmingPublisher
from scheduler.set_aside import Caught, UnknownBuckets
from scheduler.store import DueStore
from scheduler.store.aside import AsideRows
from scheduler.store.control import JobControl
from scheduler.store.fair import FairRows
from scheduler.store.fill_lock import FillLocks
from scheduler.summary import Summary

log = logging.getLogger("recur.scheduler")


def check_watermarks(cfg: Settings) -> None:
    """Refuse watermarks that contradict; warn of a lease shorter than a time limit."""
    from config.checks import lease_warnings

    if cfg.low_watermark > cfg.high_watermark:
        raise ConfigError(f"RECUR_LOW_WATERMARK ({cfg.low_watermark}) must not exceed "
                          f"RECUR_HIGH_WATERMARK ({cfg.high_watermark})")
    for line in lease_warnings(cfg.lease_seconds, cfg.buckets):
        log.warning("%s; set RECUR_LEASE_SECONDS above it", line)


@dataclass
class Scheduler:
    """One drain loop over one store and one broker connection."""

    store: DueStore
    publisher: ConfirmingPublisher
    cfg: Settings
    stopping: threading.Event = field(default_factory=threading.Event)
    periodic: list[PeriodicEntry] = field(default_factory=list)  # the app's beat_schedule
    _lanes: list[ConfirmingPublisher] = field(default_factory=list)  # other lanes' brokers
    _pool: ThreadPoolExecutor | None = None
    _pool_size: int = 0
    summary: Summary | None = None
    _paused: set[str] = field(default_factory=set)  # `recur bucket pause`d at the last pass
    backoff: Backoff = field(default_factory=Backoff)
    held: HeldBuckets = field(default_factory=HeldBuckets)  # queues refusing publishes
    _fill_locks: FillLocks | None = None
    _dead_sweep: DeadSweep | None = None
    _unknown: UnknownBuckets | None = None
    _fair: FairShare | None = None
    idle: IdleWait = field(init=False)  # the sleep after a pass that moved nothing

    def __post_init__(self) -> None:
        if self.summary is None:
            self.summary = Summary(self.cfg.status_interval)
        self.idle = IdleWait.of(self.cfg)

    @property
    def fill_locks(self) -> FillLocks:
        if self._fill_locks is None:
            self._fill_locks = FillLocks(self.store)
        return self._fill_locks

    @property
    def dead_sweep(self) -> DeadSweep:
        if self._dead_sweep is None:
            self._dead_sweep = DeadSweep(self.store, self.publisher, self.cfg.buckets.buckets,
                                         self.cfg.max_deliveries)
        return self._dead_sweep

    @property
    def unknown_buckets(self) -> UnknownBuckets:
        if self._unknown is None:
            self._unknown = UnknownBuckets(AsideRows(self.store), self.cfg.buckets.names,
                                           self.cfg.unknown_bucket_grace)
        return self._unknown

    @property
    def fair(self) -> FairShare:
        if self._fair is None:
            self._fair = FairShare(FairRows(self.store), self.cfg.fair_share,
                                   self.cfg.fair_share_quota)
        return self._fair

    @property
    def pull_forward(self) -> set[str]:
        return {b.strip() for b in self.cfg.pull_forward.split(",") if b.strip()}

    def run(self) -> None:
        """Drain until ``stopping`` is set; service outages are waited out."""
        check_watermarks(self.cfg)
        backoff = self.backoff
        log.info("scheduler started: store %s, watermarks %d..%d, batch %d, lease %.0fs, "
                 "pull-forward %s", self.store.url, self.cfg.low_watermark,
                 self.cfg.high_watermark, self.cfg.drain_batch, self.cfg.lease_seconds,
                 ",".join(sorted(self.pull_forward)) or "off")
        synced = False
        while not self.stopping.is_set():
            try:
                if not synced:
                    self.store.sync_periodic(self.periodic, utcnow())
                    synced = True
                moved = self.pass_once()
                pause = self.idle.after(moved, self.store, self.pull_forward)
            except ServiceUnavailable as exc:
                wait = backoff.next()
                log.warning("%s; %s", exc, "stopping" if self.stopping.is_set()
                            else f"reconnecting in {wait:.1f}s")
                self.drop_connections()
                self.stopping.wait(wait)
                continue
            backoff.reset()
            assert self.summary is not None
            self.summary.maybe_log(self.lags)
            if pause:
                self.stopping.wait(pause)
        self.close_publishers()
        self.fill_locks.close()
        if self._pool is not None:
            self._pool.shutdown()
        log.info("scheduler stopped")

    def lags(self) -> dict[str, float]:
        """Per bucket, seconds the oldest due job has waited (0: nothing due)."""
        now = utcnow()
        try:
            heads = self.store.heads([b.name for b in self.cfg.buckets.buckets], now, due_cap=1)
        except ServiceUnavailable:
            return {}  # the next pass reports the outage
        return {b: max(0.0, (now - h.oldest_scheduled_at).total_seconds())
                if h.oldest_scheduled_at is not None else 0.0 for b, h in heads.items()}

    def close_publishers(self) -> None:
        for publisher in (self.publisher, *self._lanes):
            publisher.close()

    def drop_connections(self) -> None:
        """After a broker or database error every lane's connection is suspect: drop them
        all at once, so the next attempt reconnects everything."""
        self.close_publishers()
        self.fill_locks.close()
        self.store.discard_connections()

    def pass_once(self) -> int:
        """One pass over leases and buckets; returns the rows moved."""
        now = utcnow()
        caught = Caught(self.publisher.publish_dead)
        dead = self.store.dead_letter_expired(now, self.cfg.max_deliveries,
                                              self.cfg.drain_batch, caught)
        caught.report()  # a poison row whose dead letter cannot be built: set aside
        if dead:
            log.warning("leases expired %d times, moved to the dead-letter queues: %s",
                        self.cfg.max_deliveries,
                        ", ".join(f"{b}={n}" for b, n in sorted(dead.items())))
        recovered = self.store.recover_expired(now, self.cfg.drain_batch,
                                               self.cfg.max_deliveries)
        if recovered:
            log.debug("leases expired, dispatching again: %s",
                      ", ".join(f"{b}={n}" for b, n in sorted(recovered.items())))
        assert self.summary is not None
        self.summary.leases(recovered, dead)
        moved = sum(recovered.values()) + sum(dead.values()) + self.dead_sweep.run()
        moved += self.unknown_buckets.run(now)  # rows no claim of this scheduler would see
        fired = self.store.fire_periodic(now)
        if fired:
            log.info("periodic entries fired: %s", ", ".join(fired))
        paused = self.read_paused()
        if self.idle.nothing_to_claim(self.store, self.pull_forward, now):
            return moved  # idle: every fill would claim nothing (scheduler/idle.py)
        for bucket in self.cfg.buckets.buckets:
            if self.stopping.is_set():
                break
            if bucket.name not in paused and not self.held.held(bucket.name):
                moved += self.fill(bucket, now)
        return moved

    def read_paused(self) -> set[str]:
        """The buckets not to dispatch (`recur bucket pause`); changes are logged."""
        paused = set(JobControl(self.store).paused())
        for name in sorted(paused - self._paused):
            log.warning("%s: paused (recur bucket pause): dispatching none of its jobs", name)
        for name in sorted(self._paused - paused):
            log.info("%s: resumed: dispatching again", name)
        self._paused = paused
        return paused

    def fill(self, bucket: Bucket, now: datetime) -> int:
        """Top up one bucket's queue; returns the messages published."""
        try:
            sent = self._fill(bucket, now)
        except PublishRefused as exc:  # this bucket's queue, not an outage: the rest go on
            self.held.refused(bucket.name, exc)
            return 0
        self.held.worked(bucket.name)
        self.backoff.reset()  # a step worked: the next outage starts from a short wait
        return sent

    def _fill(self, bucket: Bucket, now: datetime) -> int:
        depth = self.publisher.depth(bucket.queue)
        if depth >= self.cfg.low_watermark:
            self.idle.busy()  # its workers are draining it: look again soon
            return 0
        assert self.summary is not None
        dealt = self.fair.before_fill(bucket.name, now)  # behind: deal first (fair_share.py)
        sent = self.dispatch(bucket, self.cfg.high_watermark - depth, now, early=False,
                             cap=self.cfg.high_watermark, dealt=dealt)
        self.fair.after_fill(bucket.name, sent, now)
        if sent:
            log.debug("%s: queue had %d ready, dispatched %d due", bucket.name, depth, sent)
            self.summary.dispatched(bucket.name, sent, early=False)
        elif bucket.name in self.pull_forward:
            sent = self.dispatch(bucket, self.cfg.low_watermark - depth, now, early=True,
                                 cap=self.cfg.low_watermark)
            if sent:
                log.debug("%s: idle (%d ready, nothing due), pulled %d future jobs forward",
                          bucket.name, depth, sent)
                self.summary.dispatched(bucket.name, sent, early=True)
        return sent

    def dispatch(self, bucket: Bucket, room: int, now: datetime, *, early: bool,
                 cap: int | None = None, dealt: bool = False) -> int:
        """Dispatch batches until ``room`` is used or no row is left.

        With ``drain_threads`` > 1 and more than one batch of room, that many lanes take
        batches from the same room at once, each on its own database and broker connection
        (SKIP LOCKED keeps their rows apart): a lane waiting for its broker confirms no
        longer stalls the drain. With a ``cap`` (the watermark), each batch first reserves
        its room below it (``FillLocks.reserve``: the queue's depth and every scheduler's
        batches in flight counted), so several schedulers' lanes fill one queue at once and
        together never past the cap.
        """
        lease_until = now + timedelta(seconds=self.cfg.lease_seconds)
        budget = Budget(room)
        lanes = 1 if self.store.dialect == "sqlite" else self.cfg.drain_threads
        lanes = min(lanes, -(-room // self.cfg.drain_batch))
        lane = Lane(bucket, budget, now, lease_until, early, cap, dealt)
        if lanes <= 1:
            return self._lane(self.publisher, 0, lane)
        while len(self._lanes) < lanes - 1:
            self._lanes.append(ConfirmingPublisher(
                self.publisher.broker_url, self.publisher.exchange, limits=self.publisher.limits))
            self._lanes[-1].stop = self.publisher.stop  # a stop cuts every lane's wait
        if self._pool is None or self._pool_size < lanes:
            if self._pool is not None:
                self._pool.shutdown()
            self._pool, self._pool_size = ThreadPoolExecutor(lanes, "drain"), lanes
        futures = [self._pool.submit(self._lane, publisher, n, lane)
                   for n, publisher in enumerate((self.publisher, *self._lanes[:lanes - 1]))]
        wait(futures)  # every lane is done with its connections before an error is raised
        return sum(future.result() for future in futures)

    def _lane(self, publisher: ConfirmingPublisher, number: int, lane: Lane) -> int:
        sent, bucket = 0, lane.bucket
        while not self.stopping.is_set() and (want := lane.budget.take(self.cfg.drain_batch)):
            if lane.cap is not None:
                want = self.fill_locks.reserve(bucket.name, number, want, self.cfg.drain_batch,
                                               lane.cap, lambda: publisher.depth(bucket.queue))
                if not want:  # the queue is full (with the batches in flight): done
                    lane.budget.finish()
                    break
            caught = Caught(publisher.publish)  # rows it refused are set aside, reported
            try:
                with tracing.span("recur.claim", bucket=bucket.name, early=lane.early) as span:
                    got = self.store.dispatch(bucket.name, want, lane.now, lane.lease_until,
                                              caught, early=lane.early, dealt=lane.dealt)
                    span.set(rows=got, wanted=want) if got else span.discard()  # idle polls
            finally:
                if lane.cap is not None:
                    self.fill_locks.release(bucket.name, number)
            sent += got
            set_aside = caught.report()  # committed: log and count what was set aside
            if got + set_aside < want:  # a row set aside still came from the room
                lane.budget.finish()
        return sent
