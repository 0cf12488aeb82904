"""Concurrent runs' token checks and reschedules share statements (scheduler/store/
settle_batch.py via scheduler/group_commit.py), and each run still gets exactly the
answer its own single-row statement would give: its token and lease, whether its
reschedule was current. On PostgreSQL (SQLite has no batched path)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from config.settings import settings
from scheduler.group_commit import _committer, peek_dispatch, reschedule_job
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.settle_batch import Reschedule

THREADS, JOBS = 24, 240
NOW = datetime.now(UTC).replace(microsecond=0)


def dispatched(store: DueStore, count: int) -> list[Claimed]:
    """``count`` rows scheduled and dispatched (token 1, a one-hour lease)."""
    jobs = [Job(f"sb-{i:04d}", "tests.noop", "short", "[[],{}]", NOW - timedelta(seconds=1))
            for i in range(count)]
    store.schedule(jobs, NOW)
    got: list[Claimed] = []
    assert store.dispatch("short", count, NOW, NOW + timedelta(hours=1), got.extend) == count
    return got


def in_threads(items: list[Any], work: Callable[[Any], object]) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def run(part: list[Any]) -> None:
        start.wait()
        try:
            for item in part:
                work(item)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(items[i::THREADS],)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_shared_token_checks_answer_each_run_as_its_own_read(fresh_pg_url: str) -> None:
    store = DueStore.open(fresh_pg_url)
    rows = dispatched(store, JOBS)
    store.finish(rows[0].job_key, rows[0].token)  # one row gone: no live dispatch
    answers: dict[str, Any] = {}
    keys = [r.job_key for r in rows] + ["sb-missing"]
    in_threads(keys, lambda key: answers.__setitem__(key, peek_dispatch(store, key,
                                                                        settings())))
    assert answers == {key: store.live_dispatch(key, wait=False) for key in keys}
    assert answers[rows[1].job_key] is not None and answers[rows[1].job_key][0] == 1
    assert answers[rows[0].job_key] is None and answers["sb-missing"] is None
    shared = _committer(store, "peek", lambda ref: None)  # type: ignore[arg-type,return-value]
    assert shared.rows == len(keys) and shared.commits < len(keys)  # statements were shared
    store.close()


def test_shared_reschedules_accept_current_tokens_only(fresh_pg_url: str) -> None:
    store = DueStore.open(fresh_pg_url)
    rows = dispatched(store, JOBS)
    due = NOW + timedelta(minutes=5)
    # every third run is a stale copy (token 0); every row's live copy reschedules once,
    # and a second copy of the same dispatch is refused like its single statement would be
    calls = [Reschedule(r.job_key, r.token if i % 3 else 0, due, NOW, None if i % 2 else "[7]")
             for i, r in enumerate(rows)]
    calls += [Reschedule(r.job_key, r.token, due, NOW) for r in rows[1:JOBS:3]]
    in_threads(calls, lambda call: reschedule_job(store, call, settings()))
    for i, row in enumerate(rows):
        mine = [c for c in calls if c.job_key == row.job_key and c.token == row.token]
        accepted = [c for c in mine if c.accepted]
        if i % 3 == 0:  # only a stale copy ran: the row stays dispatched
            assert not any(c.accepted for c in calls if c.job_key == row.job_key)
            assert store.live_dispatch(row.job_key) is not None
        else:
            assert len(accepted) == 1, (row.job_key, mine)
            assert store.live_dispatch(row.job_key) is None  # scheduled again
    with store.transaction("read") as conn:
        got = {k: (s, d, a, n) for k, s, d, a, n in conn.exec_driver_sql(
            "SELECT job_key, state, due_at, args, runs FROM due_jobs")}
    for i, row in enumerate(rows):
        state, due_at, args, runs = got[row.job_key]
        if i % 3:
            assert (state, due_at, runs) == (0, due, 1)
            assert args == ("[[],{}]" if i % 2 else "[7]")
    store.close()
