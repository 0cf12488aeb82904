"""What the lanes of one dispatch share: the bucket, the stamps, and the room.

With ``RECUR_DRAIN_THREADS`` > 1 the drain (scheduler/drain.py) fills one
bucket's queue from several lanes at once, each on its own database and
broker connection; they take their batches from one :class:`Budget`, so
together they never dispatch more than the room they were given.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from config.buckets import Bucket


@dataclass(frozen=True)
class Lane:
    """What every lane of one dispatch shares."""

    bucket: Bucket
    budget: Budget
    now: datetime
    lease_until: datetime
    early: bool
    cap: int | None
    #: Whether the claims take rows fair share dealt into rounds first (fair_share.py).
    dealt: bool = False


class Budget:
    """The room the lanes of one dispatch share: never more than ``room`` rows."""

    def __init__(self, room: int) -> None:
        self.left = room
        self._lock = threading.Lock()

    def take(self, batch: int) -> int:
        """Rows for the next batch (0: the room is used, or rows ran out)."""
        with self._lock:
            want = min(batch, self.left)
            self.left -= want
            return want

    def finish(self) -> None:
        """A batch came back short: nothing more is due, stop every lane."""
        with self._lock:
            self.left = 0
