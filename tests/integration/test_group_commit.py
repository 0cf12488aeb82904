"""Group commit (scheduler/group_commit.py): concurrent ``apply_async`` calls of one
process share commits, each returning only once its own row is durable, and one row
the store refuses fails only its own call. On SQLite and PostgreSQL."""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from config.errors import StoreError
from scheduler.group_commit import committer
from scheduler.store import DueStore, Job
from scheduler.store.connection import libpq_url
from scheduler.store.worker_store import get_worker_store
from tasks.process import process_message
from tests.support.processes import wait_for

THREADS, CALLS = 16, 20


def message(ident: str) -> dict[str, Any]:
    return {"id": ident, "user_id": "u-1", "bucket": "short", "payload": {"n": 1}}


@contextmanager
def other_connection(url: str) -> Iterator[Any]:
    """A connection of its own (not the store's pool): what another process would see."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30)
        try:
            yield conn
        finally:
            conn.close()
    else:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            yield conn


def seen(conn: Any, key: str) -> bool:
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    cur = conn.execute(f"SELECT 1 FROM due_jobs WHERE job_key = {mark}", (key,))
    return cur.fetchone() is not None


def keys_in(conn: Any) -> list[str]:
    return [str(key) for key, in conn.execute("SELECT job_key FROM due_jobs").fetchall()]


def run_threads(count: int, work: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # the test reports it
            errors.append(exc)

    pool = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(120)
    return errors


def warm_up() -> None:
    """One call first: the process opens its store (and Celery binds the task) once,
    not in sixteen threads at the same time."""
    process_message.apply_async((message("warm-up"),), countdown=3600)


def test_concurrent_calls_each_return_once_their_row_is_visible(
        store_url: str, store_in_use: DueStore) -> None:
    warm_up()
    unseen: list[str] = []

    def calls(n: int) -> None:
        with other_connection(store_url) as conn:
            for i in range(CALLS):
                key = f"t{n}-{i}"
                process_message.apply_async((message(key),), countdown=3600)
                if not seen(conn, key):  # returned: committed, visible to anyone
                    unseen.append(key)

    assert run_threads(THREADS, calls) == []
    assert unseen == []
    with other_connection(store_url) as conn:
        keys = keys_in(conn)
    assert sorted(keys) == sorted(["warm-up", *(f"t{n}-{i}" for n in range(THREADS)
                                                for i in range(CALLS))])
    shared = committer(get_worker_store(store_url))
    assert shared.rows == THREADS * CALLS + 1
    assert shared.commits < shared.rows  # some calls did share a commit


@contextmanager
def write_lock_held(url: str) -> Iterator[None]:
    """Another connection holds the table's write lock: the leader's commit waits."""
    with other_connection(url) as conn:
        if isinstance(conn, sqlite3.Connection):
            conn.isolation_level = None
            conn.execute("BEGIN IMMEDIATE")
        else:
            conn.execute("BEGIN")
            conn.execute("LOCK TABLE due_jobs IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


def hostile_job(url: str) -> Job:
    """A row that passed no check and that the store refuses: on PostgreSQL a key too
    long for its index (translated as an outage: told apart by its SQLSTATE), on SQLite
    a row without its bucket."""
    due = datetime.now(UTC) + timedelta(hours=1)
    if url.startswith("sqlite"):
        return Job("hostile", "tasks.process_message", None, "[]", due)  # type: ignore[arg-type]
    return Job("k" + secrets.token_urlsafe(6000), "tasks.process_message", "short", "[]", due)


def test_a_row_the_store_refuses_fails_only_its_own_call(
        store_url: str, store_in_use: DueStore) -> None:
    warm_up()
    shared = committer(get_worker_store(store_url))
    answers: dict[str, BaseException | None] = {}

    def call(key: str) -> None:
        try:
            process_message.apply_async((message(key),), countdown=3600)
            answers[key] = None
        except BaseException as exc:
            answers[key] = exc

    def hostile() -> None:
        try:
            shared.submit(hostile_job(store_url))
            answers["hostile"] = None
        except BaseException as exc:
            answers["hostile"] = exc

    with write_lock_held(store_url):
        leader = threading.Thread(target=call, args=("first",))
        leader.start()  # its commit waits for the lock, holding the lead
        wait_for(lambda: shared.committing and shared.waiting == 0, 10, "the leader's commit")
        followers = [threading.Thread(target=call, args=(f"f{i}",)) for i in range(8)]
        followers.append(threading.Thread(target=hostile))
        for thread in followers:
            thread.start()
        wait_for(lambda: shared.waiting == 9, 10, "nine calls queued behind the leader")
    for thread in [leader, *followers]:
        thread.join(60)
    assert isinstance(answers.pop("hostile"), StoreError)
    assert answers == {key: None for key in ["first", *(f"f{i}" for i in range(8))]}
    with other_connection(store_url) as conn:
        assert sorted(keys_in(conn)) == sorted(["warm-up", *answers])


def test_a_lone_caller_commits_at_once(store_url: str, store_in_use: DueStore) -> None:
    shared = committer(get_worker_store(store_url))
    for i in range(5):
        process_message.apply_async((message(f"alone-{i}"),), countdown=3600)
        assert not shared.committing and shared.waiting == 0
    assert (shared.commits, shared.rows) == (5, 5)


def test_group_commit_off_writes_each_call_alone(
        store_url: str, use_store: Callable[[str], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECUR_GROUP_COMMIT", "0")
    use_store(store_url)
    warm_up()
    assert run_threads(4, lambda n: process_message.apply_async(
        (message(f"off-{n}"),), countdown=3600)) == []
    assert committer(get_worker_store(store_url)).commits == 0
    with other_connection(store_url) as conn:
        assert sorted(keys_in(conn)) == [*(f"off-{n}" for n in range(4)), "warm-up"]
