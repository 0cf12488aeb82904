"""Sync tasks that misbehave the way user code does, for tests/integration/
test_misbehaving_tasks.py; loaded by its worker with ``--include``. Each task does what
``payload["do"]`` names, after recording its start in Redis (``runs``)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded

from config.settings import settings
from tasks.app import app
from tasks.base import MessageTask
from tests.support.recorder import recorder

INCLUDE = ("--include", "tests.support.misbehaving_tasks")
BIG = 50 * 1024 * 1024
HUGE_MESSAGE = 10 * 1024 * 1024


def runs_key(message_id: str) -> str:
    return f"{settings().key_prefix}:test:misbehave:{message_id}"


def runs(message_id: str) -> int:
    """How many times a task started for ``message_id``."""
    return int(recorder().get(runs_key(message_id)) or 0)


def deep_list(depth: int) -> list[Any]:
    inner: list[Any] = []
    for _ in range(depth):
        inner = [inner]
    return inner


class Opaque:
    """Neither JSON nor a useful repr."""


class NeedsArgs(Exception):
    """Pickles, but cannot be rebuilt from its args (its ctor wants two)."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what} ({code})")
        self.code = code


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ raised")

    def __repr__(self) -> str:
        raise RuntimeError("__repr__ raised")


class Farewell(BaseException):
    """A BaseException that is not an Exception."""


RETURNS: dict[str, Callable[[], Any]] = {
    "set": lambda: {1, 2, 3},
    "datetime": lambda: datetime.now(UTC),
    "object": Opaque,
    "big": lambda: "x" * BIG,
    "deep": lambda: deep_list(10_000),
}


def recurse(n: int) -> int:
    return recurse(n + 1) + 1


def hostile(do: str) -> BaseException | None:
    """The exception ``do`` raises (None: ``do`` exits instead)."""
    made: dict[str, Callable[[], BaseException]] = {
        "needs_args": lambda: NeedsArgs("refused", 7),
        "lock": lambda: ValueError("holds a lock", threading.Lock()),
        "socket": lambda: ValueError("holds a socket", socket.socket()),
        "unprintable": Unprintable,
        "huge": lambda: ValueError("x" * HUGE_MESSAGE),
        "group": lambda: ExceptionGroup("two at once", [ValueError("a"), KeyError("b")]),
        "base": lambda: Farewell("not an Exception"),
        "keyboard": KeyboardInterrupt,
        "system_exit": lambda: SystemExit(0),
        "generator_exit": GeneratorExit,
        "memory": MemoryError,
    }
    return made[do]() if do in made else None


def started(message: dict[str, Any]) -> dict[str, Any]:
    recorder().incr(runs_key(message["id"]))
    return dict(message["payload"])


@app.task(bind=True, base=MessageTask, name="tests.mis.returns")
def returns(self: MessageTask, message: Any) -> Any:
    """Return what JSON cannot encode (its result is ignored, as recur's default)."""
    return RETURNS[started(message)["do"]]()


@app.task(bind=True, base=MessageTask, name="tests.mis.returns_kept", ignore_result=False)
def returns_kept(self: MessageTask, message: Any) -> Any:
    """The same, with its result stored in the result backend."""
    return RETURNS[started(message)["do"]]()


@app.task(bind=True, base=MessageTask, name="tests.mis.raises")
def raises(self: MessageTask, message: Any) -> Any:
    """Raise an exception that is hard to pickle, encode or print; or leave the process."""
    do = started(message)["do"]
    if do == "sys_exit":
        sys.exit(0)
    if do == "os_exit":
        os._exit(1)
    if do == "recursion":
        return recurse(0)
    exc = hostile(do)
    assert exc is not None, do
    raise exc


@app.task(bind=True, base=MessageTask, name="tests.mis.reschedules")
def reschedules(self: MessageTask, message: Any) -> Any:
    """Mutate its message and reschedule itself, or retry with hostile arguments."""
    do = started(message)["do"]
    if do == "no_user":
        del message["user_id"]
    elif do == "not_json":
        message["payload"] = Opaque()
    if do in ("no_user", "not_json"):
        return self.apply_async((message,), countdown=600)
    if do == "twice":
        self.apply_async((message,), countdown=600)
        self.apply_async((message,), countdown=1200)
        return None
    now = datetime.now(UTC)
    if do == "retry_negative":
        raise self.retry(countdown=-1)
    if do == "retry_past":
        raise self.retry(eta=now - timedelta(days=1))
    if do == "retry_forever":
        raise self.retry(countdown=0, max_retries=None)
    if do == "retry_minus":
        raise self.retry(countdown=0, max_retries=-1)
    raise AssertionError(do)


@app.task(bind=True, base=MessageTask, name="tests.mis.stubborn")
def stubborn(self: MessageTask, message: Any) -> Any:
    """Swallow the soft time limit and keep working until the hard limit."""
    started(message)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(SoftTimeLimitExceeded):
            time.sleep(0.05)
    return None


@app.task(bind=True, base=MessageTask, name="tests.mis.well")
def well(self: MessageTask, message: Any) -> Any:
    """Behaves: another user's job that must keep running."""
    started(message)
    return None
