"""The sender's lease: short, renewed by a heartbeat while the sender runs.

A destination's sender holds a lease of RECUR_SENDER_LEASE seconds (3 by
default), renewed every third of it by a background thread for as long as
the sender is working, including while a POST is in flight. A live sender
keeps it however long a send takes; a killed one stops renewing, so its
destinations are taken over within one lease instead of after the longest a
send could take. A hung sender (one step running far longer than any send
with its retries can) stops being renewed too.

Every lease comes with a fence: a number that grows with each lease of the
destination, sent as ``X-Recur-Fence``. A sender paused past its lease can
still finish one POST it had started; a receiver that refuses a fence lower
than one it already accepted drops that late send, and one that only drops
sequence numbers it already has (``Idempotency-Key``) drops it too.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from types import TracebackType

from config.errors import RecurError
from config.settings import Settings

log = logging.getLogger(__name__)


def lease_ms(cfg: Settings) -> int:
    """How long one renewal of the sender lease lasts."""
    return int(cfg.sender_lease * 1000)


def step_limit_seconds(cfg: Settings) -> float:
    """The longest one sender step may take (a send with all its retries and the
    waits between them, plus slack): past it the sender is hung, not slow."""
    return (cfg.send_retries + 1) * (cfg.send_timeout + cfg.send_backoff_max) + 5


def holder_token() -> str:
    """A sender's token: unique, and naming its process (``pid@host:random``) so an
    operator (or a test) can tell which process holds a destination."""
    return f"{os.getpid()}@{socket.gethostname()}:{uuid.uuid4().hex}"


def holder_pid(token: str) -> int:
    """The process id a holder token names."""
    return int(token.partition("@")[0])


class Heartbeat:
    """Renews a lease every third of its length until stopped.

    ``renew()`` extends the lease and says whether it was still ours; once it
    was not, the heartbeat stops and ``lost`` is set. Call ``step()`` when the
    sender starts a new step, so a step stuck past ``step_limit`` stops being
    renewed.
    """

    def __init__(self, renew: Callable[[], bool], cfg: Settings) -> None:
        self.renew = renew
        self.every = cfg.sender_lease / 3
        self.step_limit = step_limit_seconds(cfg)
        self.step_started = time.monotonic()
        self.lost = False
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.beat, name="sender-lease", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stopped.set()
        self.thread.join()

    def step(self) -> None:
        self.step_started = time.monotonic()

    def beat(self) -> None:
        while not self.stopped.wait(self.every):
            if time.monotonic() - self.step_started > self.step_limit:
                log.warning("sender step running for over %.0fs: no longer renewing its "
                            "lease, another sender takes over", self.step_limit)
                return
            try:
                if not self.renew():
                    self.lost = True
                    return
            except RecurError as exc:  # Redis blinked: the next beat tries again
                log.warning("could not renew the sender lease (%s); retrying in %.1fs",
                            exc, self.every)
