"""A worker's per-run statements for many concurrent runs at once (PostgreSQL).

A threads-pool worker runs hundreds of tasks at once, and each run reads its row's
token before it starts and writes its reschedule after: one statement each, each a
round trip whose driver work (psycopg's, on the worker's CPU) was a fifth of the
worker's cost per run. The runs of one process that arrive together
(scheduler/group_commit.py) share one statement instead: one read of every key's
token, one token-checked reschedule of every row. Each row keeps its own answer
(its token and lease; whether its token was still current), exactly as the single
statement gives it. The reschedules commit like the single one (``synchronous_commit
off``, every accepted row kept by the settle journal as its own single-row write).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from scheduler.store.hot_sql import (
    DISPATCHED,
    NO_FLOOR,
    PEEK_DISPATCH,
    PEEK_MANY,
    RESCHEDULE,
    RESCHEDULE_MANY,
    HotSql,
)

if TYPE_CHECKING:
    from scheduler.store.journal import SettleJournal
    from scheduler.store.raw_pool import RawStatements


class RawStore(Protocol):
    """What these statements need of a store: DueStore (base.py) or the worker's
    (worker_store.py)."""

    _raw: RawStatements | None
    _journal: SettleJournal | None

    def _settle(self, what: str, stmt: HotSql, params: dict[str, Any]) -> tuple[Any, int]:
        ...


@dataclass(eq=False)
class Peek:
    """One run's read of its row: (token, lease end) once read, None if not dispatched."""

    job_key: str
    live: tuple[int, datetime | None] | None = None


@dataclass(eq=False)
class Reschedule:
    """One run's token-checked reschedule of its row, and whether it was current."""

    job_key: str
    token: int
    due_at: datetime
    now: datetime
    args: str | None = None
    early_at: datetime | None = None
    accepted: bool = field(default=False, init=False)

    def params(self) -> dict[str, Any]:
        """The single-row RESCHEDULE's parameters (what the settle journal writes again)."""
        return {"key": self.job_key, "current": self.token, "due": self.due_at,
                "now": self.now, "new_args": self.args, "early": self.early_at or NO_FLOOR}


def batched(store: RawStore) -> bool:
    """Whether ``store`` runs these statements (PostgreSQL's raw path)."""
    return store._raw is not None


def peek_many(store: RawStore, peeks: Sequence[Peek]) -> None:
    """Read every peek's row in one statement (a plain read: no row lock)."""
    assert store._raw is not None
    if len(peeks) == 1:  # alone: the single-row read is the cheaper statement
        peeks[0].live = live_of(store._settle("read a job's token", PEEK_DISPATCH,
                                            {"key": peeks[0].job_key})[0])
        return
    row, _ = store._raw.execute("read jobs' tokens", PEEK_MANY,
                                {"keys": [p.job_key for p in peeks]})
    keys, tokens, leases, states = row if row and row[0] is not None else ([], [], [], [])
    found = {key: (token, lease, state)
             for key, token, lease, state in zip(keys, tokens, leases, states, strict=True)}
    for peek in peeks:
        peek.live = live_of(found.get(peek.job_key))


def live_of(row: Any) -> tuple[int, datetime | None] | None:
    """(token, lease end) of a (token, lease, state) row that is dispatched, else None."""
    if row is None or row[2] != DISPATCHED:
        return None
    lease: datetime | None = row[1]
    if lease is not None and lease.tzinfo is None:
        lease = lease.replace(tzinfo=UTC)
    return int(row[0]), lease


def reschedule_many(store: RawStore, calls: Sequence[Reschedule]) -> None:
    """Write every reschedule in one statement, in job-key order; a key given twice is
    written again alone (the second finds the row moved on, as it would alone)."""
    first: dict[str, Reschedule] = {}
    again: list[Reschedule] = []
    for call in sorted(calls, key=lambda c: c.job_key):
        if call.job_key in first:
            again.append(call)
        else:
            first[call.job_key] = call
    rows = list(first.values())
    if len(rows) == 1:  # alone: the single-row statement (cheaper for the server)
        again.insert(0, rows[0])
    else:
        _reschedule_together(store, rows)
    for call in again:
        _, count = store._settle("reschedule a job", RESCHEDULE, call.params())
        call.accepted = count == 1


def _reschedule_together(store: RawStore, rows: Sequence[Reschedule]) -> None:
    """One statement for ``rows`` (distinct keys); each accepted one journaled alone."""
    assert store._raw is not None and store._journal is not None
    store._journal.before_write()
    row, _ = store._raw.execute("reschedule jobs", RESCHEDULE_MANY, {
        "keys": [c.job_key for c in rows], "tokens": [c.token for c in rows],
        "dues": [c.due_at for c in rows], "earlies": [c.early_at or NO_FLOOR for c in rows],
        "args": [c.args for c in rows], "now": max(c.now for c in rows)})
    moved = set(row[0] or ()) if row else set()
    for call in rows:
        call.accepted = call.job_key in moved
        if call.accepted:
            store._journal.record("reschedule a job", RESCHEDULE, call.params())

