"""Wake a threads-pool worker's event loop often while it has tasks, not while it idles.

A pool thread that finished a task queues its late ack for the consumer's event loop,
which runs it only when it next wakes: on broker traffic or a timer, up to a second
later (celery/celery#6941; kombu 5.7's hub also wakes on such a call, the timer keeps
earlier versions prompt). Meanwhile the message counts against the prefetch window, so
with the io bucket's 200 threads the worker sat with 200 finished, unacknowledged
messages and ran about 100 tasks a second. A no-op timer every ACK_FLUSH_INTERVAL bounds
the delay; it ran always, and 100 wake-ups a second were 1 % of a core for a worker with
nothing to do. Now it runs fast while a task is received or running (and a moment after,
for the last acks), then once a second; a task received switches it back to fast at once.
"""

from __future__ import annotations

from typing import Any

from celery import signals
from celery.concurrency.thread import TaskPool as ThreadsPool
from celery.worker import state

#: Seconds between two wake-ups while tasks are in flight.
ACK_FLUSH_INTERVAL = 0.01
#: Seconds between two wake-ups of a worker with no task (a safety net only).
IDLE_INTERVAL = 1.0
#: Fast wake-ups after the last task left, so its queued ack is sent promptly.
LINGER = 10


class AckFlusher:
    """The self-rearming timer of one consumer's event loop."""

    def __init__(self, timer: Any) -> None:
        self.timer, self.entry, self.quiet = timer, None, 0

    def tick(self) -> None:
        busy = bool(state.reserved_requests) or bool(state.active_requests)
        self.quiet = 0 if busy else self.quiet + 1
        self.arm(ACK_FLUSH_INTERVAL if self.quiet <= LINGER else IDLE_INTERVAL)

    def arm(self, delay: float) -> None:
        if self.entry is not None:
            self.entry.cancel()
        self.entry = self.timer.call_after(delay, self.tick)

    def on_received(self, **_: Any) -> None:
        """A task arrived (in the event loop's thread): wake often again, from now."""
        if self.quiet > LINGER:
            self.quiet = 0
            self.arm(ACK_FLUSH_INTERVAL)


def flush_acks_often(consumer: Any) -> AckFlusher | None:
    """Start the flusher on a threads-pool worker's consumer (None: another pool)."""
    if not isinstance(consumer.pool, ThreadsPool):
        return None
    flusher = AckFlusher(consumer.timer)
    signals.task_received.connect(flusher.on_received, weak=False)
    flusher.arm(ACK_FLUSH_INTERVAL)
    return flusher
