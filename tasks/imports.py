"""Your own task modules (``RECUR_IMPORTS``): imported wherever recur's tasks are.

They are Celery's ``imports`` setting (tasks/app.py), which every ``celery -A
tasks …`` command (worker, flower, inspect) imports at start-up. ``recur worker``,
``recur scheduler`` and ``recur flower`` import them first themselves, so a
module that cannot be imported is one :class:`TaskModuleError` line naming it,
before anything starts (plain ``celery`` shows Celery's traceback instead).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

from config.errors import TaskModuleError


def import_task_modules(names: Iterable[str]) -> list[str]:
    """Import each module of ``names`` (in order); return the names imported."""
    done = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure of the user's module
            sys.modules.pop(name, None)
            raise TaskModuleError(f"RECUR_IMPORTS: cannot import {name!r}: "
                                  f"{type(exc).__name__}: {exc}") from exc
        except (SystemExit, KeyboardInterrupt) as exc:  # it would end the process silently
            sys.modules.pop(name, None)
            raise TaskModuleError(f"RECUR_IMPORTS: cannot import {name!r}: it "
                                  f"{_what_ended(exc)} at import") from None
        done.append(name)
    return done


def _what_ended(exc: SystemExit | KeyboardInterrupt) -> str:
    """What a module that tried to end the process did: sys.exit(3) is SystemExit(3)."""
    if isinstance(exc, KeyboardInterrupt):
        return "raised KeyboardInterrupt"
    return f"raised SystemExit({exc.code!r:.60}) (sys.exit)"
