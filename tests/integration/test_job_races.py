"""Races on one job, through the public API, on SQLite, PostgreSQL and PostgreSQL with a
SERIALIZABLE default isolation: one key written at
once by many threads and processes (``apply_async`` with countdown or eta, ``apply_many``,
group commit), a key given twice in one ``apply_many``, and an operator's cancel or
reschedule racing the scheduler's dispatch and the running task's own reschedule
(docs/scheduler.md, "Races on one job")."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import JobInFlight
from scheduler import jobs as api
from scheduler.store import Claimed, DueStore
from scheduler.store.control import JobControl
from scheduler.wire import DISPATCH_HEADER, decode_call, dispatch_header
from tasks.app import app as celery_app
from tasks.process import process_message
from tasks.revoke import cancel_job
from tests.integration.test_apply_many import row
from tests.integration.test_group_commit import keys_in, other_connection, run_threads
from tests.support import race_tasks, services
from tests.support.processes import wait_for
from tests.support.race_child import COUNTDOWN_BASE, ETA_BASE, SPACING, version_call
from tests.support.race_tasks import race_self_reschedule
from tests.support.store_fixtures import own_pg_schema, run_pg

THREADS = 16
PROCESSES, PROCESS_THREADS = 4, 8
#: A database whose default isolation is SERIALIZABLE (a DBA's choice recur must live
#: with): of two concurrent writers of a row the server rolls one back (40001).
SERIALIZABLE = "%20-cdefault_transaction_isolation%3Dserializable"


@pytest.fixture(scope="module")
def serializable_pg(pg_url: str) -> Iterator[tuple[str, str]]:
    """A migrated PostgreSQL schema of this module's, its URL SERIALIZABLE by default."""
    with own_pg_schema("recur_race") as (schema, url):
        yield schema, url + SERIALIZABLE


@pytest.fixture(params=["sqlite", "postgresql", "pg-serializable"])
def race_url(request: pytest.FixtureRequest) -> str:
    """A fresh store: SQLite, PostgreSQL, and PostgreSQL SERIALIZABLE by default."""
    if request.param == "pg-serializable":
        schema, url = request.getfixturevalue("serializable_pg")
        run_pg(f"TRUNCATE {schema}.due_jobs, {schema}.due_set_aside")
        return str(url)
    return str(
        request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "fresh_pg_url")
    )


@pytest.fixture
def race_store(race_url: str, use_store: Callable[[str], None]) -> Iterator[DueStore]:
    """The store the app's tasks use for this test, opened for the test to read."""
    use_store(race_url)
    store = DueStore.open(race_url)
    yield store
    store.close()


def check_one_whole_version(url: str, key: str, versions: range, since: datetime) -> int:
    """The key has one row, holding one submitted version whole (its payload and its own
    due time); that version."""
    with other_connection(url) as conn:
        assert [k for k in keys_in(conn) if k == key] == [key]
    got = row(url, key)
    args, _, _ = decode_call(got["args"], key, "short")
    version = args[0]["payload"]["version"]
    assert version in versions
    if version % 4 in (1, 2):  # an eta: exact
        assert got["due_at"] == ETA_BASE + timedelta(seconds=SPACING * version)
    else:  # a countdown from the moment of its call
        delay = timedelta(seconds=COUNTDOWN_BASE + SPACING * version)
        assert since + delay <= got["due_at"] <= datetime.now(UTC) + delay
    return int(version)


def test_one_key_from_sixteen_threads_keeps_one_whole_version(
    race_url: str, race_store: DueStore
) -> None:
    process_message.apply_async(
        ({"id": "warm", "user_id": "u", "bucket": "short", "payload": {}},), countdown=3600
    )
    since = datetime.now(UTC)
    start = threading.Barrier(THREADS)

    def call(n: int) -> None:
        start.wait()
        version_call("race-threads", n)

    assert run_threads(THREADS, call) == []
    check_one_whole_version(race_url, "race-threads", range(THREADS), since)


def race_processes(url: str, key: str) -> list[str]:
    """PROCESSES producer processes, PROCESS_THREADS threads each, one call each on ``key``,
    all let go at once; every line they printed."""
    env = {**os.environ, **services.test_environment(), "RECUR_DATABASE_URL": url}
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.race_child",
                key,
                str(p * PROCESS_THREADS),
                str(PROCESS_THREADS),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=services.ROOT,
        )
        for p in range(PROCESSES)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n", (
                child.stderr.read() if child.stderr else ""
            )
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        lines, errors = [], []
        for child in children:
            out, err = child.communicate(timeout=60)
            lines += out.splitlines()
            if child.returncode != 0 or "Traceback" in err:
                errors.append(err)
        assert errors == []
        return lines
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()


def test_one_key_from_four_processes_keeps_one_whole_version(
    race_url: str, race_store: DueStore
) -> None:
    since = datetime.now(UTC)
    lines = race_processes(race_url, "race-processes")
    assert sorted(lines) == sorted(f"ok {v}" for v in range(PROCESSES * PROCESS_THREADS))
    check_one_whole_version(race_url, "race-processes", range(PROCESSES * PROCESS_THREADS), since)


# -- a key given twice in one apply_many ----------------------------------------------


@pytest.mark.parametrize("order", ["later-last", "earlier-last"])
def test_a_key_given_twice_in_one_apply_many_keeps_its_last_call(
    race_url: str, race_store: DueStore, order: str
) -> None:
    etas = [ETA_BASE + timedelta(hours=1), ETA_BASE + timedelta(hours=2)]
    if order == "earlier-last":
        etas.reverse()
    for round_ in range(2):  # a new key (PostgreSQL: COPY), then one already there (merge)
        calls = [
            process_message.s(race_message("twice", version)).set(
                job_key="twice", eta=etas[version]
            )
            for version in (0, 1)
        ]
        assert process_message.apply_many([*calls, race_message(f"other-{round_}", 0)]) == [
            "twice",
            "twice",
            f"other-{round_}",
        ]
        got = row(race_url, "twice")
        args, _, _ = decode_call(got["args"], "twice", "short")
        assert (args[0]["payload"]["again"], got["due_at"]) == (1, etas[1])
        with other_connection(race_url) as conn:
            assert sorted(keys_in(conn)) == sorted(
                ["twice", *(f"other-{n}" for n in range(round_ + 1))]
            )


# -- cancel and reschedule racing dispatch and the run's own reschedule --------------------


def race_message(key: str, again: int = 600) -> dict[str, Any]:
    return {"id": key, "user_id": "u-race", "bucket": "short", "payload": {"again": again}}


def dispatch_all(
    store: DueStore, publish: Callable[[list[Claimed]], None] | None = None
) -> list[Claimed]:
    """One dispatch pass of the bucket, as the scheduler runs it; the rows it published."""
    got: list[Claimed] = []

    def published(rows: list[Claimed]) -> None:
        got.extend(rows)
        if publish is not None:
            publish(rows)

    now = datetime.now(UTC)
    store.dispatch("short", 100, now, now + timedelta(minutes=30), published)
    return got


def run_copy(copy: Claimed) -> None:
    """The published copy run as a worker runs it: Celery's tracer, the dispatch header."""
    args, kwargs, _ = decode_call(copy.args, copy.job_key, copy.bucket)
    race_self_reschedule.apply(
        args=args,
        kwargs=kwargs,
        task_id=copy.job_key,
        throw=True,
        headers={
            DISPATCH_HEADER: dispatch_header(
                copy.job_key, copy.token, copy.lease_until, copy.due_at
            )
        },
    )


def stored(store: DueStore, key: str) -> Any:
    return JobControl(store).get(key)


@pytest.fixture
def hook() -> Iterator[Callable[[Callable[[str], None] | None], None]]:
    def set_hook(work: Callable[[str], None] | None) -> None:
        race_tasks.hook = work

    race_tasks.accepted.clear()
    yield set_hook
    race_tasks.hook = None
    race_tasks.accepted.clear()


def waiting_on_a_lock(url: str) -> bool:
    """Whether a statement of this database waits for a row lock (PostgreSQL)."""
    with other_connection(url) as conn:
        return (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                "'Lock' AND query LIKE 'DELETE FROM due_jobs%%'"
            ).fetchone()[0]
            > 0
        )


def test_a_cancel_during_the_dispatch_leaves_nothing_to_run(
    race_url: str, race_store: DueStore, hook: Any
) -> None:
    ctl, cancelled = JobControl(race_store), []
    race_self_reschedule.apply_async(
        (race_message("c-dispatch"),), job_key="c-dispatch", countdown=0
    )

    def cancelling() -> None:
        try:
            cancelled.append(cancel_job(celery_app, ctl, "c-dispatch").state)
        except Exception as exc:  # the assertion below shows it
            cancelled.append(f"{type(exc).__name__}: {exc}")

    cancel = threading.Thread(target=cancelling)

    def publish(_rows: list[Claimed]) -> None:  # the row is claimed, not yet dispatched
        cancel.start()
        if race_url.startswith("sqlite"):
            cancel.join(0.3)  # it waits for the dispatch's write lock
        else:
            wait_for(lambda: waiting_on_a_lock(race_url), 10, "the cancel to wait")
        assert cancel.is_alive()

    (copy,) = dispatch_all(race_store, publish)
    cancel.join(30)
    assert cancelled == ["dispatched"]
    run_copy(copy)  # the copy already published: dropped at its token check
    assert race_tasks.accepted == []
    assert stored(race_store, "c-dispatch") is None
    assert dispatch_all(race_store) == []


def test_a_cancel_during_the_run_races_its_own_reschedule(
    race_url: str, race_store: DueStore, hook: Any
) -> None:
    ctl = JobControl(race_store)
    threads: list[threading.Thread] = []

    def cancel_now(key: str) -> None:
        cancel_job(celery_app, ctl, key)

    def cancel_alongside(key: str) -> None:  # cancelled while the run reschedules itself
        threads.append(threading.Thread(target=cancel_now, args=(key,)))
        threads[-1].start()

    for n, during in enumerate([cancel_now, *[cancel_alongside] * 6]):
        key = f"c-run-{n}"
        race_self_reschedule.apply_async((race_message(key),), job_key=key, countdown=0)
        (copy,) = dispatch_all(race_store)
        hook(during)
        run_copy(copy)  # this copy runs once: it was dispatched before the cancel
        for thread in threads:
            thread.join(30)
        assert stored(race_store, key) is None, during.__name__
        assert dispatch_all(race_store) == []
    assert race_tasks.accepted[0] is False  # its reschedule came after the cancel


#: The operator's reschedule and the run's own are let go together, the run's after a lag
#: that grows from 0 to LAG_MAX seconds over LAGS rounds: they meet at every moment of the
#: operator's move and read (PostgreSQL: ~10 rounds meet between the two).
LAGS, LAG_MAX = 80, 0.008


def test_an_operators_reschedule_races_the_runs_own_reschedule(
    race_url: str, race_store: DueStore, hook: Any
) -> None:
    ctl, outcomes = JobControl(race_store), []
    operators_time = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)

    def operator(key: str, start: threading.Barrier) -> None:
        start.wait()
        try:
            api.reschedule(ctl, key, operators_time)
            outcomes.append("moved")
        except JobInFlight as exc:
            outcomes.append("refused" if "is dispatched" in str(exc) else str(exc))

    for n in range(LAGS):
        key, start = f"r-run-{n}", threading.Barrier(2)
        race_self_reschedule.apply_async((race_message(key),), job_key=key, countdown=0)
        (copy,) = dispatch_all(race_store)
        thread = threading.Thread(target=operator, args=(key, start))
        thread.start()
        hook(
            lambda _key, start=start, lag=LAG_MAX * (n / LAGS) ** 2: (start.wait(), time.sleep(lag))
        )
        before = datetime.now(UTC)
        run_copy(copy)
        thread.join(30)
        job = stored(race_store, key)
        assert job is not None and job.state == "scheduled"
        if outcomes[-1] == "moved":  # after the run's reschedule: the operator's time holds
            assert job.due_at == operators_time
        else:  # refused while dispatched: the run's time holds
            assert before + timedelta(seconds=600) <= job.due_at, outcomes[-1]
    assert set(outcomes) == {"moved", "refused"}  # the rounds spanned both orders
