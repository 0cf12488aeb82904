"""What a task raised, made into a failure the worker can record, log in one line and
dead-letter: the one place a run's exception is tamed before Celery sees it.

Celery handles ``Exception``; what else a task raises takes more than the task down:

- ``MemoryError`` reaches the worker's main process, which then stops for good
  ("Unrecoverable error"), with every other user's job;
- ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` and other ``BaseException``
  subclasses end the pool child: the message comes back and runs again, up to
  RECUR_MAX_DELIVERIES times, though it fails the same way each time;
- an exception whose text is megabytes long is written whole into the log (twice, with its
  traceback) and into the result backend; one whose ``__str__``/``__repr__`` raises is
  logged as a dump of the stack.

Each becomes :class:`TaskMisbehaved` naming what was raised (a long text cut to
:data:`MAX_TEXT` characters), raised with the task's own traceback: the run fails once,
as any failed run does. An exception that is fine is raised unchanged.
"""

from __future__ import annotations

from billiard.common import terminate_handler_fired
from celery.exceptions import WorkerShutdown, WorkerTerminate

#: Longest text of an exception that is kept whole (Celery cuts a result's repr at 1024).
MAX_TEXT = 1000
#: What the worker raises itself to stop: never the task's to answer for (nor the
#: SystemExit of billiard's own handler, when the pool ends a child at its hard limit).
WORKER_STOPS = (WorkerShutdown, WorkerTerminate)


class TaskMisbehaved(Exception):
    """The task raised what a worker cannot record as it is; the run failed."""


def _text(exc: BaseException, show: type[str] | object = str) -> str | None:
    try:
        return str(exc) if show is str else repr(exc)
    except Exception:
        return None


def cut(text: str, most: int = MAX_TEXT) -> str:
    """``text``, or its first ``most`` characters and how many there were."""
    return text if len(text) <= most else f"{text[:most]}… ({len(text)} characters)"


def tamed(exc: BaseException) -> BaseException:
    """``exc`` itself when the worker can handle it, else a :class:`TaskMisbehaved`."""
    if isinstance(exc, WORKER_STOPS) or (isinstance(exc, SystemExit) and terminate_handler_fired()):
        return exc  # the worker stopping, or the pool ending this child (hard time limit)
    name = type(exc).__qualname__
    text, shown = _text(exc), _text(exc, repr)
    if text is None or shown is None:
        return TaskMisbehaved(f"the task raised {name}, whose __str__ or __repr__ raises")
    plain = isinstance(exc, Exception) and not isinstance(exc, MemoryError)
    if plain and len(text) <= MAX_TEXT and len(shown) <= 2 * MAX_TEXT + 100:
        return exc
    if not plain:
        why = (
            "which ends the worker process"
            if isinstance(exc, MemoryError | SystemExit | KeyboardInterrupt)
            else ("which is not an Exception")
        )
        return TaskMisbehaved(
            f"the task raised {name}({cut(text)!r}), {why}: failing the run instead"
        )
    if (
        type(exc).__str__ is BaseException.__str__
        and len(exc.args) == 1
        and isinstance(exc.args[0], str)
    ):
        exc.args = (cut(text),)  # its own type, a shorter message
        return exc
    return TaskMisbehaved(f"the task raised {name}: {cut(text)}")
