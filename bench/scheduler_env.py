"""A private RabbitMQ vhost, Redis prefix and PostgreSQL schema for the scheduler benchmarks.

Import this module before anything that reads the settings: it points the
``RECUR_*`` variables of this process (and of the children it starts) at the
private resources, which :func:`teardown` removes.
"""

from __future__ import annotations

from pathlib import Path

from bench.private_env import PrivateEnv, pg

ENVIRONMENT = PrivateEnv("sched").activate(RECUR_WORK_SCALE="0")
RUN = ENVIRONMENT.run
VHOST = ENVIRONMENT.vhost
SCHEMA = ENVIRONMENT.schema
PG_URL = ENVIRONMENT.pg_url
BROKER_URL = ENVIRONMENT.broker_url
ENV = ENVIRONMENT.environment(RECUR_WORK_SCALE="0")
ROOT = Path(__file__).resolve().parents[1]
setup = ENVIRONMENT.setup
__all__ = ["BROKER_URL", "ENV", "PG_URL", "ROOT", "RUN", "SCHEMA", "VHOST", "pg", "seed_sql",
           "setup", "teardown"]


def teardown() -> None:
    from scheduler.store import close_stores

    close_stores()
    ENVIRONMENT.teardown()


def seed_sql(count: int, bucket: str, due_sql: str, task: str = "tasks.process_message",
             every: float = 3600.0, start: int = 0) -> str:
    """Server-side INSERT of ``count`` recurring jobs (row i due at ``due_sql``, using i).

    ``args`` is in the stored form ``scheduler.callargs.encode_call`` writes
    (compact; the message's id and bucket are the row's job_key and bucket).
    """
    message = ("'{\"args\":[{\"user_id\":\"u' || (i % 1000) || "
               f"'\",\"payload\":{{\"every\":{every},\"runs\":null}}}}]}}'")
    return (f"INSERT INTO {SCHEMA}.due_jobs (job_key, task, bucket, args, due_at) "
            f"SELECT 'j' || i, '{task}', '{bucket}', {message}, {due_sql} "
            f"FROM generate_series({start + 1}, {start + count}) AS i")
