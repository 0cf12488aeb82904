"""A private RabbitMQ vhost, Redis prefix and PostgreSQL schema for the scheduler benchmarks.

Import this module before anything that reads the settings: it points the
``RECUR_*`` variables of this process (and of the children it starts) at the
private resources, which :func:`teardown` removes.
"""

from __future__ import annotations

from pathlib import Path

from bench.private_env import PrivateEnv, pg
from scheduler.wire import encode_call

ENVIRONMENT = PrivateEnv("sched").activate(RECUR_WORK_SCALE="0")
RUN = ENVIRONMENT.run
VHOST = ENVIRONMENT.vhost
SCHEMA = ENVIRONMENT.schema
PG_URL = ENVIRONMENT.pg_url
BROKER_URL = ENVIRONMENT.broker_url
ENV = ENVIRONMENT.environment(RECUR_WORK_SCALE="0")
ROOT = Path(__file__).resolve().parents[1]
setup = ENVIRONMENT.setup
__all__ = ["BROKER_URL", "ENV", "PG_URL", "ROOT", "RUN", "SCHEMA", "VHOST", "pg", "purge",
           "seed_sql", "setup", "teardown"]


def purge(queue: str = "short") -> None:
    """Empty a bucket queue of the bench vhost between two contenders."""
    from tasks.app import app

    with app.connection_for_write() as conn, conn.channel() as channel:
        channel.queue_purge(queue)


def teardown() -> None:
    from scheduler.store import close_stores

    close_stores()
    ENVIRONMENT.teardown()


def seed_sql(count: int, bucket: str, due_sql: str, task: str = "tasks.process_message",
             every: float = 3600.0, start: int = 0) -> str:
    """Server-side INSERT of ``count`` recurring jobs (row i due at ``due_sql``, using i).

    Each is a message of one of 100,000 users (UUIDs, as recur's users are)
    whose payload says it recurs every ``every`` seconds, with ``args`` in the
    stored form ``scheduler.wire.encode_call`` writes (the message's id
    and bucket are the row's job_key and bucket).
    """
    user = "@user@"
    message = {"id": "j", "user_id": user, "bucket": bucket,
               "payload": {"every": every, "runs": None}}
    head, tail = encode_call([message], {}, job_key="j", bucket=bucket).split(user)
    args = f"'{head}' || md5((i % 100000)::text)::uuid::text || '{tail}'"
    return (f"WITH new AS (INSERT INTO {SCHEMA}.due_tasks (name) VALUES ('{task}') "
            f"ON CONFLICT (name) DO NOTHING RETURNING code) "
            f"INSERT INTO {SCHEMA}.due_jobs (job_key, task_id, bucket, args, due_at) "
            f"SELECT 'j' || i, coalesce((SELECT code FROM new), (SELECT code FROM "
            f"{SCHEMA}.due_tasks WHERE name = '{task}')), '{bucket}', {args}, {due_sql} "
            f"FROM generate_series({start + 1}, {start + count}) AS i")
