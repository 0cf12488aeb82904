"""The due-jobs store's side of fair share: claim dealt rows, deal rows back, read it.

The policy (when to deal, which user goes to which round) is the scheduler's
(scheduler/fair_share.py); here are the statements it runs, each bounded by an
index range (fair_queries.py), and what ``recur status`` reads of it.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from scheduler.store import fair_queries as q
from scheduler.store import status_readings as sr
from scheduler.store.base import StoreCore
from scheduler.store.records import Execute
from scheduler.store.status_readings import DEALT, EPOCH, FairState, Rounds

__all__ = ["DEALT", "EPOCH", "UNDEAL_BATCH", "Due", "FairRows", "FairState", "Rounds",
           "claim_rows", "state_statements"]

#: Dealt rows one transaction puts back in due order.
UNDEAL_BATCH = 10_000


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


def state_statements(dialect: str) -> dict[str, Any]:
    """FairRows.state's statements by the names status_readings.py runs them by (for
    PostgreSQL, the same names' text for psycopg alone: status_sql.py)."""
    return {"FAIR_WINDOW": q.window(dialect), "DEALT_CAPPED": q.DEALT_CAPPED,
            "OLDEST_DEALT": q.OLDEST_DEALT, "LOWEST_ROUND": q.LOWEST_ROUND,
            "HIGHEST_ROUND": q.HIGHEST_ROUND, "DEALT_USERS": q.dealt_users(dialect),
            "COUNTER_TOTAL": q.COUNTER_TOTAL}


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
        with self.store.transaction(f"read the fair share of bucket {bucket}") as conn:
            return sr.fair_state(sr.runner(conn, state_statements(self.store.dialect)),
                                 bucket, now, head_cap, cap)


def _due(row: Any) -> Due:
    key, user, due = row
    return str(key), None if user is None else str(user), due
