"""The due-jobs store, the same tests on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config.errors import SchemaOutOfDate, StoreError
from scheduler.periodic import PeriodicEntry
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.connection import make_engine
from scheduler.store.migrate import check_schema, current_revision, head_revision, upgrade

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def job(key: str, due: datetime, bucket: str = "short", args: str = '{"args":[],"kwargs":{}}'
        ) -> Job:
    return Job(job_key=key, task="tasks.process_message", bucket=bucket, args=args, due_at=due)


def drain(store: DueStore, bucket: str, now: datetime, limit: int = 100,
          early: bool = False) -> list[Claimed]:
    got: list[Claimed] = []
    store.dispatch(bucket, limit, now, now + LEASE, got.extend, early=early)
    return got


def test_unmigrated_database_is_refused_with_the_command_to_run(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'new.sqlite3'}")
    with pytest.raises(SchemaOutOfDate, match="recur db upgrade"):
        check_schema(engine)
    assert upgrade(engine) == head_revision()
    check_schema(engine)
    assert upgrade(engine) == head_revision()  # idempotent
    engine.dispose()


def test_store_is_at_head(store: DueStore) -> None:
    assert current_revision(store.engine) == head_revision()


def test_only_due_rows_of_the_bucket_are_dispatched_in_due_order(store: DueStore) -> None:
    store.schedule([job("b", T0 - timedelta(seconds=5)), job("a", T0 - timedelta(seconds=9)),
                    job("later", T0 + timedelta(hours=1)),
                    job("other", T0 - timedelta(hours=1), bucket="long")], T0)
    got = drain(store, "short", T0)
    assert [c.job_key for c in got] == ["a", "b"]
    assert all(c.token == 1 for c in got)
    assert drain(store, "short", T0) == []  # dispatched rows are not claimed again


def test_schedule_is_idempotent_per_key(store: DueStore) -> None:
    store.schedule([job("k", T0 + timedelta(hours=1))], T0)
    store.schedule([job("k", T0 - timedelta(seconds=1), args='{"args":[1],"kwargs":{}}')], T0)
    got = drain(store, "short", T0)
    assert [(c.job_key, c.args) for c in got] == [("k", '{"args":[1],"kwargs":{}}')]
    assert store.stats(T0)["short"].dispatched == 1


def test_a_failed_publish_marks_nothing(store: DueStore) -> None:
    store.schedule([job("k", T0)], T0)

    def broken(_rows: list[Claimed]) -> None:
        raise ConnectionError("broker went away")

    with pytest.raises(ConnectionError):
        store.dispatch("short", 10, T0, T0 + LEASE, broken)
    assert [c.token for c in drain(store, "short", T0)] == [1]


def test_reschedule_and_finish_need_the_current_token(store: DueStore) -> None:
    store.schedule([job("k", T0)], T0)
    (first,) = drain(store, "short", T0)
    assert store.live_dispatch("k") == (first.token, T0 + LEASE)
    assert not store.reschedule("k", first.token - 1, T0 + timedelta(seconds=30), T0)
    assert store.reschedule("k", first.token, T0 + timedelta(seconds=30), T0,
                            args='{"args":[2],"kwargs":{}}')
    assert store.live_dispatch("k") is None  # scheduled again, no live copy
    assert not store.reschedule("k", first.token, T0, T0)  # twice: refused
    assert drain(store, "short", T0) == []  # not due yet
    (second,) = drain(store, "short", T0 + timedelta(seconds=30))
    assert second.token == first.token + 1 and second.args == '{"args":[2],"kwargs":{}}'
    assert not store.finish("k", first.token)
    assert store.finish("k", second.token)
    assert store.stats(T0) == {}


def test_expired_leases_are_dispatched_again_with_a_new_token(store: DueStore) -> None:
    store.schedule([job("k", T0), job("j", T0, bucket="medium")], T0)
    (first,) = drain(store, "short", T0)
    drain(store, "medium", T0)
    assert store.recover_expired(T0 + LEASE / 2, 100) == {}
    assert store.recover_expired(T0 + LEASE * 2, 100) == {"short": 1, "medium": 1}
    (again,) = drain(store, "short", T0 + LEASE * 2)
    assert again.token == first.token + 1
    assert not store.finish("k", first.token)  # the stale copy cannot finish it
    stats = store.stats(T0 + LEASE * 2)
    assert stats["short"].recovered == 1 and stats["medium"].recovered == 1


def never(rows: list[Claimed]) -> None:
    raise AssertionError(f"nothing should be dead-lettered, got {rows}")


def test_a_job_out_of_attempts_is_dead_lettered_then_deleted(store: DueStore) -> None:
    store.schedule([job("poison", T0), job("ok", T0)], T0)
    now = T0
    for _ in range(2):  # two dispatches whose leases run out: put back
        assert {c.job_key for c in drain(store, "short", now)} == {"poison", "ok"}
        now += LEASE * 2
        assert store.dead_letter_expired(now, 3, 100, never) == {}
        assert store.recover_expired(now, 100, 3) == {"short": 2}
    assert len(drain(store, "short", now)) == 2
    assert store.finish("ok", 3)  # "ok" finishes its third copy; "poison" never does
    now += LEASE * 2
    assert store.recover_expired(now, 100, 3) == {}  # out of attempts: not put back

    def refuse(rows: list[Claimed]) -> None:
        raise StoreError("broker refused")  # stands in for a failed publish

    with pytest.raises(StoreError):
        store.dead_letter_expired(now, 3, 100, refuse)
    assert store.stats(now)["short"].dispatched == 1  # unconfirmed: the row stays
    published: list[Claimed] = []
    assert store.dead_letter_expired(now, 3, 100, published.extend) == {"short": 1}
    (dead,) = published
    assert (dead.job_key, dead.token, dead.attempts) == ("poison", 3, 3)
    assert dead.args == '{"args":[],"kwargs":{}}'
    assert store.stats(now) == {"short": store.stats(now)["short"]}
    assert store.stats(now)["short"].dispatched == 0
    assert store.stats(now)["short"].dead_lettered == 1  # shown by recur status
    assert store.live_dispatch("poison") is None


def test_a_reschedule_resets_the_attempts(store: DueStore) -> None:
    store.schedule([job("k", T0)], T0)
    now = T0
    for _ in range(5):
        (copy,) = drain(store, "short", now)
        assert store.reschedule("k", copy.token, now, now)
        now += LEASE * 2
        assert store.dead_letter_expired(now, 2, 100, never) == {}


def test_pull_forward_takes_the_earliest_future_rows(store: DueStore) -> None:
    store.schedule([job(f"f{i}", T0 + timedelta(hours=i + 1)) for i in range(5)], T0)
    assert drain(store, "short", T0) == []
    got = drain(store, "short", T0, limit=2, early=True)
    assert [c.job_key for c in got] == ["f0", "f1"]


def test_stats_per_bucket(store: DueStore) -> None:
    store.schedule([job("a", T0 - timedelta(seconds=30)), job("b", T0 - timedelta(seconds=10)),
                    job("c", T0 + timedelta(hours=1)), job("d", T0, bucket="long")], T0)
    drain(store, "long", T0)
    stats = store.stats(T0)
    short, long_ = stats["short"], stats["long"]
    assert (short.scheduled, short.due, short.dispatched) == (3, 2, 0)
    assert short.oldest_due_at == T0 - timedelta(seconds=30)
    assert (long_.scheduled, long_.due, long_.dispatched, long_.expired) == (0, 0, 1, 0)
    assert store.stats(T0 + LEASE * 2)["long"].expired == 1


def test_naive_datetimes_are_refused(store: DueStore) -> None:
    with pytest.raises((ValueError, StoreError), match="naive"):
        store.schedule([job("k", datetime(2030, 1, 1))], T0)
    assert store.stats(T0) == {}


def test_concurrent_schedulers_never_claim_one_row_twice(fresh_pg_url: str) -> None:
    """Three PostgreSQL drainers at once (SKIP LOCKED): each row dispatched exactly once."""
    setup = DueStore.open(fresh_pg_url)
    setup.schedule([job(f"j{i}", T0) for i in range(3000)], T0)
    claimed: list[list[str]] = [[], [], []]
    errors: list[BaseException] = []

    def drainer(n: int) -> None:
        store = DueStore.open(fresh_pg_url)
        try:
            while drained := drain(store, "short", T0, limit=50):
                claimed[n].extend(c.job_key for c in drained)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=drainer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    every = [k for part in claimed for k in part]
    assert len(every) == 3000 and len(set(every)) == 3000
    assert sum(1 for part in claimed if part) >= 2, "drainers did not run concurrently"
    assert setup.stats(T0)["short"].dispatched == 3000
    setup.close()


def test_a_worker_reading_during_a_dispatch_sees_the_committed_dispatch(
        store_url: str) -> None:
    """The scheduler publishes before it commits: the worker's check waits for the commit."""
    store, reader = DueStore.open(store_url), DueStore.open(store_url)
    store.schedule([job("k", T0)], T0)
    seen: list[object] = []

    def publish(rows: list[Claimed]) -> None:
        check = threading.Thread(target=lambda: seen.append(reader.live_dispatch("k")))
        check.start()
        check.join(timeout=0.5)  # blocked on the claim's lock until we commit
        assert check.is_alive()
        threads.append(check)

    threads: list[threading.Thread] = []
    store.dispatch("short", 10, T0, T0 + LEASE, publish)
    threads[0].join(timeout=10)
    assert seen == [(1, T0 + LEASE)]
    store.close()
    reader.close()


def entry(name: str, schedule: str = "every 60.0") -> PeriodicEntry:
    return PeriodicEntry(name=name, task="tasks.process_message", bucket="short",
                         args='{"args":[],"kwargs":{}}', schedule=schedule)


def test_periodic_entries_fire_once_per_period(store_url: str) -> None:
    first, second = DueStore.open(store_url), DueStore.open(store_url)
    first.sync_periodic([entry("a"), entry("b", "every 3600.0")], T0)
    second.sync_periodic([entry("a"), entry("b", "every 3600.0")], T0)  # no reset
    assert first.fire_periodic(T0 + timedelta(seconds=30)) == []
    fired = first.fire_periodic(T0 + timedelta(seconds=61)) + second.fire_periodic(
        T0 + timedelta(seconds=61))
    assert fired == ["a"]
    got = drain(first, "short", T0 + timedelta(seconds=61))
    assert [c.job_key for c in got] == [f"periodic:a:{(T0 + timedelta(seconds=60)).isoformat()}"]
    assert second.fire_periodic(T0 + timedelta(seconds=121)) == ["a"]
    first.sync_periodic([entry("b", "every 30.0")], T0 + timedelta(seconds=200))  # a removed
    assert first.fire_periodic(T0 + timedelta(seconds=231)) == ["b"]
    first.close()
    second.close()
