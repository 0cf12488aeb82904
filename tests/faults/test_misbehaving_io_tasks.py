"""Async user code that misbehaves on the io bucket's event loop (tasks/aio.py): one
coroutine may cost the others of its process no more than the loop time it takes, its
message is retried or dead-lettered with the reason named, and the worker (and its loop)
survive. One io worker serves the whole module; every test uses its own message ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from config.buckets_in_use import bucket_table
from routing.deadletter import list_dead
from tests.support import misbehaving_io_tasks as mb
from tests.support.fixtures import spawn_worker
from tests.support.processes import Child, wait_for

pytestmark = pytest.mark.services

ENV = {"RECUR_IMPORTS": "tests.support.misbehaving_io_tasks"}


@pytest.fixture(scope="module")
def io_worker(celery_app: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Child]:
    with celery_app.connection_for_write() as conn, conn.channel() as channel:
        for name in ("io", "io.dead"):
            channel.queue_purge(name)
    child, _ = spawn_worker(
        celery_app, "io", tmp_path_factory.mktemp("mbio"), concurrency=50, env=ENV
    )
    yield child
    child.stop()
    assert child.proc.returncode == 0, child.log()[-3000:]  # it survived everything


def msg(mid: str, user: str = "u-mbio", **payload: Any) -> dict[str, Any]:
    return {"id": mid, "user_id": user, "bucket": "io", "payload": payload}


def runs(mid: str, ev: str) -> list[dict[str, Any]]:
    return [r for r in mb.read_runs() if r["id"] == mid and r["ev"] == ev]


def dead(celery_app: Any) -> dict[str, Any]:
    def error_of(task_id: str) -> str:
        result = celery_app.AsyncResult(task_id)
        return repr(result.result) if result.state == "FAILURE" else ""

    with celery_app.connection_for_write() as conn:
        found = list_dead(conn, bucket_table().get("io"), error_of)
    return {d.args[0]["id"]: d for d in found}


def wait_dead(celery_app: Any, ids: set[str], timeout: float = 30) -> dict[str, Any]:
    wait_for(lambda: ids <= set(dead(celery_app)), timeout, f"{sorted(ids)} dead-lettered")
    return dead(celery_app)


def test_a_blocked_loop_is_named_and_keeps_every_lease(io_worker: Child) -> None:
    """A CPU loop holds the event loop for 3 s: the watchdog names the task and its line
    in one warning; a locked neighbour's 1 s lease is extended meanwhile (by a thread),
    so it keeps its lock and runs once."""
    run = uuid.uuid4().hex[:6]
    locked, plain, spin = f"{run}-locked", f"{run}-plain", f"{run}-spin"
    limits = {"soft_time_limit": 20, "time_limit": 30}
    mb.locked_victim.apply_async((msg(locked, user=f"{run}-u", s=1.5),), **limits)
    mb.victim.apply_async((msg(plain, s=1.5),), **limits)
    wait_for(lambda: bool(runs(locked, "start") and runs(plain, "start")), 20, "both start")
    mb.block.apply_async((msg(spin, s=3, spin=True),), **limits)
    wait_for(lambda: bool(runs(locked, "end") and runs(plain, "end")), 30, "both to end")
    (end,) = runs(spin, "end")
    assert runs(locked, "end")[0]["t"] > end["t"]  # it did wait for the loop
    log = io_worker.log()
    assert "event loop blocked for 1." in log and "by task tests.mbio.block (block at" in log
    assert "misbehaving_io_tasks.py:" in log and "event loop free again after" in log
    assert "lost by its holder" not in log  # no lease_lost
    assert len(runs(locked, "start")) == len(runs(plain, "start")) == 1
    assert runs(locked, "start")[0]["fence"] == runs(locked, "end")[0]["fence"]


def test_a_run_given_up_on_a_blocked_loop_runs_once_later(
    io_worker: Child, celery_app: Any
) -> None:
    """``time.sleep(3)`` on the loop: runs of 1.5 s submitted meanwhile reach their 2 s
    hard limit before the loop can start them. Their messages are delivered again and
    each job runs once, after the loop is free: a given-up run never starts late, the
    copy delivered again has its whole 2 s from its start on the loop (not from its wait
    for the loop), and a locked job keeps its place (not dropped as "already ran")."""
    run = uuid.uuid4().hex[:6]
    sleeper, locked, plain = f"{run}-sleep", f"{run}-locked", f"{run}-plain"
    mb.block.apply_async((msg(sleeper, s=3),), soft_time_limit=20, time_limit=30)
    wait_for(lambda: bool(runs(sleeper, "start")), 20, "the blocking task to start")
    limits = {"soft_time_limit": 1.8, "time_limit": 2}
    mb.locked_victim.apply_async((msg(locked, user=f"{run}-u", s=1.5),), **limits)
    mb.victim.apply_async((msg(plain, s=1.5),), **limits)
    wait_for(lambda: bool(runs(locked, "end") and runs(plain, "end")), 30, "both to end")
    (slept,) = runs(sleeper, "end")
    for mid in (locked, plain):
        (start,), (end,) = runs(mid, "start"), runs(mid, "end")
        assert slept["t"] <= start["t"] < end["t"] and start["redelivered"], mid
    assert locked not in dead(celery_app) and plain not in dead(celery_app)
    assert "it already ran (a second copy)" not in io_worker.log()


def test_base_exceptions_and_a_stopped_loop_fail_only_their_own_task(
    io_worker: Child, celery_app: Any
) -> None:
    """A KeyboardInterrupt or SystemExit of a coroutine, and ``loop.stop()``, used to end
    the loop's thread: every later async task of the process then hung until its hard
    limit. Now each fails its own task, dead-lettered naming it (GeneratorExit too), and
    the loop runs on; a background task's KeyboardInterrupt is logged."""
    run = uuid.uuid4().hex[:6]
    kinds = ("KeyboardInterrupt", "SystemExit", "GeneratorExit")
    for kind in kinds:
        mb.raises.apply_async((msg(f"{run}-{kind}", kind=kind),))
    mb.loop_abuse.apply_async((msg(f"{run}-stop", how="stop"),))
    mb.orphan.apply_async((msg(f"{run}-orphan", after=0.1, kind="KeyboardInterrupt"),))
    wait_for(lambda: bool(runs(f"{run}-stop", "end")), 20, "loop.stop() to return")
    wait_for(lambda: bool(runs(f"{run}-orphan", "orphan_raises")), 20, "the orphan to raise")
    after = f"{run}-after"
    mb.victim.apply_async((msg(after, s=0.1),), soft_time_limit=5, time_limit=10)
    found = wait_dead(celery_app, {f"{run}-{kind}" for kind in kinds})
    for kind in kinds:
        gone = found[f"{run}-{kind}"]
        assert gone.reason == "rejected"
        assert f'TaskMisbehaved("the task raised {kind}(' in gone.error, gone.error
    wait_for(lambda: bool(runs(after, "end")), 20, "an async task after them to run")
    log = io_worker.log()
    assert "an async task stopped it (loop.stop()); the loop runs on" in log
    # the awaited ones never reach the loop: one line, the orphan's
    assert log.count("raised out of a task nobody awaits") == 1
    assert "KeyboardInterrupt raised out of a task nobody awaits: from user code" in log


def test_other_misbehaviour_is_dead_lettered_naming_it(io_worker: Child, celery_app: Any) -> None:
    """A coroutine that never returns (cancelled at its soft limit), asyncio.run() or
    loop.close() inside the loop, an unencodable return value, a background task that
    raises later, a sync function on the io bucket, and a coroutine returned unawaited
    (it used to "succeed" with the work never done)."""
    run = uuid.uuid4().hex[:6]
    mb.forever.apply_async((msg(f"{run}-forever"),), soft_time_limit=1, time_limit=5)
    mb.loop_abuse.apply_async((msg(f"{run}-run", how="run"),))
    mb.loop_abuse.apply_async((msg(f"{run}-close", how="close"),))
    mb.loop_abuse.apply_async((msg(f"{run}-replace", how="replace"),))
    mb.returns_object.apply_async((msg(f"{run}-object"),))
    mb.returns_coroutine.apply_async((msg(f"{run}-coro"),))
    orphan = mb.orphan.apply_async((msg(f"{run}-orphan", after=0.2),))
    mb.sync_on_io.apply_async((msg(f"{run}-sync", s=0.1),))
    expected = {
        "forever": "SoftTimeLimitExceeded('soft time limit (1s) exceeded')",
        "run": "asyncio.run() cannot be called from a running event loop",
        "close": "Cannot close a running event loop",
        "object": "is not JSON serializable",
        "coro": "returned a coroutine it never awaited (_never_awaited): await it",
    }
    found = wait_dead(celery_app, {f"{run}-{what}" for what in expected})
    for what, error in expected.items():
        assert found[f"{run}-{what}"].reason == "rejected", what
        assert error in found[f"{run}-{what}"].error, (what, found[f"{run}-{what}"].error)
    assert runs(f"{run}-forever", "cancelled") and not runs(f"{run}-coro", "inner_ran")
    orphan_line = (
        "event loop: Task exception was never retrieved: _fail_later (started by task "
        f"tests.mbio.orphan, task id {orphan.id}): RuntimeError: orphan of {run}-orphan fails"
    )
    wait_for(lambda: orphan_line in io_worker.log(), 10, "the orphan's error to be logged")
    for mid in (f"{run}-replace", f"{run}-sync", f"{run}-orphan"):
        assert len(runs(mid, "end")) == 1 and mid not in dead(celery_app), mid


def test_a_coroutine_that_ignores_its_cancel_is_named_when_it_ends(
    io_worker: Child, celery_app: Any
) -> None:
    """Swallowing every CancelledError: given up at each hard limit and delivered again
    until the delivery limit dead-letters it; a given-up coroutine cannot be killed, so
    when one ends an error says it ran past its hard limit."""
    mid = f"{uuid.uuid4().hex[:6]}-stubborn"
    mb.stubborn.apply_async((msg(mid, s=2),), soft_time_limit=0.5, time_limit=1)
    found = wait_dead(celery_app, {mid})
    assert found[mid].reason == "delivery_limit"
    assert "TimeLimitExceeded('hard time limit (1s) exceeded')" in found[mid].error
    wait_for(lambda: len(runs(mid, "end")) == len(runs(mid, "start")), 10, "every copy to end")
    assert "task tests.mbio.stubborn: its coroutine ended only 2." in io_worker.log()
