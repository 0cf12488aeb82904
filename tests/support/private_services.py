"""A private RabbitMQ node whose broker a test stops and starts: an outage.

The node is tests.support.rabbit_cluster's (its own node name with a uuid,
free AMQP and distribution ports, its own data, log, config and an empty
plugin list: other engineers run private nodes at the same time), alone.
``stop`` stops its broker application (every connection closes, the queues
stop) and ``start`` starts it again (the queues recover from disk); the
shared node on 5672 is never touched. Redis: tests.support.private_redis;
PostgreSQL: tests.support.private_postgres.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.private_redis import PrivateRedis
from tests.support.processes import wait_for
from tests.support.rabbit_cluster import RabbitNode, rabbitmqctl
from tests.support.services import port_open

#: Node index of the outage tests' node (the cluster helper numbers its nodes from 0).
NODE_INDEX = 90


@dataclass
class PrivateRabbit:
    """One private node; ``url`` is its AMQP URL."""

    node: RabbitNode

    @property
    def url(self) -> str:
        return self.node.url

    def stop(self) -> None:
        rabbitmqctl(self.node.name, "stop_app")

    def start(self) -> None:
        rabbitmqctl(self.node.name, "start_app")
        wait_for(lambda: port_open(self.node.port), 60, f"node {self.node.name} back")


@contextmanager
def private_rabbit() -> Iterator[PrivateRabbit]:
    """A started private node; stopped and its files removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="recur-rabbit-"))
    shutil.chown(root, "rabbitmq", "rabbitmq")
    node = RabbitNode(NODE_INDEX, root / "node")
    try:
        node.prepare()
        node.start()
        yield PrivateRabbit(node)
    finally:
        node.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """A started private Redis; stopped and its directory removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="recur-redis-"))
    server = PrivateRedis(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
