"""The threads pool (the io bucket's), with a cold shutdown that ends.

Celery's threads pool cannot stop a running thread. A cold shutdown (SIGQUIT, a second
Ctrl-C, SIGQUIT during a warm shutdown) asked it to kill each running task anyway and
got NotImplementedError (a traceback in the worker's log), then waited for every running
task as a warm shutdown does: up to the hard time limit of each async run (45 s on io),
for ever for a sync task that hangs, and the process's exit joined the threads again.

Here a cold shutdown means what it means for prefork, whose children are killed: the
runs still in flight are given up unacknowledged, and the broker hands their messages
back when the connection closes (the same as ``kill -9``: a stored job's copy whose run
already settled is a stale copy, dropped by its token). A warm shutdown (SIGTERM, one
Ctrl-C) still waits for every run to finish, settle and be acknowledged.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from celery.concurrency.thread import TaskPool as ThreadsPool
from celery.worker import state

log = logging.getLogger(__name__)

#: Seconds between two looks at the cold-shutdown flag while a warm shutdown waits.
JOIN_STEP = 0.1


class HandBackThreadsPool(ThreadsPool):  # type: ignore[misc]
    """Celery's threads pool; a cold shutdown stops waiting for the running threads."""

    def terminate_job(self, pid: Any, signal: Any = None) -> None:
        """A thread cannot be killed: its run is left unacknowledged (the process
        exits without it: :func:`leave_if_cold`), so the broker hands it back."""

    def on_stop(self) -> None:
        """Wait for the running tasks (a warm shutdown), until a cold shutdown begins."""
        self.executor.shutdown(wait=False, cancel_futures=True)
        while self.running() and state.should_terminate is None:
            next(t for t in self.threads() if t.is_alive()).join(JOIN_STEP)

    def on_terminate(self) -> None:
        """A cold shutdown: start no queued task; idle threads end, busy ones are left."""
        self.executor.shutdown(wait=False, cancel_futures=True)

    def threads(self) -> list[Any]:
        return list(self.executor._threads)  # Celery's own _get_info reads it too

    def running(self) -> int:
        """Pool threads still alive (a run in flight; idle ones end at shutdown)."""
        return sum(1 for t in self.threads() if t.is_alive())


def leave_if_cold(pool: Any, exitcode: Any) -> None:
    """After the worker stopped: on a cold shutdown with runs still in flight, exit now
    (the interpreter would otherwise join their threads: wait for every run)."""
    if not isinstance(pool, HandBackThreadsPool) or state.should_terminate is None:
        return
    pool.on_terminate()
    deadline = time.monotonic() + JOIN_STEP  # idle threads end at once
    for thread in pool.threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    running = pool.running()
    if not running:
        return
    log.warning(
        "cold shutdown: %d run(s) still in flight left unacknowledged; the broker "
        "hands their messages back",
        running,
    )
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is not None:
            stream.flush()
    logging.shutdown()
    os._exit(exitcode if isinstance(exitcode, int) and exitcode else 1)
