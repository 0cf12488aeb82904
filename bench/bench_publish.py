"""Publishing a message task: recur's validated, bucket-routed apply_async against plain Celery.

Both publish persistent messages with publisher confirms to the same broker; the
baseline is a plain Celery app (no recur router, no validation) sending the same
task by name to the same queues. The difference is what validating and routing
by message costs per call.

    python -m bench.bench_publish [--messages 3000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

from celery import Celery

from bench.results_io import write_result
from config.buckets_in_use import BUCKETS
from routing.queues import declare_topology
from tasks.app import app
from tasks.process import process_message


def messages(n: int) -> list[dict[str, Any]]:
    return [{"id": f"bench-{i}", "user_id": str(uuid.uuid4()),
             "bucket": BUCKETS[i % len(BUCKETS)].name, "payload": {"n": i}} for i in range(n)]


def timed(calls: list[Any]) -> dict[str, float]:
    """Run each call; rate and per-call latency percentiles in microseconds."""
    lat = []
    start = time.perf_counter()
    for call in calls:
        t0 = time.perf_counter()
        call()
        lat.append((time.perf_counter() - t0) * 1e6)
    wall = time.perf_counter() - start
    lat.sort()
    return {"calls": len(calls), "per_second": round(len(calls) / wall, 1),
            "median_us": round(statistics.median(lat), 1),
            "p99_us": round(lat[int(len(lat) * 0.99) - 1], 1)}


def purge() -> None:
    with app.connection_for_write() as conn, conn.channel() as channel:
        for bucket in BUCKETS:
            channel.queue_purge(bucket.queue)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=3000)
    n = parser.parse_args().messages
    from config.settings import settings

    with app.connection_for_write() as conn:
        declare_topology(conn, settings())
    batch = messages(n)
    process_message.delay(batch[0])  # warm the producer pool
    purge()
    ours = timed([lambda m=m: process_message.delay(m) for m in batch])
    purge()
    plain_app = Celery("plain", broker=settings().broker_url, set_as_current=False)
    plain_app.conf.update(broker_transport_options={"confirm_publish": True},
                          task_serializer="json", task_create_missing_queues=False,
                          task_queues=app.conf.task_queues)
    queue = {b.name: b.queue for b in BUCKETS}
    plain = timed([lambda m=m: plain_app.send_task("tasks.process_message", args=[m],
                                                   queue=queue[m["bucket"]]) for m in batch])
    purge()
    write_result("publish", {
        "command": f"python -m bench.bench_publish --messages {n}",
        "recur_delay": ours, "plain_celery_no_router": plain,
        "ratio_recur_to_plain": round(ours["per_second"] / plain["per_second"], 3),
    })


if __name__ == "__main__":
    main()
