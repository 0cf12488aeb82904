"""``task.apply_many(calls, countdown=…)``: many calls to the due-jobs store in one
durable transaction, on the COPY path (scheduler/store/enqueue.py).

For a producer with thousands of calls at once: one ``apply_async`` costs a commit
(or a share of one, scheduler/group_commit.py); ``apply_many`` writes them all in
one COPY. Each call is what ``apply_async`` would store: the same checks, the same
row, the same upsert by job key. Every call goes to the store, a call without a
delay too (due at once: the scheduler sends it on its next pass).

All or nothing: every call is checked, and the first bad one refuses the whole
call with one line naming its index (``apply_many item 3: …``): the rows stream
into the transaction as they are checked, and a refusal rolls it back. Then one
commit writes them all, or (an error) none. Earlier jobs' stored results under
these keys are forgotten (as ``apply_async`` does) only once every call passed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from celery.backends.redis import RedisBackend
from celery.canvas import Signature

from config.errors import ArgumentsMismatch, InvalidMessage, InvalidSchedule
from config.settings import Settings, settings
from routing.recurrence import check_call
from scheduler.calls import CheckedOptions, PlanContext, store_plan, utcnow
from scheduler.store import Job
from tasks.stored_result import keeps_results

log = logging.getLogger(__name__)

#: Result keys deleted per Redis command when earlier jobs' results are forgotten.
FORGET_CHUNK = 1000
#: Options that name one call, not many: give them per call, on a signature.
ONE_CALL_ONLY = ("job_key", "task_id")
#: The delay options: a call's own replaces the shared one (not both).
DELAYS = ("countdown", "eta")


def apply_many(task: Any, calls: Iterable[Any], options: Mapping[str, Any]) -> list[str]:
    """Write every call of ``calls`` to the store in one transaction; their job keys.

    A call is the task's positional arguments (a list or tuple, as Celery's
    ``starmap``), its one argument (a dict: the message, as Celery's ``map``), or a
    signature of this task (``task.s(msg).set(countdown=60, job_key="k")``, whose
    options replace the shared ``options``).
    """
    for name in ONE_CALL_ONLY:
        if name in options:
            raise InvalidSchedule(f"apply_many: {name} names one call: give it per call "
                                  f"(task.s(...).set({name}=...))")
    from scheduler.store import get_store  # SQLAlchemy's store: loaded on first use
    from scheduler.store.enqueue import schedule_many

    keys: list[str] = []
    jobs = planned(task, calls, options, keys)
    schedule_many(get_store(settings().database_url), jobs, utcnow(),
                  before_commit=lambda: forget_all(task, keys))
    return keys


def planned(task: Any, calls: Iterable[Any], options: Mapping[str, Any],
            keys: list[str]) -> Iterator[Job]:
    """Each call checked and encoded as its row (its key added to ``keys``), as the store
    takes them; the first bad one is refused by its index."""
    cfg = replace(settings(), schedule_threshold=0.0)  # every call goes to the store
    shared = dict(options)
    not_before = shared.pop("not_before", False)
    if shared.get("countdown") is None and shared.get("eta") is None:
        shared["countdown"] = 0  # due now, through the store
    request = task.request
    batch = Batch(PlanContext.of(request, cfg), task.name, bool(task.recurs_by_payload),
                  bool(task.ignore_result))
    for index, call in enumerate(calls):
        try:
            job = _job(task, call, shared, not_before, request, cfg, batch)
        except InvalidMessage as exc:
            raise type(exc)(f"apply_many item {index}: {exc.field}", exc.problem) from None
        except InvalidSchedule as exc:
            raise InvalidSchedule(f"apply_many item {index}: {exc}") from None
        keys.append(job.job_key)
        yield job


@dataclass
class Batch:
    """What the calls of one ``apply_many`` share, so each is worked out once: the moment
    they are planned at, the task's attributes (``task`` is often Celery's proxy), the
    signature check's verdict per call shape (whether arguments bind to a function
    depends only on how many are positional and which keywords are given) and the
    shared options checked."""

    context: PlanContext
    name: str
    recurs_by_payload: bool
    ignores_result: bool
    shapes: dict[tuple[int, tuple[str, ...]], str | None] = field(default_factory=dict)
    shared: CheckedOptions | None = None

    def checked(self, shared: Mapping[str, Any]) -> CheckedOptions:
        """The shared options checked, on the first call that uses them (a refusal names
        that call, after what is wrong with it before them)."""
        if self.shared is None:
            self.shared = CheckedOptions.of(shared, self.context.now)
        return self.shared


def _job(task: Any, call: Any, shared: dict[str, Any], not_before: Any, request: Any,
         cfg: Settings, batch: Batch) -> Job:
    args, kwargs, own = _parts(task, call)
    options, job_key = shared, None
    if own:
        options = {name: value for name, value in shared.items()
                   if name not in DELAYS or not any(d in own for d in DELAYS)}
        options.update(own)
        if options.get("countdown") is None and options.get("eta") is None:
            options["countdown"] = 0
        job_key = options.pop("job_key", None)
        not_before = options.pop("not_before", not_before)
    shape = (len(args), tuple(kwargs))
    if shape not in batch.shapes:
        batch.shapes[shape] = signature_problem(task, args, kwargs)
    if batch.shapes[shape] is not None:
        raise ArgumentsMismatch("args", f"do not fit {batch.name}: {batch.shapes[shape]}")
    if batch.recurs_by_payload:
        check_call(args, kwargs)
    plan = store_plan(batch.name, args, kwargs, options, job_key, request, cfg,
                      not_before=not_before, ignores_result=batch.ignores_result,
                      context=batch.context, checked=None if own else batch.checked(shared))
    if plan is None or plan.reschedule_of is not None:
        raise InvalidSchedule("the running task's own job: reschedule it with apply_async")
    return plan.job


def check_signature(task: Any, args: Any, kwargs: Any) -> None:
    """Refuse a call whose args/kwargs do not fit the task. Celery checks this only when
    it publishes; a stored call unchecked would be taken now and fail at every run."""
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ArgumentsMismatch("kwargs", f"must be a mapping, got {type(kwargs).__name__}")
    if args is not None and not isinstance(args, list | tuple):  # Celery would take a dict's keys
        raise ArgumentsMismatch("args", f"must be a list or tuple of the task's arguments "
                                f"(args=[message]), got {type(args).__name__}")
    problem = signature_problem(task, args, kwargs)
    if problem is not None:
        raise ArgumentsMismatch("args", f"do not fit {task.name}: {problem}")


def signature_problem(task: Any, args: Any, kwargs: Any) -> str | None:
    """Why args/kwargs do not bind to the task's signature (Celery's typing check), or
    None (args of another shape too: the message check names what is wrong)."""
    header = getattr(task, "__header__", None)
    if not task.typing or header is None or not isinstance(args, list | tuple | None):
        return None
    try:
        header(*(args or ()), **(kwargs or {}))
    except TypeError as exc:
        return str(exc)
    return None


def _parts(task: Any, call: Any) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """(args, kwargs, options) of one call."""
    if isinstance(call, Signature):
        if call.task != task.name:
            raise InvalidSchedule(f"a signature of {call.task!r}, not of {task.name!r}")
        return list(call.args or ()), dict(call.kwargs or {}), dict(call.options or {})
    if isinstance(call, list | tuple):
        return list(call), {}, {}
    if isinstance(call, Mapping):
        return [call], {}, {}
    raise InvalidSchedule(f"a call is its args (a list or tuple), its one argument (a dict) "
                          f"or a signature of {task.name}, got {type(call).__name__}")


def forget_all(task: Any, keys: list[str]) -> None:
    """What earlier jobs of these keys stored in the result backend, forgotten (as
    ``apply_async`` forgets before each call), a thousand keys per Redis command. Best
    effort: a result backend that is down does not stop the calls."""
    if not keys or not keeps_results(task):
        return
    backend = task.backend
    try:
        if isinstance(backend, RedisBackend):
            for key in keys:
                backend._cache.pop(key, None)
            names = [backend.get_key_for_task(key) for key in keys]
            for start in range(0, len(names), FORGET_CHUNK):
                backend.client.delete(*names[start:start + FORGET_CHUNK])
        else:
            for key in keys:
                backend.forget(key)
    except Exception as exc:  # the result backend's error: the store write still goes
        log.warning("apply_many: cannot forget the results earlier jobs of these %d keys "
                    "stored (%s); their AsyncResults may show them until the new jobs run",
                    len(keys), exc)
