"""A private RabbitMQ vhost, Redis key prefix and PostgreSQL schema for one benchmark run.

``PrivateEnv("seed").activate()`` points this process's ``RECUR_*`` variables (and
so those of the children it starts) at resources named after the run; call it
before anything reads the settings. :meth:`teardown` removes them.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

#: The PostgreSQL server every benchmark uses, on 127.0.0.1: the machine's shared one
#: (5432) unless ``RECURBENCH_PG_PORT`` names another, e.g. the private server
#: ``bench/private_postgres.py`` starts (autovacuum on). Its database ``test``. (Not a
#: ``RECUR_`` name: the settings refuse a ``RECUR_`` variable they do not know.)
PG_PORT = int(os.environ.get("RECURBENCH_PG_PORT", "5432"))
PG_DSN = f"postgresql://postgres@127.0.0.1:{PG_PORT}/test"


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def pg(sql: str) -> list[tuple[Any, ...]]:
    """Run one statement on the benchmarks' database; its rows, if any."""
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        cur = conn.execute(sql)
        return list(cur.fetchall()) if cur.description else []


@dataclass(frozen=True)
class PrivateEnv:
    """Names and set-up of one benchmark run's own resources."""

    name: str
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def vhost(self) -> str:
        return f"recur-bench-{self.name}-{self.run}"

    @property
    def schema(self) -> str:
        return f"recur_bench_{self.name}_{self.run}"

    @property
    def pg_url(self) -> str:
        return (f"postgresql+psycopg://postgres@127.0.0.1:{PG_PORT}/test"
                f"?options=-csearch_path%3D{self.schema}")

    @property
    def broker_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:5672/{self.vhost}"

    def environment(self, **extra: str) -> dict[str, str]:
        """The RECUR_* variables that select these resources."""
        return {"RECUR_BROKER_URL": self.broker_url, "RECUR_DATABASE_URL": self.pg_url,
                "RECUR_KEY_PREFIX": f"recur-bench-{self.name}-{self.run}",
                "RECUR_LOG_LEVEL": "WARNING", **extra}

    def activate(self, **extra: str) -> PrivateEnv:
        os.environ.update(self.environment(**extra))
        return self

    def setup(self) -> None:
        """Create the vhost (with the bucket queues) and the migrated schema."""
        from config.settings import settings
        from routing.queues import declare_topology
        from scheduler.store.connection import make_engine
        from scheduler.store.migrate import upgrade
        from tasks.app import app

        rabbitmqctl("add_vhost", self.vhost)
        rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        with app.connection_for_write() as conn:
            declare_topology(conn, settings())
        pg(f"CREATE SCHEMA {self.schema}")
        engine = make_engine(self.pg_url)
        upgrade(engine)
        engine.dispose()

    def teardown(self) -> None:
        subprocess.run(["rabbitmqctl", "delete_vhost", self.vhost], capture_output=True,
                       timeout=120)
        pg(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
