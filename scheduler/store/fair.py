"""The due-jobs store's side of fair share: claim dealt rows, deal rows back, read it.

The policy (when to deal, which user goes to which round) is the scheduler's
(scheduler/fair_share.py); here are the statements it runs, each bounded by an
index range (fair_queries.py), and what ``recur status`` reads of it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scheduler.store import fair_queries as q
from scheduler.store.base import StoreCore
from scheduler.store.records import Execute

#: Counter (due_counters) of rows the schedulers dealt into rounds, per bucket.
DEALT = "fair_dealt"
#: Dealt rows one transaction puts back in due order.
UNDEAL_BATCH = 10_000
#: A window from the start of time.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def claim_rows(run: Execute, claim: Any, params: dict[str, Any], dealt: bool) -> list[Any]:
    """The due rows of one claim: with ``dealt``, the rows dealt into rounds first (by
    round, then due time), then, if they are fewer than wanted, the others in due order
    (same transaction)."""
    rows = list(run(q.CLAIM_DEALT, params)) if dealt else []
    want = params["limit"] - len(rows)
    if want > 0:
        rows += list(run(claim, {**params, "limit": want}))
    return rows


#: One due row as a look weighs it: its key, its user and its due time.
Due = tuple[str, str | None, datetime]


@dataclass(frozen=True)
class Rounds:
    """A bucket's rows dealt into rounds: the lowest round (claimed next) and the highest."""

    lowest: int
    highest: int


@dataclass(frozen=True)
class FairState:
    """A bucket's fair share as ``recur status`` shows it (each figure one bounded read)."""

    bucket: str
    #: Due rows not dealt at the head of the bucket (read at most ``head_cap``).
    head_rows: int
    head_users: int
    #: Rows of the user with the most rows in that head.
    largest_rows: int
    #: Rows dealt now (counted up to a cap: ``dealt_capped``), and their rounds.
    dealt_rows: int
    dealt_capped: bool
    rounds: Rounds | None
    #: Users of the next dealt rows (the first ``head_cap`` in round order).
    dealt_users: int
    oldest_dealt_at: datetime | None
    #: Rows the schedulers ever dealt (``due_counters``' ``fair_dealt``).
    dealt_ever: int


class FairRows:
    """Fair-share statements on one store."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store

    def window(self, bucket: str, now: datetime, start: datetime, limit: int, *,
               whole: bool = True) -> list[Due]:
        """The first ``limit`` due rows not dealt, due at ``start`` or later, in claim
        order. With ``whole`` it never ends inside a group of rows due at one instant
        (the group is read whole, or left out when rows due earlier came before it)."""
        params = {"bucket": bucket, "now": now, "start": start, "limit": limit}
        with self.store.transaction(f"read due rows of bucket {bucket}") as conn:
            rows = [_due(r) for r in conn.execute(q.window(self.store.dialect), params)]
            if len(rows) < limit or not whole:
                return rows
            last = rows[-1][2]
            if rows[0][2] < last:
                return [r for r in rows if r[2] < last]
            return [_due(r) for r in conn.execute(q.due_group(self.store.dialect),
                                                  {"bucket": bucket, "at": last})]

    def has_dealt(self, bucket: str) -> bool:
        """Whether ``bucket`` has rows dealt into rounds (one index probe)."""
        with self.store.transaction(f"look for dealt rows of bucket {bucket}") as conn:
            return conn.execute(q.LOWEST_ROUND, {"bucket": bucket}).scalar() is not None

    def rounds(self, bucket: str) -> Rounds | None:
        """The lowest and highest round of ``bucket``'s dealt rows (None: none)."""
        with self.store.transaction(f"read the rounds of bucket {bucket}") as conn:
            low = conn.execute(q.LOWEST_ROUND, {"bucket": bucket}).scalar()
            if low is None:
                return None
            high = conn.execute(q.HIGHEST_ROUND, {"bucket": bucket}).scalar()
        return Rounds(int(low), int(high if high is not None else low))

    def deal(self, bucket: str, turns: dict[str, int]) -> int:
        """Deal ``turns`` (key -> round) back, but rows claimed, dealt or written again
        meanwhile; counts them (``fair_dealt``). Returns the rows dealt."""
        if not turns:
            return 0
        with self.store.transaction(f"deal back rows of bucket {bucket}") as conn:
            if self.store.dialect == "postgresql":
                done = conn.execute(q.DEAL_ROWS_PG, {"keys": list(turns),
                                                     "turns": list(turns.values())})
            else:
                done = conn.execute(q.DEAL_ROW, [{"k": k, "t": t} for k, t in turns.items()])
            moved = int(done.rowcount or 0)
            if moved:
                self.store.add_counters(conn, DEALT, Counter({bucket: moved}))
        return moved

    def undeal(self, bucket: str) -> int:
        """Put every dealt row of ``bucket`` back in due order, a batch per transaction."""
        total = 0
        while True:
            with self.store.transaction(f"undeal rows of bucket {bucket}") as conn:
                done = int(conn.execute(q.undeal(bucket, UNDEAL_BATCH)).rowcount or 0)
            total += done
            if done < UNDEAL_BATCH:
                return total

    def state(self, bucket: str, now: datetime, head_cap: int, cap: int) -> FairState:
        """What ``recur status`` shows of ``bucket``'s fair share."""
        dialect, params = self.store.dialect, {"bucket": bucket, "now": now}
        with self.store.transaction(f"read the fair share of bucket {bucket}") as conn:
            users = Counter(str(u) for _, u, _ in conn.execute(
                q.window(dialect), {**params, "start": EPOCH, "limit": head_cap}))
            dealt = int(conn.execute(q.DEALT_CAPPED, {**params, "cap": cap}).scalar() or 0)
            oldest = conn.execute(q.OLDEST_DEALT, params).scalar() if dealt else None
            low = conn.execute(q.LOWEST_ROUND, params).scalar() if dealt else None
            high = conn.execute(q.HIGHEST_ROUND, params).scalar() if dealt else None
            next_users = list(conn.execute(q.dealt_users(dialect),
                                           {**params, "limit": head_cap})) if dealt else []
            ever = conn.execute(q.COUNTER_TOTAL, {"bucket": bucket, "name": DEALT}).scalar()
        rounds = None if low is None else Rounds(int(low), int(high or low))
        return FairState(bucket, sum(users.values()), len(users),
                         max(users.values(), default=0), dealt, dealt >= cap, rounds,
                         len(next_users), oldest, int(ever or 0))


def _due(row: Any) -> Due:
    key, user, due = row
    return str(key), None if user is None else str(user), due
