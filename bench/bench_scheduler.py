"""Scheduler benchmarks, each with its baseline in the same run.

1. drain: due rows PostgreSQL → RabbitMQ (persistent, publisher confirms batched
   per claim) in rows/s through the scheduler's dispatch (its default lanes, and
   one lane), against a loop of plain Celery ``apply_async`` of the same
   messages, without confirms (Celery's default) and with kombu's per-message
   ``confirm_publish``, and against a minimal relay (the issue's reference).
2. lag: rows falling due at ``--lag-rate`` per second for ``--lag-seconds``;
   p50/p99/max of (broker-confirmed publish time − due time). Baseline: the
   same rows published the moment they fall due by a plain loop that sleeps
   until each due time and uses plain Celery ``apply_async`` (no store).
3. cycle: a no-op recurring task going round dispatch → worker (threads, 8) →
   reschedule, in runs/s, against the same no-op task on plain Celery consumed
   by the same kind of worker (no store).

Runs in its own RabbitMQ vhost and PostgreSQL schema, removed afterwards.

    python -m bench.bench_scheduler [--parts drain,lag,cycle] [--rows 50000]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import scheduler_env as benv  # first: points the settings at the bench resources
from bench.results_io import write_result


def plain_app(confirms: bool) -> Any:
    from celery import Celery

    from tasks.app import app

    plain = Celery("plain", broker=benv.BROKER_URL, set_as_current=False)
    plain.conf.update(task_serializer="json", task_create_missing_queues=False,
                      task_queues=app.conf.task_queues,
                      broker_transport_options={"confirm_publish": confirms})
    return plain


purge = benv.purge


def message(i: int) -> dict[str, Any]:
    return {"id": f"j{i}", "user_id": f"u{i % 1000}", "bucket": "short",
            "payload": {"every": 3600.0, "runs": None}}


def plain_loop(n: int, confirms: bool) -> dict[str, float]:
    """Plain Celery apply_async of n messages by task name to the short queue."""
    plain = plain_app(confirms)
    task = plain.signature("tasks.process_message")
    task.apply_async(args=[message(0)], queue="short")  # warm the producer pool
    t0 = time.perf_counter()
    for i in range(n):
        task.apply_async(args=[message(i)], queue="short")
    dt = time.perf_counter() - t0
    purge()
    return {"messages": n, "seconds": round(dt, 3), "per_second": round(n / dt)}


def drain(rows: int) -> dict[str, Any]:
    ours = scheduler_drain(rows, lanes=None)
    one_lane = scheduler_drain(rows, lanes=1)
    n = min(rows, 10_000)
    plain = plain_loop(n, confirms=False)
    plain_confirm = plain_loop(min(n, 4000), confirms=True)
    relay = minimal_relay(rows)
    return {"recur_drain": ours, "recur_drain_one_lane": one_lane,
            "plain_celery_apply_async": plain,
            "plain_celery_apply_async_confirm_publish": plain_confirm,
            "minimal_relay": relay,
            "ratio_to_plain": round(ours["per_second"] / plain["per_second"], 2),
            "ratio_to_minimal_relay": round(ours["per_second"] / relay["per_second"], 2),
            "goal": ">= 15000 rows/s and >= 3x plain apply_async"}


def scheduler_drain(rows: int, lanes: int | None) -> dict[str, Any]:
    """``rows`` due rows through the scheduler's own dispatch (its lanes, batches,
    confirms), as one pass with room for all of them."""
    import dataclasses

    from config.buckets_in_use import BUCKETS_BY_NAME
    from config.settings import settings
    from routing.queues import TASK_EXCHANGE
    from scheduler.drain import Scheduler
    from scheduler.publisher import ConfirmingPublisher
    from scheduler.store import DueStore

    cfg = settings() if lanes is None else dataclasses.replace(settings(), drain_threads=lanes)
    benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
    benv.pg(benv.seed_sql(rows, "short", "now() - interval '1 second'"))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    store = DueStore.open(benv.PG_URL)
    publisher = ConfirmingPublisher(benv.BROKER_URL, TASK_EXCHANGE.name)
    publisher.connect()
    scheduler = Scheduler(store, publisher, cfg)
    t0 = time.perf_counter()
    total = scheduler.dispatch(BUCKETS_BY_NAME["short"], rows, datetime.now(UTC), early=False)
    dt = time.perf_counter() - t0
    scheduler.close_publishers()
    store.close()
    purge()
    return {"rows": total, "batch": cfg.drain_batch, "lanes": cfg.drain_threads,
            "seconds": round(dt, 3), "per_second": round(total / dt)}


def minimal_relay(rows: int) -> dict[str, Any]:
    """The issue's reference: a bare relay on this machine, in this run.

    Claims 1,000 rows with one raw SQL statement, publishes each row's stored
    args as the body (no Celery message, no lease header) with the batch's
    confirms awaited together, marks the rows with one UPDATE: the ceiling a
    scheduler reaches here, without what makes the messages Celery tasks.
    """
    import psycopg

    from bench.private_env import PG_DSN
    from routing.queues import TASK_EXCHANGE
    from scheduler.publisher import ConfirmingPublisher
    from scheduler.task_message import TaskMessage

    benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
    benv.pg(benv.seed_sql(rows, "short", "now() - interval '1 second'"))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    publisher = ConfirmingPublisher(benv.BROKER_URL, TASK_EXCHANGE.name)
    publisher.connect()
    claim = (f"SELECT job_key, args FROM {benv.SCHEMA}.due_jobs WHERE bucket = 'short' "
             "AND state = 0 AND due_at <= now() ORDER BY due_at LIMIT 1000 "
             "FOR UPDATE SKIP LOCKED")
    mark = f"UPDATE {benv.SCHEMA}.due_jobs SET state = 1, token = token + 1 " \
           "WHERE job_key = ANY(%s)"
    total = 0
    with psycopg.connect(PG_DSN) as conn:
        t0 = time.perf_counter()
        while True:
            with conn.transaction():
                got = conn.execute(claim).fetchall()
                if not got:
                    break
                publisher.publish_messages([  # the batched-confirm writer, bare messages
                    (TASK_EXCHANGE.name, "short", TaskMessage(key, args.encode(), {"id": key}))
                    for key, args in got])
                conn.execute(mark, [[key for key, _ in got]])
            total += len(got)
        dt = time.perf_counter() - t0
    publisher.close()
    purge()
    return {"rows": total, "batch": 1000, "seconds": round(dt, 3),
            "per_second": round(total / dt),
            "how": "raw SQL claim of 1,000 rows, stored args published as bare bodies with "
                   "the batch's confirms awaited together, one UPDATE"}


class RecordingPublisher:
    """Publishes like the scheduler and notes (confirmed time − due time) per row."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.lags = inner, []  # type: list[float]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def publish(self, rows: list[Any]) -> None:
        self.inner.publish(rows)
        done = datetime.now(UTC)
        self.lags.extend((done - r.due_at).total_seconds() for r in rows)


def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"count": len(s), "p50_s": round(statistics.median(s), 3),
            "p99_s": round(s[int(len(s) * 0.99) - 1], 3), "max_s": round(s[-1], 3)}


def lag(rate: int, seconds: int) -> dict[str, Any]:
    from config.settings import load_settings
    from routing.queues import TASK_EXCHANGE
    from scheduler.drain import Scheduler
    from scheduler.publisher import ConfirmingPublisher
    from scheduler.store import DueStore

    rows = rate * seconds
    benv.pg(f"TRUNCATE {benv.SCHEMA}.due_jobs")
    start = datetime.now(UTC) + timedelta(seconds=3)
    due = f"'{start.isoformat()}'::timestamptz + (i * interval '1 microsecond' * {1e6 / rate})"
    benv.pg(benv.seed_sql(rows, "short", due))
    benv.pg(f"VACUUM ANALYZE {benv.SCHEMA}.due_jobs")
    cfg = load_settings({**benv.ENV, "RECUR_LOW_WATERMARK": "1000000000",
                         "RECUR_HIGH_WATERMARK": "1000000000", "RECUR_PULL_FORWARD": "",
                         "RECUR_SCHEDULER_INTERVAL": "0.05"})
    store = DueStore.open(benv.PG_URL)
    publisher = RecordingPublisher(ConfirmingPublisher(benv.BROKER_URL, TASK_EXCHANGE.name))
    scheduler = Scheduler(store, publisher, cfg)  # type: ignore[arg-type]
    runner = threading.Thread(target=scheduler.run)
    runner.start()
    deadline = time.monotonic() + seconds + 60
    while len(publisher.lags) < rows and time.monotonic() < deadline:
        time.sleep(0.2)
    scheduler.stopping.set()
    runner.join()
    store.close()
    purge()
    return {"recur_scheduler": {"rate_per_s": rate, "seconds": seconds, **pct(publisher.lags)},
            "plain_publish_at_due_time": plain_at_due(rate, min(seconds, 10)),
            "goal": "p99 <= 2 s"}


def plain_at_due(rate: int, seconds: int) -> dict[str, Any]:
    """Baseline: one loop publishing each message when it falls due (no store)."""
    task = plain_app(False).signature("tasks.process_message")
    start = time.time() + 0.5
    lags = []
    for i in range(rate * seconds):
        due = start + i / rate
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        task.apply_async(args=[message(i)], queue="short")
        lags.append(time.time() - due)
    purge()
    return {"rate_per_s": rate, "seconds": seconds, **pct(lags)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parts", default="drain,lag,cycle")
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--lag-rate", type=int, default=5000)
    parser.add_argument("--lag-seconds", type=int, default=20)
    parser.add_argument("--cycle-seconds", type=int, default=20)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    benv.setup()
    figures: dict[str, Any] = {"command": f"python -m bench.bench_scheduler --parts "
                               f"{args.parts} --rows {args.rows} --lag-rate {args.lag_rate} "
                               f"--lag-seconds {args.lag_seconds} "
                               f"--cycle-seconds {args.cycle_seconds}"}
    try:
        if "drain" in parts:
            figures["drain"] = drain(args.rows)
        if "lag" in parts:
            figures["lag"] = lag(args.lag_rate, args.lag_seconds)
        if "cycle" in parts:
            from bench.scheduler_cycle import cycle

            figures["cycle"] = cycle(args.cycle_seconds)
    finally:
        benv.teardown()
    write_result("scheduler", figures)


if __name__ == "__main__":
    main()
