"""Fair share between users in each bucket: when more is due than the bucket runs, each
user with due work gets its turn before any user gets another.

Nothing changes while a bucket keeps up: the claim takes due rows in due order
(``ix_due_jobs_scheduled``) and a producer's write costs what it did. When due rows
are left after a fill (the bucket is behind: one index probe), the scheduler *looks*
at the bucket before its next fill, at most every ``LOOK_EVERY`` s: it reads the head
(the first ``HEAD_ROWS`` due rows in claim order, with their users: one range of the
drain index). When one
user holds more than ``RECUR_FAIR_SHARE_QUOTA`` of them it dominates the head, and
other users' rows may wait behind its backlog: the look reads on past it (a cursor
that the next look resumes from, so each due row is read once per backlog) and
*deals* the rows it found into rounds (``turn`` = 1, 2, ...): round r holds each
user's r-th slice of at most a quota, in the user's own due order, the dominant
user's front rows included. Dealing stops when one user is left: the dominant
user's bulk stays where it is, in due order, and costs no write. The claim takes
the rounds first (by round, then due time), then the rows not dealt, so the quiet
users run within a look of coming due and the noisy user still gets every idle slot.

Costs: 0 bytes per row (the column sits in the row's alignment padding), nothing
on the write path; the claim asks for dealt rows only while some exist (an index
probe every ``PROBE_EVERY`` s tells); a look reads ``HEAD_ROWS`` index entries and
their users' ids, plus the rows due since the last look; each row dealt is written
once more (the light users' rows and the dominant user's slices beside them, never
its bulk). Every other write (a run rescheduling the row, a producer writing it
again, an operator moving it) puts the row back at turn 0. Several schedulers: each
has its own cursor and remembers the rounds it gave; a user may get a slice per
scheduler in one round.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from config.errors import ServiceUnavailable, StoreError
from scheduler.fair_metrics import record_look
from scheduler.store.fair import EPOCH, Due, FairRows

log = logging.getLogger("recur.scheduler")

#: Due rows a look weighs at the head of the bucket.
HEAD_ROWS = 2000
#: Due rows a look reads on past a dominant user (it goes on from there next look).
SCAN_ROWS = 100_000
#: Rows one read of the scan takes.
SCAN_CHUNK = 10_000
#: Rows one look deals at most.
DEAL_ROWS = 20_000
#: Seconds between two looks at a bucket that is behind; seconds one look reads at most
#: (the look comes before a fill: the low watermark's messages keep the workers busy).
LOOK_EVERY = 0.5
LOOK_SECONDS = 0.3
#: Seconds between two probes for dealt rows (the claim asks for them while some exist).
PROBE_EVERY = 1.0
TICK = timedelta(microseconds=1)


@dataclass
class Slot:
    """Where a user's next dealt row goes: its round and the rows in it so far."""

    turn: int
    filled: int = 0


def plan_rounds(rows: list[tuple[str, str | None]], quota: int, base: int,
                known: dict[str | None, Slot], budget: int) -> dict[str, int]:
    """Key -> round for ``rows`` (in claim order), round by round from ``base``: each
    user's next slice of at most ``quota`` in its slot's round (``known``: rows it was
    dealt before), while at least two users have rows left and fewer than ``budget``
    were dealt. ``known`` is updated."""
    queues: dict[str | None, deque[str]] = {}
    for key, user in rows:
        queues.setdefault(user, deque()).append(key)
    slots = {u: known[u] if u in known and known[u].turn >= base else Slot(base)
             for u in queues}
    turns: dict[str, int] = {}
    pending = [u for u in queues if queues[u]]
    while len(pending) >= 2 and len(turns) < budget:
        turn = min(slots[u].turn for u in pending)
        for user in [u for u in pending if slots[u].turn == turn]:
            slot, keys = slots[user], queues[user]
            while keys and slot.filled < quota and len(turns) < budget:
                turns[keys.popleft()] = turn
                slot.filled += 1
            if slot.filled >= quota:
                slots[user] = Slot(turn + 1)
            known[user] = slots[user]
        pending = [u for u in pending if queues[u]]
    return turns


@dataclass
class _Bucket:
    """What a scheduler knows of one bucket's fair share."""

    #: Whether the claim asks for dealt rows, and when to probe for them again.
    dealt: bool = True
    probe_at: float = 0.0
    #: Whether due rows were left after the last fill, and when to look again.
    behind: bool = False
    look_at: float = 0.0
    #: Where the next look reads on from (None: from the head's end).
    cursor: datetime | None = None
    known: dict[str | None, Slot] = field(default_factory=dict)
    undealt: bool = False


class FairShare:
    """One scheduler's fair share: which claims ask for dealt rows, and the looks."""

    def __init__(self, rows: FairRows, enabled: bool, quota: int) -> None:
        self.rows = rows
        self.enabled = enabled
        self.quota = quota
        self._buckets: dict[str, _Bucket] = {}

    def _state(self, bucket: str) -> _Bucket:
        return self._buckets.setdefault(bucket, _Bucket())

    def before_fill(self, bucket: str, now: datetime) -> bool:
        """Before a fill: look if the bucket was behind at the last one (at most every
        ``LOOK_EVERY`` s); whether its claims ask for dealt rows (while some exist)."""
        state = self._state(bucket)
        if not self.enabled and not state.undealt:  # rows dealt while it was on: due order
            state.undealt = True
            if moved := self.rows.undeal(bucket):
                log.info("%s: fair share is off: %d dealt row(s) back in due order",
                         bucket, moved)
        if self.enabled and state.behind and time.monotonic() >= state.look_at:
            state.look_at = time.monotonic() + LOOK_EVERY
            try:
                self.look(bucket, now)
            except ServiceUnavailable:
                raise
            except StoreError as exc:  # fair share is an order, never a reason to stop
                log.warning("%s: fair share: could not deal rows (%s); due order until the "
                            "next look", bucket, exc)
        if time.monotonic() >= state.probe_at:
            state.probe_at = time.monotonic() + PROBE_EVERY
            state.dealt = self.rows.has_dealt(bucket)
        return state.dealt

    def after_fill(self, bucket: str, sent: int, now: datetime) -> None:
        """After a fill dispatched ``sent`` due rows: is the bucket behind (due rows left:
        one index probe)?"""
        state = self._state(bucket)
        state.behind = bool(self.enabled and sent
                            and self.rows.window(bucket, now, EPOCH, 1, whole=False))

    def look(self, bucket: str, now: datetime) -> int:
        """Weigh the head; if a user dominates it, read on past it and deal what was
        found into rounds. Returns the rows dealt."""
        state = self._state(bucket)
        rounds = self.rows.rounds(bucket)
        if rounds is None:
            state.known.clear()
        head = self.rows.window(bucket, now, EPOCH, HEAD_ROWS, whole=False)
        counts = Counter(user for _, user, _ in head)
        dominant = {u for u, n in counts.items() if n > self.quota}
        if not dominant:
            state.cursor = None
            record_look(bucket, counts, len(head), 0, rounds)
            return 0
        start = head[-1][2] + TICK
        if state.cursor is not None and state.cursor > start:
            start = state.cursor
        scan = self._scan(bucket, now, start)
        base = rounds.lowest if rounds else 1
        state.known = {u: s for u, s in state.known.items() if s.turn >= base}
        turns = plan_rounds([(k, u) for k, u, _ in head + scan], self.quota, base,
                            state.known, DEAL_ROWS)
        moved = self.rows.deal(bucket, turns)
        # Go on next time from the first row left behind of a user that is not at the
        # head (the dominant users' bulk comes to the head by itself).
        left = [due for key, user, due in scan if key not in turns and user not in dominant]
        state.cursor = left[0] if left else (scan[-1][2] + TICK if scan else start)
        if moved:
            state.dealt = True
            log.debug("%s: behind, %d user(s) dominate the head: dealt %d due row(s) into "
                      "rounds (%d read past them)", bucket, len(dominant), moved, len(scan))
        record_look(bucket, counts, len(head), moved, self.rows.rounds(bucket) if moved
                    else rounds)
        return moved

    def _scan(self, bucket: str, now: datetime, start: datetime) -> list[Due]:
        """Due rows from ``start`` on, ``SCAN_CHUNK`` at a time, at most ``SCAN_ROWS``
        or ``LOOK_SECONDS``."""
        found: list[Due] = []
        deadline = time.monotonic() + LOOK_SECONDS
        while len(found) < SCAN_ROWS and time.monotonic() < deadline:
            chunk = self.rows.window(bucket, now, start, SCAN_CHUNK)
            if not chunk:
                break
            found += chunk
            start = chunk[-1][2] + TICK
        return found
