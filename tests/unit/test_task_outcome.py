"""tasks/outcome.py: what a task raised, made into a failure the worker can record."""

from __future__ import annotations

import pytest
from celery.exceptions import Retry, SoftTimeLimitExceeded, WorkerShutdown

from tasks.outcome import MAX_TEXT, TaskMisbehaved, tamed


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class Farewell(BaseException):
    pass


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("plain"),
        Retry("again"),
        SoftTimeLimitExceeded(),
        WorkerShutdown(),
        KeyError("k"),
        RecursionError("deep"),
    ],
)
def test_what_the_worker_handles_is_raised_unchanged(exc: BaseException) -> None:
    assert tamed(exc) is exc


@pytest.mark.parametrize(
    ("exc", "named"),
    [
        (MemoryError(), "MemoryError"),
        (SystemExit(0), "SystemExit"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (GeneratorExit(), "GeneratorExit"),
        (Farewell("bye"), "Farewell"),
        (Unprintable(), "Unprintable"),
        (BaseExceptionGroup("g", [KeyboardInterrupt()]), "BaseExceptionGroup"),
    ],
)
def test_what_would_end_the_worker_or_cannot_print_fails_the_run(
    exc: BaseException, named: str
) -> None:
    failure = tamed(exc)
    assert isinstance(failure, TaskMisbehaved) and named in str(failure)


def test_a_long_message_is_cut_and_keeps_its_type() -> None:
    exc = ValueError("x" * 10_000_000)
    assert tamed(exc) is exc and len(str(exc)) < MAX_TEXT + 50
    assert str(exc).endswith("(10000000 characters)")
    many = tamed(KeyError("y" * 10_000, "z"))  # its own __str__: named, cut
    assert isinstance(many, TaskMisbehaved) and len(str(many)) < MAX_TEXT + 100
