"""A private RabbitMQ vhost, Redis prefix and PostgreSQL schema for the scheduler benchmarks.

Import this module before anything that reads the settings: it points the
``RECUR_*`` variables of this process (and of the children it starts) at the
private resources, which :func:`teardown` removes.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import psycopg

RUN = uuid.uuid4().hex[:8]
VHOST = f"recur-bench-sched-{RUN}"
SCHEMA = f"recur_bench_{RUN}"
PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PG_URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{SCHEMA}"
BROKER_URL = f"amqp://guest:guest@127.0.0.1:5672/{VHOST}"
ENV = {"RECUR_BROKER_URL": BROKER_URL, "RECUR_DATABASE_URL": PG_URL,
       "RECUR_KEY_PREFIX": f"recur-bench-sched-{RUN}", "RECUR_LOG_LEVEL": "WARNING",
       "RECUR_WORK_SCALE": "0"}
ROOT = Path(__file__).resolve().parents[1]
os.environ.update(ENV)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def pg(sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        cur = conn.execute(sql)
        return list(cur.fetchall()) if cur.description else []


def setup() -> None:
    """Create the vhost (with the bucket queues) and the migrated schema."""
    from config.settings import settings
    from routing.queues import declare_topology
    from scheduler.engine import make_engine
    from scheduler.migrate import upgrade
    from tasks.app import app

    rabbitmqctl("add_vhost", VHOST)
    rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
    with app.connection_for_write() as conn:
        declare_topology(conn, settings())
    pg(f"CREATE SCHEMA {SCHEMA}")
    engine = make_engine(PG_URL)
    upgrade(engine)
    engine.dispose()


def teardown() -> None:
    from scheduler.store import close_stores

    close_stores()
    subprocess.run(["rabbitmqctl", "delete_vhost", VHOST], capture_output=True, timeout=120)
    pg(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def seed_sql(count: int, bucket: str, due_sql: str, task: str = "tasks.recurring_message",
             every: float = 3600.0, start: int = 0) -> str:
    """Server-side INSERT of ``count`` recurring jobs (row i due at ``due_sql``, using i)."""
    message = ("json_build_object('args', json_build_array(json_build_object("
               f"'id', 'j' || i, 'user_id', 'u' || (i % 1000), 'bucket', '{bucket}', "
               f"'payload', json_build_object('every', {every}, 'runs', NULL))), "
               "'kwargs', '{}'::json)::text")
    return (f"INSERT INTO {SCHEMA}.due_jobs (job_key, task, bucket, args, due_at) "
            f"SELECT 'j' || i, '{task}', '{bucket}', {message}, {due_sql} "
            f"FROM generate_series({start + 1}, {start + count}) AS i")
