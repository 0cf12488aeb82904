"""tasks/aio.py without a broker: one loop per process, the request bound inside the
coroutine, soft and hard time limits."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded

from tasks import aio


class FakeTask:
    """What aio reads of a task: its name, request and time limits."""

    def __init__(self, name: str = "t", timelimit: Any = None) -> None:
        self.name = name
        self.request = type("Request", (), {"timelimit": timelimit, "id": "r1"})()
        self.time_limit = None
        self.soft_time_limit = None


def test_coroutines_run_on_one_loop_thread_of_this_process() -> None:
    async def where() -> tuple[int, str]:
        return id(asyncio.get_running_loop()), threading.current_thread().name

    task = FakeTask()
    seen = {aio.settle(task, where()) for _ in range(5)}
    assert len(seen) == 1 and next(iter(seen))[1] == "recur-asyncio"
    assert aio.settle(task, 42) == 42  # a sync task's result passes through


def test_the_request_is_bound_for_its_own_task_only() -> None:
    task = FakeTask("mine")

    async def requests() -> tuple[Any, Any]:
        return aio.bound_request("mine"), aio.bound_request("other")

    mine, other = aio.settle(task, requests())
    assert mine is task.request and other is None
    assert aio.bound_request("mine") is None  # nothing leaks out of the coroutine


def test_soft_limit_cancels_and_hard_limit_gives_up() -> None:
    cancelled: list[str] = []

    async def sleeper(stubborn: bool) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append("stubborn" if stubborn else "polite")
            if not stubborn:
                raise
            await asyncio.sleep(10)

    with pytest.raises(SoftTimeLimitExceeded):
        aio.settle(FakeTask(timelimit=(5, 0.2)), sleeper(False))
    with pytest.raises(TimeLimitExceeded):
        aio.settle(FakeTask(timelimit=(0.5, 0.2)), sleeper(True))
    assert cancelled == ["polite", "stubborn"]


def test_a_coroutines_own_timeout_is_its_own_error() -> None:
    async def times_out() -> None:
        raise TimeoutError("upstream")

    with pytest.raises(TimeoutError, match="upstream"):
        aio.settle(FakeTask(timelimit=(5, 2)), times_out())
