"""The base class of every recur message task."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.exceptions import Reject

from config.errors import StoreError, StoreUnavailable
from config.settings import settings
from routing.messages import Message, validate_message
from routing.recurrence import check_call, check_published_recurring
from scheduler.call_options import READ
from scheduler.calls import due_time, store_plan, utcnow
from scheduler.wire import DISPATCH_HEADER, Dispatch, dispatch_of
from tasks import aio, many
from tasks.distlock.runtime import numbered_at_submit
from tasks.flow.defaults import deferral
from tasks.flow.submit import placed_at_submit
from tasks.outcome import tamed
from tasks.settle import StoreCall, live_dispatch, run_dispatched
from tasks.stored_result import StoredResult, forget_last_run, forget_previous, stored_result

log = logging.getLogger(__name__)


def broker_delay(options: dict[str, Any]) -> dict[str, Any]:
    """A short delay for the broker as a countdown of at least one second: Celery's native
    delayed delivery routes by whole seconds and refuses one under a second (and an eta
    is turned into a countdown again when published, which may then be under one)."""
    now = utcnow()
    due = due_time(options.get("countdown"), options.get("eta"), now)
    if due is None:
        return options
    delay = (due - now).total_seconds()
    without_eta = {k: v for k, v in options.items() if k != "eta"}
    if delay > 0:
        return {**without_eta, "countdown": max(1.0, delay)}
    # due already: now (an eta 68 years past is a countdown Celery's check refuses)
    return {**without_eta, "countdown": 0} if options.get("countdown") else without_eta


class MessageTask(Task):  # type: ignore[misc]
    """A task whose first argument is a message, routed to the message's bucket.

    The router validates the message before anything is published, so a bad
    message raises at ``apply_async``/``delay``. The worker validates again
    before running (a message can be published by other means); an invalid
    one fails at once and is dead-lettered with the reason.
    """

    abstract = True
    #: Read by routing.router.route_task.
    routes_by_message = True
    #: Retries (when a task opts into them) stop at the delivery budget.
    max_retries = settings().max_deliveries - 1
    #: Reports a parked locked job as ``task-parked``, not a success (tasks/distlock); a
    #: stored job's copy is not discarded for its revoked job key (tasks/revoke.py).
    Request = "tasks.revoke:StoreAwareRequest"
    #: The task recurs by its message's payload schedule (routing/recurrence.py),
    #: which ``apply_async`` then checks.
    recurs_by_payload = False

    def apply_async(self, args: Any = None, kwargs: Any = None, task_id: Any = None,
                    producer: Any = None, link: Any = None, link_error: Any = None,
                    shadow: Any = None, **options: Any) -> Any:
        """Celery's ``apply_async``; a delay of at least RECUR_SCHEDULE_THRESHOLD seconds,
        a ``job_key=`` or a task rescheduling its own job goes to the due-jobs store, and
        so does a rate-limited job whose key's next slot is that far (tasks/flow/submit.py).

        Bad input (negative countdown, naive eta, both, non-JSON args, invalid
        message or schedule) raises here and nothing is written or published.
        ``not_before=True``: never pulled forward, runs at its time (see
        scheduler/pullforward.py).
        """
        job_key = options.pop("job_key", None)
        not_before = options.pop("not_before", False)
        many.check_signature(self, args, kwargs)
        if self.recurs_by_payload:
            check_call(args, kwargs)
        plan = store_plan(self.name, args, kwargs,
                          {**options, "task_id": task_id, "shadow": shadow, "link": link,
                           "link_error": link_error},
                          job_key, self.request, settings(), not_before=not_before,
                          ignores_result=bool(self.ignore_result))
        if plan is None and task_id is None and link is None and link_error is None:
            far, options = placed_at_submit(self, args, kwargs, options)  # a rate limit's slot
            if far is not None:
                # the store is recur's choice here: not a reason to refuse the call
                # (it runs as its stored run is published: docs/scheduler.md)
                kept = {k: v for k, v in options.items() if k in READ}
                plan = store_plan(self.name, args, kwargs, {**kept, "eta": far}, None,
                                  self.request, settings(), not_before=True)
        if plan is None:  # a locked job is numbered now, or refused (LockLineFull)
            if self.recurs_by_payload:
                check_published_recurring(args, kwargs)
            options = numbered_at_submit(self, args, kwargs, broker_delay(options))
            result = super().apply_async(args, kwargs, task_id, producer, link, link_error,
                                         shadow, **options)
            if isinstance(result, StoredResult):
                result.stored = False  # a plain Celery call: no store to read
            return result
        # inside an async task its own reschedule is written off the event loop
        call = StoreCall.of(plan)
        written = aio.defer_write(call)
        if written is None:
            if plan.reschedule_of is None:
                forget_previous(self, plan.job.job_key)
            written = call.write(settings(), self.request)
        return stored_result(self, written)

    def apply_many(self, calls: Any, **options: Any) -> list[str]:
        """Many calls to the due-jobs store in one transaction, on the COPY path; their
        job keys. Each call is what ``apply_async`` would store (tasks/many.py)."""
        return many.apply_many(self, calls, options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task; a scheduler-dispatched copy is token-checked first.

        A due-jobs store outage is ridden out in place (RECUR_OUTAGE_BUDGET); if
        the store is still down after that, the message is handed back to its
        queue as a fresh copy (the same dispatch), which does not spend one of
        its deliveries: an outage is not the message's failure.
        """
        dispatch = dispatch_of(self.request)
        if dispatch is None:
            return self.run_unless_deferred(args, kwargs)
        try:
            return run_dispatched(self.request, dispatch, settings(),
                                  lambda: self.run_replacing(args, kwargs))
        except StoreUnavailable as exc:
            return self.hand_back(self.live_dispatch(dispatch), exc)
        except Reject as exc:
            if isinstance(exc.reason, StoreUnavailable):  # retry() wraps its apply_async
                return self.hand_back(self.live_dispatch(dispatch), exc.reason)
            if isinstance(exc.reason, StoreError):
                log.warning("job %s: %s; requeueing the message", dispatch.job_key, exc.reason)
                raise Reject(exc.reason, requeue=True) from exc
            raise

    def run_replacing(self, args: Any, kwargs: Any) -> Any:
        """A live dispatched run: its task id is its job key, and Celery never overwrites
        a stored SUCCESS, so the job's previous result goes before this run's is stored."""
        try:
            return self.run_unless_deferred(args, kwargs)
        finally:
            forget_last_run(self)

    def run_unless_deferred(self, args: Any, kwargs: Any) -> Any:
        """Run the task, unless the bucket file's default rate for it sends the job back
        to the store for its slot (tasks/flow/defaults.py: what that returns)."""
        deferred = deferral(self, args, kwargs)
        if deferred is not None:
            return deferred
        try:
            return aio.settle(self, super().__call__(*args, **kwargs))
        except BaseException as exc:  # what the worker cannot take as it is (tasks/outcome.py)
            failure = tamed(exc)
            if failure is exc:
                raise
            raise failure.with_traceback(exc.__traceback__) from None

    def live_dispatch(self, delivered: Dispatch) -> Dispatch:
        """The dispatch as this run left it (its last delivery moves the lease stamp)."""
        return live_dispatch(self.request, delivered)

    def hand_back(self, dispatch: Dispatch, exc: Exception) -> None:
        """Publish this message again (same dispatch header, so still the job's live
        copy) and let this delivery be acknowledged; requeue it if even that fails."""
        log.warning("job %s: %s; handing the message back to its queue", dispatch.job_key, exc)
        request = self.request
        try:
            super().apply_async(request.args, request.kwargs, task_id=request.id,
                                retries=request.retries or 0,
                                headers={DISPATCH_HEADER: dispatch.header()})
        except Exception as publish_exc:  # broker down too: the delivery is returned
            log.warning("job %s: cannot hand the message back (%s); requeueing it",
                        dispatch.job_key, publish_exc)
            raise Reject(exc, requeue=True) from publish_exc

    @property
    def request(self) -> Any:
        """Celery's request; inside an ``async def`` task, the one that delivered it."""
        bound = aio.bound_request(self.name)
        return bound if bound is not None else self._get_request()

    def message(self, raw: Any) -> Message:
        """Validate the raw first argument on the worker side."""
        return validate_message(raw)

    @property
    def worker_name(self) -> str:
        """Node name of the worker running this task (empty outside a worker)."""
        return str(self.request.hostname or "")

    @property
    def redelivered(self) -> bool:
        """Whether the broker delivered this message before (e.g. its worker died)."""
        info = self.request.delivery_info or {}
        return bool(info.get("redelivered"))
