"""The worker's store (scheduler/store/worker_store.py) answers every worker call as
DueStore does on the same rows, on psycopg alone: token checks, token-checked
reschedule / finish / lease moves (journaled), a task's stored call with its task
name registered, a schema that is not upgraded refused, an outage translated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from config.errors import SchemaOutOfDate, StoreUnavailable
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.worker_store import WorkerStore

NOW = datetime.now(UTC).replace(microsecond=0)
LEASE = NOW + timedelta(hours=1)


def dispatched(store: DueStore, *keys: str) -> dict[str, Claimed]:
    """Rows ``keys`` scheduled and dispatched by the full store (token 1)."""
    store.schedule([Job(k, "tests.noop", "short", "[[],{}]", NOW - timedelta(seconds=1))
                    for k in keys], NOW)
    got: list[Claimed] = []
    store.dispatch("short", len(keys), NOW, LEASE, got.extend)
    return {c.job_key: c for c in got}


def test_the_worker_store_answers_as_the_full_store(fresh_pg_url: str) -> None:
    full, light = DueStore.open(fresh_pg_url), WorkerStore.open(fresh_pg_url)
    try:
        rows = dispatched(full, "ws-a", "ws-b", "ws-c")
        for key in (*rows, "ws-missing"):
            assert light.live_dispatch(key) == full.live_dispatch(key)
            assert light.live_dispatch(key, wait=False) == full.live_dispatch(key, wait=False)
        a, b, c = rows["ws-a"], rows["ws-b"], rows["ws-c"]
        assert light.live_dispatch("ws-a") == (a.token, LEASE)
        assert not light.reschedule("ws-a", a.token + 1, NOW, NOW)  # a stale copy
        assert light.reschedule("ws-a", a.token, NOW - timedelta(seconds=1), NOW,
                                args='[["x"],{}]')
        assert full.live_dispatch("ws-a") is None  # scheduled again
        assert light.set_lease("ws-b", b.token, NOW + timedelta(seconds=5))
        assert full.live_dispatch("ws-b") == (b.token, NOW + timedelta(seconds=5))
        assert not light.finish("ws-c", c.token - 1) and light.finish("ws-c", c.token)
        assert light._journal is not None and light._journal.size() == 5  # every settle write
        again: list[Claimed] = []
        assert full.dispatch("short", 5, NOW, LEASE, again.extend) == 1
        assert (again[0].job_key, again[0].args, again[0].token) == (
            "ws-a", '[["x"],{}]', a.token + 1)
    finally:
        light.close()
        full.close()


def test_a_stored_call_registers_its_task_and_upserts(fresh_pg_url: str) -> None:
    full, light = DueStore.open(fresh_pg_url), WorkerStore.open(fresh_pg_url)
    try:
        task = f"tests.worker_store_{NOW.timestamp():.0f}"  # a name no store has yet
        due = NOW - timedelta(seconds=1)
        light.schedule([Job("ws-new", task, "short", "[[],{}]", due),
                        Job("ws-floor", task, "short", "[[],{}]", due, early_at=due)], NOW)
        light.schedule([Job("ws-new", task, "short", '[["2"],{}]', due)], NOW)  # upsert
        got: list[Claimed] = []
        assert full.dispatch("short", 10, NOW, LEASE, got.extend) == 2
        assert {(c.job_key, c.task, c.args) for c in got} == {
            ("ws-new", task, '[["2"],{}]'), ("ws-floor", task, "[[],{}]")}
    finally:
        light.close()
        full.close()


def test_a_schema_not_upgraded_is_refused(pg_url: str) -> None:
    bare = pg_url.split("?")[0]  # the database's default schema: never migrated by tests
    with pytest.raises(SchemaOutOfDate, match="recur db upgrade"):
        WorkerStore.open(bare)


def test_an_unreachable_store_is_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match="cannot read the schema revision"):
        WorkerStore.open("postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2")
