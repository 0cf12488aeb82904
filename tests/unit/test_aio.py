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


class FakeCall:
    """A store write of the running job's own row (what apply_async plans)."""

    def __init__(self, key: str, written: list[tuple[str, str]]) -> None:
        self.reschedule_of = object()
        self.job = type("Job", (), {"job_key": key, "due_at": None})()
        self.written = written

    def write(self, cfg: Any, request: Any) -> None:
        self.written.append((self.job.job_key, threading.current_thread().name))


@pytest.mark.parametrize("fails", [False, True])
def test_an_async_tasks_own_reschedule_is_written_off_the_loop_after_it_ends(
        fails: bool) -> None:
    written: list[tuple[str, str]] = []

    async def reschedules() -> str:
        returned = aio.defer_write(FakeCall("j1", written))
        await asyncio.sleep(0.05)
        assert written == [] and returned.job_key == "j1"  # not written on the loop
        if fails:
            raise ValueError("after rescheduling")
        return "done"

    if fails:
        with pytest.raises(ValueError):
            aio.settle(FakeTask(), reschedules())
    else:
        assert aio.settle(FakeTask(), reschedules()) == "done"
    assert written == [("j1", threading.current_thread().name)]
    assert aio.defer_write(FakeCall("j2", written)) is None  # outside a task: write now
