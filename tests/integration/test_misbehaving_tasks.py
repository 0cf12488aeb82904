"""A sync task's misbehaviour stays its own run's: what it returns or raises that the
worker cannot take as it is, leaving its process, mutating its message, hostile retries
and a swallowed soft time limit each end as one failed run, dead-lettered with the
reason, in one short log record; the worker and other users' jobs carry on. One prefork
worker (tests/support/misbehaving_tasks.py) serves the whole module."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection

from config.buckets_in_use import bucket_table
from config.settings import settings
from routing.deadletter import DeadMessage, list_dead
from scheduler.store import DueStore
from scheduler.store.control import JobControl
from scheduler.task_message import task_message
from tests.support import misbehaving_tasks as mt
from tests.support.fixtures import spawn_worker
from tests.support.processes import Child, wait_for
from tests.support.scheduler_support import worker_env

pytestmark = pytest.mark.services

SHORT = bucket_table().get("short")
#: Longest worker log line allowed (a 10 MB exception message was written whole, twice).
LONGEST_LINE = 20_000


@pytest.fixture(scope="module")
def worker(
    celery_app: Any, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Child, str]]:
    child, node = spawn_worker(
        celery_app,
        "short",
        tmp_path_factory.mktemp("mis"),
        concurrency=3,
        env=worker_env(pg_url),
        args=mt.INCLUDE,
    )
    yield child, node
    child.stop()


def message(do: str, user: str = "u-mis") -> dict[str, Any]:
    return {
        "id": f"{do}-{uuid.uuid4().hex[:8]}",
        "user_id": user,
        "bucket": "short",
        "payload": {"do": do},
    }


def send(task: Any, do: str, **options: Any) -> str:
    msg = message(do)
    task.apply_async((msg,), **options)
    return str(msg["id"])


def stored(celery_app: Any, task_id: str) -> dict[str, Any]:
    """The result backend's record of ``task_id``, as stored (nothing rebuilt)."""
    backend = celery_app.backend
    raw = backend.get(backend.get_key_for_task(task_id))
    return {"status": "PENDING"} if raw is None else dict(json.loads(raw))


def dead_letters(broker: Connection, celery_app: Any) -> dict[str, DeadMessage]:
    def error_of(task_id: str) -> str:
        meta = stored(celery_app, task_id)
        if meta["status"] != "FAILURE":
            return str(meta["status"])
        return f"{meta['result']['exc_type']}: {meta['result']['exc_message']}"

    return {d.args[0]["id"]: d for d in list_dead(broker, SHORT, error_of, limit=500)}


def wait_dead(
    broker: Connection, celery_app: Any, ids: set[str], timeout: float = 30
) -> dict[str, DeadMessage]:
    """Each of ``ids`` dead-lettered, with its last run's outcome stored (a retried run's
    RETRY may still be the one read just as its last copy is rejected)."""

    def settled() -> bool:
        dead = dead_letters(broker, celery_app)
        return all(i in dead and dead[i].error != "RETRY" for i in ids)

    wait_for(settled, timeout, f"dead letters of {sorted(ids)}")
    return dead_letters(broker, celery_app)


def still_serving(worker: tuple[Child, str], celery_app: Any) -> None:
    """The worker's main process is alive, answers, runs another user's job, and logged
    every outcome in short lines."""
    child, node = worker
    assert child.proc.poll() is None, child.log()[-3000:]
    assert celery_app.control.ping(destination=[node], timeout=2)
    other = send(mt.well, "well")
    wait_for(lambda: mt.runs(other) == 1, 20, "another user's job to run")
    longest = max(len(line) for line in child.log().splitlines())
    assert longest < LONGEST_LINE


def test_results_json_cannot_encode(worker: Any, broker: Connection, celery_app: Any) -> None:
    ignored = {do: send(mt.returns, do) for do in mt.RETURNS}
    kept, task_ids = {}, {}
    for do in mt.RETURNS:
        msg = message(do)
        kept[do], task_ids[do] = msg["id"], mt.returns_kept.apply_async((msg,)).id
    unencodable = {kept[do] for do in ("set", "object", "deep")}
    dead = wait_dead(broker, celery_app, unencodable)
    for mid in unencodable:
        assert dead[mid].reason == "rejected" and "EncodeError" in dead[mid].error
    wait_for(
        lambda: all(mt.runs(m) == 1 for m in [*ignored.values(), *kept.values()]),
        30,
        "every task to run",
    )
    for do in ("datetime", "big"):
        wait_for(
            lambda d=do: stored(celery_app, task_ids[d])["status"] == "SUCCESS",
            30,
            f"{do}'s stored result",
        )
        celery_app.backend.forget(task_ids[do])
    assert set(dead) == unencodable  # an ignored result is never encoded: all succeeded
    still_serving(worker, celery_app)


#: What each hostile exception's stored error names.
NAMES = {
    "needs_args": "NeedsArgs",
    "lock": "holds a lock",
    "socket": "holds a socket",
    "unprintable": "Unprintable",
    "huge": "ValueError",
    "group": "ExceptionGroup",
    "base": "Farewell",
    "keyboard": "KeyboardInterrupt",
    "system_exit": "SystemExit",
    "generator_exit": "GeneratorExit",
    "memory": "MemoryError",
    "sys_exit": "SystemExit",
    "recursion": "RecursionError",
}


def test_hostile_exceptions_and_exits_fail_one_run(
    worker: Any, broker: Connection, celery_app: Any
) -> None:
    stubborn = send(mt.stubborn, "stubborn", soft_time_limit=1, time_limit=2)
    ids = {do: send(mt.raises, do) for do in NAMES}
    os_exit = send(mt.raises, "os_exit")
    dead = wait_dead(broker, celery_app, set(ids.values()))
    for do, mid in ids.items():
        assert mt.runs(mid) == 1, do  # a failure, not a lost worker: never run again
        assert dead[mid].reason == "rejected", do
        assert NAMES[do] in dead[mid].error, (do, dead[mid].error)
        assert len(dead[mid].error) < 3 * 1000, do  # the 10 MB message is cut
    assert "(10485760 characters)" in dead[ids["huge"]].error
    # A process that ends itself (os._exit) or is ended at its hard limit after swallowing
    # the soft one: its pool child is replaced, the message delivered again up to the
    # delivery limit, then dead-lettered.
    dead = wait_dead(broker, celery_app, {os_exit, stubborn}, timeout=40)
    deliveries = settings().max_deliveries
    for mid in (os_exit, stubborn):
        assert dead[mid].reason == "delivery_limit" and mt.runs(mid) == deliveries
    assert "TaskMisbehaved" not in dead[stubborn].error  # the pool's exit, not the task's
    still_serving(worker, celery_app)


def test_mutated_messages_and_hostile_retries(
    worker: Any, broker: Connection, celery_app: Any, pg_url: str, use_store: Any
) -> None:
    use_store(pg_url)
    ids = {
        do: send(mt.reschedules, do)
        for do in (
            "no_user",
            "not_json",
            "twice",
            "retry_negative",
            "retry_past",
            "retry_forever",
            "retry_minus",
        )
    }
    refused = {
        "no_user": "user_id: missing",
        "not_json": "payload: not a JSON value",
        "retry_negative": "countdown must be a finite number >= 0, got -1",
        "retry_minus": "MaxRetriesExceededError",
    }
    budget = {"retry_past", "retry_forever"}  # retries stop at the delivery budget
    dead = wait_dead(broker, celery_app, {ids[d] for d in (*refused, *budget)})
    for do, reason in refused.items():
        assert reason in dead[ids[do]].error and mt.runs(ids[do]) == 1, do
    for do in budget:
        assert "MaxRetriesExceededError" in dead[ids[do]].error, do
        assert mt.runs(ids[do]) == settings().max_deliveries, do
    control = JobControl(DueStore.open(pg_url))
    for do in ("no_user", "not_json"):
        assert control.get(ids[do]) is None, do  # refused: nothing written
    twice = control.get(ids["twice"])  # one row, the later call's due time
    assert twice is not None and twice.state == "scheduled"
    assert twice.due_at > datetime.now(UTC) + timedelta(seconds=1000)
    assert ids["twice"] not in dead_letters(broker, celery_app)
    still_serving(worker, celery_app)


def test_a_dispatched_run_that_exits_is_due_again_soon(
    worker: Any,
    broker: Connection,
    celery_app: Any,
    fresh_pg_url: str,
    use_store: Any,
    tmp_path: Path,
) -> None:
    """The job's row is not left to its lease (nor its copy run again and again): the
    failed run makes it due again in seconds, as any failed run does."""
    use_store(fresh_pg_url)
    store = DueStore.open(fresh_pg_url)
    msg, twice = message("system_exit"), message("twice")
    mt.raises.apply_async((msg,), countdown=3600)
    mt.reschedules.apply_async((twice,), countdown=3600)
    far = datetime.now(UTC) + timedelta(hours=2)
    claimed: list[Any] = []
    store.dispatch("short", 10, far, far + timedelta(hours=1), claimed.extend)
    assert len(claimed) == 2
    with broker.Producer() as producer:
        for out in map(task_message, claimed):  # as the scheduler publishes them
            producer.publish(
                out.body,
                exchange="",
                routing_key=SHORT.queue,
                headers=out.headers,
                content_type="application/json",
                content_encoding="utf-8",
                correlation_id=out.correlation_id,
                serializer=None,
            )
    dead = wait_dead(broker, celery_app, {msg["id"]})
    assert "SystemExit" in dead[msg["id"]].error and mt.runs(msg["id"]) == 1
    control = JobControl(store)
    job = control.get(msg["id"])
    assert job is not None and job.args and json.loads(job.args)
    assert job.due_at < datetime.now(UTC) + timedelta(seconds=30)  # not the 1 h lease
    # Its own row rescheduled twice in one run: the first holds, the second is refused
    # in one line saying so (it was logged as a stale copy's).
    wait_for(
        lambda: getattr(control.get(twice["id"]), "state", None) == "scheduled",
        20,
        "the twice-rescheduled job's row",
    )
    again = control.get(twice["id"])
    assert again is not None and mt.runs(twice["id"]) == 1
    soon = datetime.now(UTC)
    assert soon + timedelta(seconds=500) < again.due_at < soon + timedelta(seconds=700)
    assert twice["id"] not in dead_letters(broker, celery_app)
    wait_for(
        lambda: f"job {twice['id']}: this run already rescheduled it" in worker[0].log(),
        10,
        "the second reschedule's refusal",
    )
    assert f"job {twice['id']}: not rescheduled, token" not in worker[0].log()
    still_serving(worker, celery_app)
