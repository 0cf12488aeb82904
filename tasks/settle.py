"""The worker half of the handshake: a dispatched run is checked, then its row settled.

A scheduler-dispatched copy runs only while its dispatch (scheduler/wire.py) is
still its row's live one; afterwards the run settles the row: finishes it, or
leaves it to the reschedule the run wrote, or makes it due again soon after a
failure. What one run decided travels in one :class:`RunState`. Celery gives a
run no other home than its request, so the state rides there under one
attribute (:data:`RUN_STATE`), set and read only by this module's functions:
the task's own reschedule (a :class:`StoreCall`, pending until written), a
lock that parked the run (tasks/distlock), the outage budget, and the dispatch
as the run left it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery.exceptions import Ignore, Reject, Retry

from config.buckets_in_use import bucket_table
from config.errors import PermanentFailure, StoreError
from config.settings import Settings
from routing import tracing
from scheduler.calls import ScheduledJob, StorePlan, utcnow
from scheduler.group_commit import peek_dispatch, reschedule_job, schedule_job
from scheduler.metrics import STALE_DROPPED
from scheduler.outages import budget_for, ride_out
from scheduler.store.settle_batch import Reschedule
from scheduler.store.worker_store import SettleStore, get_worker_store
from scheduler.wire import EPOCH, Dispatch, micros, request_header

log = logging.getLogger(__name__)

#: The one request attribute a run's state rides on (a forged header of that name
#: is not a RunState and is ignored).
RUN_STATE = "recur_run"


@dataclass
class RunState:
    """What one run of a message has decided about its row so far."""

    #: The dispatch as this run left it (its last delivery moves the lease stamp).
    dispatch: Dispatch | None = None
    #: ``time.monotonic()`` at which the run's store outage budget ends (None: unset).
    outage_deadline: float | None = None
    #: The run's reschedule of its own row, until it is written: no finish for this run.
    pending: StoreCall | None = None
    #: The run decided its row's fate (rescheduled it, or a lock parked it): no finish.
    settled: bool = False
    #: ``time.time()`` when the run passed its token check and started (its lateness).
    started_at: float | None = None
    #: The run's reschedule its row took: a second one in the same run is refused.
    rescheduled: ScheduledJob | None = None


def _state_on(request: Any) -> RunState | None:
    state = getattr(request, RUN_STATE, None)
    return state if isinstance(state, RunState) else None


def run_state(request: Any) -> RunState:
    """The state of the run ``request`` delivered, created on first use."""
    state = _state_on(request)
    if state is None:
        state = RunState()
        setattr(request, RUN_STATE, state)
    return state


def live_dispatch(request: Any, delivered: Dispatch) -> Dispatch:
    """The dispatch as this run left it (its last delivery moves the lease stamp)."""
    state = _state_on(request)
    return delivered if state is None or state.dispatch is None else state.dispatch


@dataclass(frozen=True)
class StoreCall(StorePlan):
    """A planned store call as the running task writes it."""

    @classmethod
    def of(cls, plan: StorePlan) -> StoreCall:
        return cls(plan.task, plan.job, plan.reschedule_of)

    def write(self, cfg: Settings, request: Any) -> ScheduledJob:
        """Write the row: an upsert, or the token-checked reschedule of the running job.

        A store outage is ridden out (RECUR_OUTAGE_BUDGET). A reschedule that still
        fails is remembered in the run's state: the run then never finishes the job
        (even if the task caught the error), it retries the reschedule or hands the
        message back.
        """
        store, job = get_worker_store(cfg.database_url), self.job
        if self.reschedule_of is None:
            schedule_job(store, job, cfg)  # a commit shared with concurrent calls
            return ScheduledJob(job.job_key, job.due_at)
        state = run_state(request)
        if state.rescheduled is not None:  # its row is no longer dispatched to this run
            log.warning("job %s: this run already rescheduled it (due %s); a second reschedule "
                        "(due %s) is ignored: a run reschedules its own job once", job.job_key,
                        state.rescheduled.due_at.isoformat(), job.due_at.isoformat())
            return ScheduledJob(job.job_key, state.rescheduled.due_at, False)
        state.pending = self  # until it is written: no finish for this run
        accepted = ride_out(f"job {job.job_key}: reschedule",
                            lambda: self.reschedule(store, cfg), budget_left(request, cfg))
        state.pending = None
        state.settled = True  # this run decided its row's fate: no finish
        written = ScheduledJob(job.job_key, job.due_at, accepted)
        if accepted:
            state.rescheduled = written
        return written

    def reschedule(self, store: SettleStore, cfg: Settings) -> bool:
        """The token-checked reschedule (in a statement shared with the process's
        concurrent runs: scheduler/group_commit.py); False (logged) when this copy is
        stale."""
        assert self.reschedule_of is not None
        job, token = self.job, self.reschedule_of.token
        with tracing.span("recur.reschedule", job_key=job.job_key, token=token,
                          due_at=job.due_at) as span:
            accepted = reschedule_job(store, Reschedule(
                job.job_key, token, job.due_at, utcnow(), job.args, job.early_at), cfg)
            span.set(accepted=accepted)
        if not accepted:
            STALE_DROPPED.labels("reschedule").inc()
            log.warning("job %s: not rescheduled, token %d is stale (the job was dispatched "
                        "again, or cancelled); leaving it to its live copy, if any",
                        job.job_key, token)
        return accepted


def queue_of(request: Any) -> str | None:
    """The queue a task request was delivered from."""
    info = getattr(request, "delivery_info", None) or {}
    return info.get("routing_key") if isinstance(info, Mapping) else None


def budget_left(request: Any, cfg: Settings) -> float:
    """Seconds this run may still wait for the store: one budget per run, shared by its
    token check, reschedule and finish (they all happen inside the task's time)."""
    state = run_state(request)
    deadline = state.outage_deadline
    if deadline is None:
        deadline = state.outage_deadline = (time.monotonic()
                                            + budget_for(cfg, queue_of(request)))
    return max(0.0, deadline - time.monotonic())


def run_dispatched(request: Any, dispatch: Dispatch, cfg: Settings,
                   run: Callable[[], Any]) -> Any:
    """Run a scheduler-dispatched message unless it is a stale copy; settle its row.

    A copy whose token is no longer the row's (its lease ran out and the job
    was dispatched again, or the job already finished) is dropped and logged.
    A run that neither rescheduled nor failed finishes its one-shot job; a run
    whose reschedule failed never does. Store outages are ridden out
    (:mod:`scheduler.outages`); :class:`StoreUnavailable` means the budget ran out.
    """
    state = run_state(request)
    state.outage_deadline = state.rescheduled = None  # a new run: a whole budget
    state.dispatch = dispatch

    def budget() -> float:
        return budget_left(request, cfg)

    key = dispatch.job_key
    store = ride_out(f"job {key}: open the store", lambda: get_worker_store(cfg.database_url),
                     budget())
    live = ride_out(f"job {key}: token check", lambda: peek_dispatch(store, key, cfg),
                    budget())
    if not dispatch.matches(live):  # maybe its dispatch is still committing: wait for it
        live = ride_out(f"job {key}: token check", lambda: store.live_dispatch(key), budget())
    if not dispatch.matches(live):
        STALE_DROPPED.labels("run").inc()
        log.warning("dropping stale duplicate of job %s: it carries token %d (lease %s), the "
                    "job's live dispatch is %s", key, dispatch.token,
                    dispatch.lease_us, "none" if live is None else
                    f"token {live[0]} (lease {live[1] and micros(live[1])})")
        # Its task id is the job key: its None must not replace the job's stored result.
        request.ignore_result = True
        return None
    dispatch = state.dispatch = last_chance(request, dispatch, store, cfg)
    state.started_at = time.time()
    try:
        result = run()
    except (*NOT_A_FAILED_RUN, PermanentFailure):  # running again soon would not help
        raise
    except Exception:
        retry_soon(dispatch, store, budget())
        raise
    settle(state, dispatch, store, budget(), cfg)
    return result


#: Exceptions that are not the task's failure: the store's (the message is handed
#: back) and Celery's own control flow.
NOT_A_FAILED_RUN = (StoreError, Retry, Ignore, Reject)
#: Seconds after a failed run (its message dead-lettered as rejected) before its
#: row is dispatched again, instead of after the whole lease.
RETRY_FAILED_AFTER = 5.0
#: Seconds past the bucket's hard time limit that a last delivery's lease lasts.
LEASE_MARGIN = 15.0


def settle(state: RunState, dispatch: Dispatch, store: SettleStore, budget: float,
           cfg: Settings) -> None:
    """After a run: write a reschedule it still owes, or finish its one-shot job."""
    pending = state.pending
    if pending is not None:  # the task caught its failed reschedule: never a finish
        log.warning("job %s: its reschedule failed during the run; trying it again",
                    dispatch.job_key)
        ride_out(f"job {dispatch.job_key}: reschedule", lambda: pending.reschedule(store, cfg),
                 budget)
        state.pending = None
        return
    if state.settled:
        return
    if not ride_out(f"job {dispatch.job_key}: finish",
                    lambda: store.finish(dispatch.job_key, dispatch.token), budget):
        STALE_DROPPED.labels("finish").inc()
        log.warning("job %s: finished, but token %d is stale: the job was dispatched again "
                    "meanwhile", dispatch.job_key, dispatch.token)


def retry_soon(dispatch: Dispatch, store: SettleStore, budget: float = 0.0) -> None:
    """A run failed (its message goes to the dead-letter queue as rejected): make its
    row due again in a few seconds rather than when the whole lease runs out. The
    row's attempts still count, so a job that keeps failing ends in ``.dead``. A store
    outage is ridden out within what is left of the run's budget: the dead-letter
    sweep (scheduler/dead_sweep.py) reads a rejected copy whose lease was never moved
    as a failure for good, left to its lease."""
    until = utcnow() + timedelta(seconds=RETRY_FAILED_AFTER)
    shorten_lease(dispatch, store, until, "failed run", budget)


def last_chance(request: Any, dispatch: Dispatch, store: SettleStore, cfg: Settings
                ) -> Dispatch:
    """On the delivery the queue's limit allows last, shorten the row's lease to the
    bucket's hard time limit: if this delivery dies too, the broker dead-letters the
    copy and the row comes back after that, not after RECUR_LEASE_SECONDS.

    The lease always moves (by a millisecond at least, when it already ends sooner):
    a moved lease is how the dead-letter sweep tells a copy whose last delivery
    started a run and died (poison: the job is dead-lettered) from one that was
    returned by consumers that died or lost their connection before running it
    (dispatched again at once). Returns the dispatch as it now stands (the moved
    lease stamp): a message handed back from this delivery carries it, so its
    new copy is still the live one."""
    count = request_header(request, "x-delivery-count")
    bucket = bucket_table().by_queue.get(queue_of(request) or "")
    if cfg.queue_type != "quorum" or bucket is None or int(count or 0) < cfg.max_deliveries - 1:
        return dispatch
    until = utcnow() + timedelta(seconds=bucket.time_limit + LEASE_MARGIN)
    if dispatch.lease_us is not None:
        until = min(until, EPOCH + timedelta(microseconds=dispatch.lease_us - MOVED_US))
    if not shorten_lease(dispatch, store, until, "last delivery"):
        return dispatch
    return Dispatch(dispatch.job_key, dispatch.token, micros(until), dispatch.due_us)


#: How far the last delivery moves a lease that already ends sooner than its own
#: would (microseconds): enough to show that the delivery started.
MOVED_US = 1000


def shorten_lease(dispatch: Dispatch, store: SettleStore, until: datetime, why: str,
                  budget: float = 0.0) -> bool:
    """End the dispatch's lease at ``until`` if that is sooner than its lease stamp;
    whether it moved (best effort: if the store stays down past ``budget`` seconds
    the lease simply runs its course)."""
    if dispatch.lease_us is not None and dispatch.lease_us <= micros(until):
        return False
    try:
        return ride_out(f"job {dispatch.job_key}: move its lease ({why})",
                        lambda: store.set_lease(dispatch.job_key, dispatch.token, until),
                        budget)
    except StoreError as exc:
        log.warning("job %s: cannot shorten its lease (%s): %s; it is dispatched again "
                    "when the lease runs out", dispatch.job_key, why, exc)
        return False
