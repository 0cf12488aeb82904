"""Which tasks may process a resequencer message, and how big their result may be.

A message's ``step`` (``submit(..., step=...)``) is carried as a task argument,
so anyone who can publish to the broker could name any task of the worker as a
step and have it called with the message. A step is therefore accepted only
when it is the destination's own (RECUR_RESEQ_STEPS) or a task registered as a
step with :func:`reseq_step`; anything else is refused by name at submit and,
for a message published by other means, when it runs (the message is set
aside, never run with that task).

A step's result is stored in Redis until it is sent: one larger than
RECUR_RESEQ_MAX_ENTRY_BYTES (as JSON) is refused with :class:`ResultTooLarge`
(the message is set aside with the reason), so RECUR_RESEQ_CAPACITY entries
bound a destination's memory.
"""

from __future__ import annotations

from typing import Any, TypeVar

from config.errors import PermanentFailure, ResultTooLarge, UnknownStep
from config.settings import Settings, settings
from routing.reseq.body import UNSENDABLE, strict_json
from routing.reseq.intake import step_name

T = TypeVar("T")
#: The attribute that marks a task (or its function) as a resequencer step.
STEP_MARK = "recur_reseq_step"


def reseq_step(task: T) -> T:
    """Register a task as a resequencer step that ``submit(..., step=...)`` may name for
    any destination. Stack it over ``@app.task`` (or under it, on the function)::

        @reseq_step
        @app.task(name="myapp.enrich")
        def enrich(message): ...
    """
    setattr(task, STEP_MARK, True)
    return task


def is_step(task: Any) -> bool:
    """Whether ``task`` was registered with :func:`reseq_step`."""
    return bool(getattr(task, STEP_MARK, False)
                or getattr(getattr(task, "run", None), STEP_MARK, False))


def registered(name: str, given: Any, load: bool) -> Any:
    """The task ``given`` (a task object) or registered as ``name``; with ``load``, the
    modules of RECUR_IMPORTS are imported first if it is not (a producer process)."""
    from tasks.app import app

    if not isinstance(given, str):
        return given
    task = app.tasks.get(name)
    if task is None and load:
        from tasks.imports import import_task_modules

        import_task_modules(settings().imports)
        task = app.tasks.get(name)
    return task


def step_for(destination: str, step: Any, cfg: Settings | None = None,
             load: bool = False) -> str | None:
    """The name of the step that processes a message of ``destination``: the call's
    ``step`` if it is the destination's own or a registered step (UnknownStep if
    not), else the destination's (None: the simulated work)."""
    cfg = cfg or settings()
    own = cfg.reseq_steps.get(destination)
    name = step_name(step)
    if name is None or name == own:
        return own
    if not is_step(registered(name, step, load)):
        raise UnknownStep("step", f"{name!r} is not destination {destination!r}'s step "
                          f"(RECUR_RESEQ_STEPS: {own or 'none'}) and not registered as a "
                          f"resequencer step (@reseq_step in a module of RECUR_IMPORTS)")
    return name


def check_result(result: Any, destination: str, seq: int, message_id: str,
                 cfg: Settings | None = None) -> None:
    """Refuse a step's result that is not JSON or larger than RECUR_RESEQ_MAX_ENTRY_BYTES."""
    limit = (cfg or settings()).reseq_max_entry_bytes
    try:
        size = len(strict_json(result))  # as it is sent (routing/reseq/body.py)
    except UNSENDABLE as exc:
        raise PermanentFailure(f"destination {destination!r} seq {seq}: the step's result "
                               f"for message {message_id!r} is not JSON: {exc}") from exc
    if size > limit:
        raise ResultTooLarge(f"destination {destination!r} seq {seq}: the step's result for "
                             f"message {message_id!r} is {size} bytes as JSON, over "
                             f"RECUR_RESEQ_MAX_ENTRY_BYTES={limit}; set aside, not sent")
