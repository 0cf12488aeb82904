"""A real ``recur scheduler`` meets rows it cannot publish (written straight into the store,
as an older version or another writer could): it sets each aside with its reason, publishes
the rest of the batch, keeps its one broker connection and never claims them again; `recur
dead list` shows them. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kombu import Connection

from routing.broker import queue_depth
from scheduler.store import DueStore, Job
from tests.integration.test_cli_errors import run_recur
from tests.integration.test_exporter import parse
from tests.support import services
from tests.support.processes import Child, wait_for
from tests.support.scheduler_support import worker_env

pytestmark = pytest.mark.services

TASK = "tasks.process_message"
GOOD = 20


def due(key: str, args: str | None = None, bucket: str = "short") -> Job:
    return Job(key, TASK, bucket, args or json.dumps([f"user-{key[:20]}", {"n": 1}]),
               datetime.now(UTC) - timedelta(seconds=1))


def bad_rows(dialect: str) -> dict[str, Job]:
    """key -> row the broker cannot take (PostgreSQL's index holds a compressible key of
    200,000 bytes: more than a broker frame)."""
    huge = "k" * (200_000 if dialect == "postgresql" else 300_000)
    found = {huge: due(huge), "big-args": due("big-args", json.dumps(["u", "x" * 70_000])),
             "undecodable": due("undecodable", '{"args": 5}'),
             "gone-1": due("gone-1", bucket="gone")}
    if dialect == "sqlite":  # PostgreSQL's user index refuses this text at the write
        found["lone-surrogate"] = due("lone-surrogate", '["user-s", {"name": "\\ud800"}]')
    return found


def rows(store: DueStore) -> dict[str, tuple[int, Any]]:
    with store.engine.connect() as conn:
        return {k: (s, at) for k, s, at in conn.exec_driver_sql(
            "SELECT job_key, state, updated_at FROM due_jobs")}


def samples(child: Child, port: int) -> dict[Any, float]:
    if child.proc.poll() is not None:
        raise RuntimeError(f"{child.name} exited:\n{child.log()[-3000:]}")
    try:
        return parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    except httpx.TransportError:
        return {}


def counted(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_bad_rows_are_set_aside_and_the_scheduler_goes_on(
        store_url: str, broker: Connection, start_scheduler: Any, tmp_path: Path) -> None:
    store = DueStore.open(store_url)
    good = [due(f"good-{i:02d}") for i in range(GOOD)]
    bad = bad_rows(store.dialect)
    store.schedule(good[:10] + list(bad.values()) + good[10:], datetime.now(UTC))
    port = services.free_port()
    scheduler = start_scheduler(worker_env(store_url, RECUR_METRICS_PORT=str(port),
                                           RECUR_DRAIN_THREADS="1", RECUR_PULL_FORWARD=""))

    def settled() -> bool:
        found = rows(store)
        return (all(found[k][0] == 2 for k in bad)
                and all(found[j.job_key][0] == 1 for j in good))

    # The row of a bucket no longer in the table: after RECUR_UNKNOWN_BUCKET_GRACE (10 s).
    wait_for(settled, 60, "bad rows set aside and good rows dispatched")
    wait_for(lambda: queue_depth(broker, "short") == GOOD, 10, "the good rows' messages")
    first = samples(scheduler, port)
    aside = {(bucket, reason): counted(first, "recur_scheduler_set_aside_total", bucket=bucket,
                                       reason=reason)
             for bucket, reason in [("short", "too_large"), ("short", "undecodable"),
                                    ("gone", "unknown_bucket")]}
    assert aside == {("short", "too_large"): 2, ("short", "undecodable"): len(bad) - 3,
                     ("gone", "unknown_bucket"): 1}
    assert counted(first, "recur_scheduler_broker_connections_total") == 1
    assert counted(first, "recur_scheduler_dispatched_total", bucket="short", kind="due") == GOOD
    # Passes go on (a row due 3 s later is dispatched by one of the ~30 passes meanwhile):
    # nothing claimed again, no reconnect, the set-aside rows untouched.
    before = rows(store)
    late = Job("late", TASK, "short", json.dumps(["user-late", None]),
               datetime.now(UTC) + timedelta(seconds=3))
    store.schedule([late], datetime.now(UTC))
    wait_for(lambda: rows(store)["late"][0] == 1, 30, "a row due later dispatched")
    later = samples(scheduler, port)
    assert counted(later, "recur_scheduler_broker_connections_total") == 1
    assert sum(v for (name, _), v in later.items()
               if name == "recur_scheduler_set_aside_total") == len(bad)
    assert {k: rows(store)[k] for k in bad} == {k: before[k] for k in bad}
    assert queue_depth(broker, "short") == GOOD + 1
    check_dead_list(store_url, bad, tmp_path)
    store.close()


def check_dead_list(store_url: str, bad: dict[str, Job], tmp_path: Path) -> None:
    env = {"RECUR_DATABASE_URL": store_url}
    listed = run_recur(["dead", "list", "short"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if "from=store" in line]
    assert len(lines) == len(bad) - 1
    assert any("job_key: " in line and "at most 512" in line for line in lines)
    assert any(line.startswith("job undecodable ") and "cannot be decoded" in line
               for line in lines)
    every = run_recur(["dead", "list", "--store", "--json"], env, tmp_path)
    assert every.returncode == 0, every.stderr
    found = {doc["job_key"]: doc for doc in map(json.loads, every.stdout.splitlines())}
    assert set(found) == set(bad)
    assert "not in the bucket table" in found["gone-1"]["reason"]
    # One row whose call cannot be decoded does not stop the job commands: it shows its
    # stored text.
    jobs = run_recur(["jobs", "list", "--json", "--limit", "100"], env, tmp_path)
    assert jobs.returncode == 0, jobs.stderr
    listed_keys = {doc.get("job_key") for doc in map(json.loads, jobs.stdout.splitlines())}
    assert set(bad) < listed_keys
    shown = run_recur(["jobs", "show", "undecodable"], env, tmp_path)
    assert shown.returncode == 0 and '"{\\"args\\": 5}"' in shown.stdout, shown
    moved = run_recur(["jobs", "reschedule", "undecodable", "--in", "1h"], env, tmp_path)
    assert moved.returncode == 2 and "is set-aside, not scheduled" in moved.stderr, moved
    gone = run_recur(["dead", "list", "gone"], env, tmp_path)  # a bucket that left the table
    assert gone.returncode == 0 and "job gone-1 " in gone.stdout
    nope = run_recur(["dead", "list", "nope"], env, tmp_path)
    assert nope.returncode == 2 and "unknown bucket 'nope'" in nope.stderr
    too_many = run_recur(["dead", "list", "short", "--limit", "5000"], env, tmp_path)
    assert too_many.returncode == 2
    assert too_many.stderr.strip() == "recur: --limit must be 1..1000, got 5000"


def test_a_key_with_terminal_escapes_is_shown_escaped(store_url: str, tmp_path: Path) -> None:
    """A job key another writer put in the store with control characters (apply_async
    refuses them) is printed escaped by the job and dead-letter commands: raw, it would
    clear the operator's screen or split a listing's line."""
    store = DueStore.open(store_url)
    key = "esc\x1b[2J\nkey"
    store.schedule([due(key)], datetime.now(UTC) + timedelta(hours=1))
    store.close()
    env = {"RECUR_DATABASE_URL": store_url}
    outputs = [run_recur(args, env, tmp_path) for args in (
        ["jobs", "list"], ["jobs", "show", key], ["jobs", "reschedule", key, "--in", "2h"])]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert "\x1b" not in done.stdout and "esc\\x1b[2J\\nkey" in done.stdout, done.stdout
    assert len(outputs[0].stdout.splitlines()) == 2  # the job's line and the footer


def test_cancelling_a_users_jobs_counts_every_state(store_url: str, tmp_path: Path) -> None:
    """`jobs cancel --user` totals the rows it deleted: the set-aside ones are named in the
    breakdown too, not only in the total."""
    from sqlalchemy import text

    store = DueStore.open(store_url)
    later = datetime.now(UTC) + timedelta(hours=1)
    store.schedule([Job(f"c{i}", TASK, "short", json.dumps(["canceller", None]), later)
                    for i in range(3)], datetime.now(UTC))
    with store.transaction("set one aside") as conn:
        conn.execute(text("UPDATE due_jobs SET state = 2 WHERE job_key = 'c0'"))
    store.close()
    done = run_recur(["jobs", "cancel", "--user", "canceller"],
                     {"RECUR_DATABASE_URL": store_url}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("cancelled 3 job(s) of user canceller: 2 scheduled, 0 dispatched, "
                           "1 set-aside\n")
