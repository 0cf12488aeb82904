"""How ``recur scheduler`` stops: SIGTERM/SIGINT finish the batch in hand, a second one
(or :data:`STOP_GRACE` seconds) gives it up.

The batch in hand is claimed rows whose messages are being published: the rows stay
locked until the broker confirms every message, and are marked dispatched only then.
Against a stalled broker (it accepts bytes but answers nothing: paused by an alarm, a
network that drops packets) a stopping scheduler waited for the whole confirm timeout
(30 s), or for ever in a queue-depth read, whatever signals followed. Now a stop that
gives up cuts every broker connection of the process (shuts its socket down), so each
wait on it ends at once with an error, and the drain loop, which sees the stop, exits;
if something still waits (a connection being opened, the database) the process exits
:data:`EXIT_GRACE` seconds later anyway, as a crash would.

Giving a batch up loses nothing: its transaction rolls back, so its rows stay due with
their old dispatch token and the next pass of any scheduler dispatches them again; the
copies already published carry the token that was never committed, and a worker drops
each as a stale copy (tasks/settle.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("recur.scheduler")

#: Seconds the batch in hand may take after the first stop signal before it is given up.
STOP_GRACE = 3.0
#: Seconds after giving up before the process exits whatever it is still waiting for.
EXIT_GRACE = 2.0
#: Longest single wait for broker frames, so that a stop is noticed within it.
WAIT_STEP = 0.25


class Stop:
    """The process's stop request, shared by the drain loop and its publishers."""

    def __init__(self) -> None:
        #: Set by the first signal: stop after the batch in hand.
        self.requested = threading.Event()
        #: Set when the batch in hand is given up (a second signal, or STOP_GRACE).
        self.given_up = threading.Event()
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def signal(self) -> bool:
        """Record one stop signal; whether it was the second (or a later) one."""
        if self.requested.is_set():
            self.give_up()
            return True
        self.requested.set()
        timer = threading.Timer(STOP_GRACE, self.give_up)
        timer.daemon = True
        timer.start()
        return False

    def watch(self, connection: Any) -> None:
        """A broker connection (py-amqp's) to cut if the stop gives up."""
        with self._lock:
            self._connections.add(connection)
        if self.given_up.is_set():
            cut(connection)

    def give_up(self) -> None:
        """Give up the batch in hand: cut every broker connection (once)."""
        with self._lock:
            if self.given_up.is_set():
                return
            self.given_up.set()
            connections = list(self._connections)
        log.info(
            "stopping now: %d broker connection(s) cut; a batch in hand is given up, its "
            "rows stay due (its copies already sent are stale and dropped)",
            len(connections),
        )
        for connection in connections:
            cut(connection)
        timer = threading.Timer(EXIT_GRACE, leave)
        timer.daemon = True
        timer.start()

    def wait_for_confirms(
        self, pending: Callable[[], int], connection: Any, timeout: float
    ) -> None:
        """Read the broker's frames until ``pending()`` is 0; TimeoutError (as the socket's
        own) after ``timeout`` seconds, sooner once the stop gave up."""
        deadline = time.monotonic() + timeout
        while count := pending():
            left = deadline - time.monotonic()
            if left <= 0 or self.given_up.is_set():
                raise TimeoutError(
                    f"{count} messages unconfirmed after {timeout:.0f}s"
                    if left <= 0
                    else f"stopping: gave up waiting for {count} confirms"
                )
            # in steps: a stop is seen within one (socket.timeout: nothing came in it)
            with contextlib.suppress(TimeoutError):
                connection.drain_events(timeout=min(left, WAIT_STEP))


def leave() -> None:
    """The last resort: something still waits (a broker connection being opened, the
    database) :data:`EXIT_GRACE` seconds after the stop gave up. Exit now, as a crash
    would: a crashed scheduler loses nothing (its open transactions roll back)."""
    log.warning("stopping: still busy %.0fs after giving up; exiting now", EXIT_GRACE)
    logging.shutdown()
    os._exit(0)


def cut(connection: Any) -> None:
    """Shut a py-amqp connection's socket down: a thread blocked reading or writing it
    returns at once with an error, and closing it waits for nothing."""
    sock = getattr(getattr(connection, "transport", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
