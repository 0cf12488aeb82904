"""recur tasks of the I/O benchmark (workers load them with RECUR_IMPORTS=bench.io_tasks).

Each run makes one request to the benchmark server (100 ms), records itself and
reschedules its message ``EVERY`` seconds later (a due-jobs row update).
"""

from __future__ import annotations

from typing import Any

from bench.io_client import async_client, sync_get
from bench.io_record import EVERY, now, record_async, record_sync
from tasks.app import app
from tasks.base import MessageTask


def next_message(message: Any) -> tuple[Any]:
    return ({**message, "payload": {"due": now() + EVERY}},)


@app.task(bind=True, base=MessageTask, name="bench.io_async")
async def io_async(self: MessageTask, message: Any) -> None:
    """One request on the worker's event loop (the I/O bucket)."""
    started = now()
    await async_client().get()
    await record_async(message["payload"]["due"], started)
    self.apply_async(next_message(message), countdown=EVERY)


@app.task(bind=True, base=MessageTask, name="bench.io_sync")
def io_sync(self: MessageTask, message: Any) -> None:
    """The same request, blocking (the short bucket's prefork processes)."""
    started = now()
    sync_get()
    record_sync(message["payload"]["due"], started)
    self.apply_async(next_message(message), countdown=EVERY)


@app.task(bind=True, base=MessageTask, name="bench.io_noop_sync")
def io_noop_sync(self: MessageTask, message: Any) -> None:
    """The no-op cycle as the peers' harness runs it: a plain (sync) task on the I/O
    bucket's threads, no event loop."""
    record_sync(message["payload"]["due"], now())
    self.apply_async(next_message(message), countdown=EVERY)


@app.task(bind=True, base=MessageTask, name="bench.io_noop")
async def io_noop(self: MessageTask, message: Any) -> None:
    """recur's own full cycle on the same worker, without the request."""
    started = now()
    await record_async(message["payload"]["due"], started)
    self.apply_async(next_message(message), countdown=EVERY)
