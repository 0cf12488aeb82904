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
from typing import Any

from sqlalchemy import TextClause, text

from scheduler.store.base import StoreCore
from scheduler.store.queries import PEEK_DISPATCH, RESCHEDULE
from scheduler.store.schema import DISPATCHED, NO_FLOOR, SCHEDULED

#: The rows of ``keys`` that exist, as four arrays (one result row: one fetch).
PEEK_MANY = text(
    "SELECT array_agg(job_key), array_agg(token), array_agg(due_at), array_agg(state) "
    "FROM due_jobs WHERE job_key = ANY(CAST(:keys AS text[]))")
#: RESCHEDULE for many rows (each its own token check); the keys it moved, in an array.
RESCHEDULE_MANY = text(
    "WITH v AS (SELECT * FROM unnest(CAST(:keys AS text[]), CAST(:tokens AS integer[]), "
    "CAST(:dues AS timestamptz[]), CAST(:earlies AS timestamptz[]), CAST(:args AS text[])) "
    "AS v(job_key, token, due_at, early_at, args)), "
    "u AS (UPDATE due_jobs d SET state = :scheduled, due_at = v.due_at, attempts = 0, "
    "early_at = v.early_at, runs = d.runs + 1, updated_at = :now, "
    "args = coalesce(v.args, d.args) FROM v WHERE d.job_key = v.job_key "
    "AND d.token = v.token AND d.state = :dispatched RETURNING d.job_key) "
    "SELECT array_agg(job_key) FROM u")


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


def batched(store: StoreCore) -> bool:
    """Whether ``store`` runs these statements (PostgreSQL's raw path)."""
    return store._raw is not None


def peek_many(store: StoreCore, peeks: Sequence[Peek]) -> None:
    """Read every peek's row in one statement (a plain read: no row lock)."""
    assert store._raw is not None
    if len(peeks) == 1:  # alone: the single-row read is the cheaper statement
        peeks[0].live = _live(store._settle("read a job's token", PEEK_DISPATCH,
                                            {"key": peeks[0].job_key})[0])
        return
    row, _ = store._raw.execute("read jobs' tokens", _as_statement(PEEK_MANY),
                                {"keys": [p.job_key for p in peeks]})
    keys, tokens, leases, states = row if row and row[0] is not None else ([], [], [], [])
    found = {key: (token, lease, state)
             for key, token, lease, state in zip(keys, tokens, leases, states, strict=True)}
    for peek in peeks:
        peek.live = _live(found.get(peek.job_key))


def _live(row: Any) -> tuple[int, datetime | None] | None:
    """(token, lease end) of a (token, lease, state) row that is dispatched, else None."""
    if row is None or row[2] != DISPATCHED:
        return None
    lease: datetime | None = row[1]
    if lease is not None and lease.tzinfo is None:
        lease = lease.replace(tzinfo=UTC)
    return int(row[0]), lease


def reschedule_many(store: StoreCore, calls: Sequence[Reschedule]) -> None:
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


def _reschedule_together(store: StoreCore, rows: Sequence[Reschedule]) -> None:
    """One statement for ``rows`` (distinct keys); each accepted one journaled alone."""
    assert store._raw is not None and store._journal is not None
    store._journal.before_write()
    row, _ = store._raw.execute("reschedule jobs", _as_statement(RESCHEDULE_MANY), {
        "keys": [c.job_key for c in rows], "tokens": [c.token for c in rows],
        "dues": [c.due_at for c in rows], "earlies": [c.early_at or NO_FLOOR for c in rows],
        "args": [c.args for c in rows], "now": max(c.now for c in rows),
        "scheduled": SCHEDULED, "dispatched": DISPATCHED})
    moved = set(row[0] or ()) if row else set()
    for call in rows:
        call.accepted = call.job_key in moved
        if call.accepted:
            store._journal.record("reschedule a job", RESCHEDULE, call.params())


def _as_statement(clause: TextClause) -> Any:
    """The raw path compiles any clause once by identity; text is one too."""
    return clause
