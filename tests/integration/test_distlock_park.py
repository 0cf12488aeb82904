"""A busy user's delivery parks its job and returns, in-process against the real Redis:
no run, no Celery Ignore (whose traceback formatting made every park cost more than a
short job), a result the worker reports as ``task-parked``, the scheduler told not to
finish the row, and the job handed over next."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
import redis
from celery.app.task import Context

from config import keys
from tasks.distlock.job import PARKED_RESULT, SEQ, SINCE, ParkedJob
from tasks.distlock.runtime import runtime
from tasks.distlock.store import ACQUIRED, new_token
from tasks.settle import run_state
from tests.support.locked_tasks import locked_work, read_runs
from tests.support.processes import wait_for

pytestmark = pytest.mark.services


def message(user: str, i: int) -> dict[str, Any]:
    return {"id": f"{user}-{i}", "user_id": user, "bucket": "short", "payload": {"ms": 1}}


def test_a_busy_users_job_parks_returns_and_is_handed_over_next(
        redis_client: redis.Redis) -> None:
    store, user = runtime().store, f"park-{uuid.uuid4().hex[:8]}"
    seq1, seq2, seq3 = (store.submit(user) for _ in range(3))
    holder = new_token()
    assert store.acquire(user, holder, 30, seq1, "task-1", "{}", 300).status == ACQUIRED

    # As a worker runs it: the body on the delivery's own request (Celery's stack
    # protection), the request MessageTask.__call__ hands to a scheduler dispatch.
    headers = {SEQ: seq2, SINCE: time.time()}
    locked_work.request_stack.push(Context(id="task-2", args=[message(user, 2)], kwargs={},
                                           headers=headers, delivery_info={},
                                           called_directly=False))
    try:
        assert locked_work.run(message(user, 2)).startswith(PARKED_RESULT)
        assert run_state(locked_work.request).settled is True  # a dispatch's row is not finished
    finally:
        locked_work.request_stack.pop()
    # Through Celery's tracer the park is not IGNORED; its result marks it parked.
    result = locked_work.apply(args=[message(user, 3)], task_id="task-3",
                               headers={SEQ: seq3, SINCE: time.time()})
    assert result.state == "SUCCESS" and result.result.startswith(PARKED_RESULT)

    assert not [r for r in read_runs(redis_client) if r["user"] == user]
    parked: Any = redis_client.zrange(keys.user_lock(store.prefix, user, "parked"), 0, -1,
                                      withscores=True)
    assert [(ParkedJob.from_json(job).id, score) for job, score in parked] == [
        ("task-2", seq2), ("task-3", seq3)]
    released, handover = store.release(user, holder, seq1, "done", 30, 300, take=True)
    assert released and handover is not None
    assert (ParkedJob.from_json(handover.job).id, handover.seq) == ("task-2", seq2)
    for key in store.user_keys(user):
        redis_client.delete(key)
    redis_client.zrem(keys.lock_wake(store.prefix), user)


def test_celery_events_show_a_parked_job_as_parked_then_run(
        start_worker: Any, celery_app: Any, redis_client: redis.Redis) -> None:
    """With task events on (``-E``), the parked delivery of job 1 is ``task-parked``
    (Flower's state PARKED, not SUCCESS), and its run by job 0's process is
    ``task-started`` then ``task-succeeded`` for the same task id."""
    from celery.events.state import State

    from tests.support.distlock_checks import INCLUDE, ended
    from tests.support.distlock_checks import message as job_message
    from tests.support.locked_tasks import locked_work as work

    state, seen, stop = State(), [], threading.Event()

    receivers: list[Any] = []

    def on_event(event: dict[str, Any]) -> None:
        state.event(event)
        seen.append(event)
        receivers[0].should_stop = stop.is_set()

    def capture() -> None:
        with celery_app.connection_for_read() as conn:
            receivers.append(celery_app.events.Receiver(conn, handlers={"*": on_event}))
            receivers[0].capture(limit=None, timeout=None, wakeup=False)

    threading.Thread(target=capture, daemon=True).start()
    start_worker("short", concurrency=2, args=("-E", *INCLUDE))
    wait_for(lambda: any(e["type"] == "worker-heartbeat" for e in seen), 30,
             "the worker's events to reach the receiver")
    user = f"events-{uuid.uuid4().hex[:6]}"
    first = work.delay(job_message(user, 0, ms=1500))
    second = work.delay(job_message(user, 1, ms=5))

    def types(task_id: str) -> list[str]:
        return [e["type"] for e in seen if e.get("uuid") == task_id]

    wait_for(lambda: "task-parked" in types(second.id), 30, "job 1's park event")
    assert state.tasks[second.id].state == "PARKED"
    wait_for(lambda: ended(redis_client, {f"{user}-1"}) == {f"{user}-1"}, 30, "job 1 to run")
    wait_for(lambda: "task-succeeded" in types(second.id), 30, "job 1's run events")
    # The releaser runs job 1 inside job 0's delivery: job 0's own success event comes after.
    wait_for(lambda: "task-succeeded" in types(first.id), 30, "job 0's run events")
    stop.set()
    assert types(second.id)[-2:] == ["task-started", "task-succeeded"]
    assert "task-succeeded" in types(first.id) and "task-parked" not in types(first.id)
    assert state.tasks[second.id].state == "SUCCESS"
