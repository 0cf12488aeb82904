"""A busy user's delivery parks its job and returns, in-process against the real Redis:
no run, no Celery Ignore (whose traceback formatting made every park cost more than a
short job), a result the worker reports as ``task-parked``, the scheduler told not to
finish the row, and the job handed over next."""

from __future__ import annotations

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
from tests.support.locked_tasks import locked_work, read_runs

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
        assert locked_work.request.recur_settled is True  # a dispatch's row is not finished
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
