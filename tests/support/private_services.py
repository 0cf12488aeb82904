"""A private RabbitMQ node on free ports, for tests that stop the broker.

The machine's shared broker is never stopped (other engineers' test runs use
it at the same time): a test that needs an outage runs its own node with its
own node name (with a uuid), node and distribution ports, data and log
directories, config file and empty plugin list; it is stopped and its
directory removed at the end. PostgreSQL: tests.support.private_postgres;
Redis: tests.support.private_redis.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tasks.processes import Child, spawn, wait_for
from tests.support.private_redis import PrivateRedis
from tests.support.services import free_port, port_open


@dataclass
class PrivateRabbit:
    """A second RabbitMQ node; ``stop``/``start`` stop and start its broker application
    (every connection closes, queues stop and recover from disk)."""

    root: Path
    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    node: str = field(default_factory=lambda: f"recur-test-{uuid.uuid4().hex[:12]}@localhost")
    child: Child | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        return {**os.environ,
                "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(self.dist_port),
                "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"),
                "RABBITMQ_LOG_BASE": str(self.root / "log"),
                "RABBITMQ_CONFIG_FILE": str(self.root / "rabbitmq.conf"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
                # Not the machine's rabbitmq-env.conf: it names the shared node.
                "RABBITMQ_CONF_ENV_FILE": str(self.root / "rabbitmq-env.conf"),
                "ERL_EPMD_ADDRESS": "127.0.0.1"}

    def boot(self) -> None:
        for name in ("mnesia", "log"):
            (self.root / name).mkdir()
        (self.root / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n")
        (self.root / "enabled_plugins").write_text("[].\n")
        (self.root / "rabbitmq-env.conf").write_text("")
        shutil.chown(self.root, "rabbitmq", "rabbitmq")
        for path in self.root.rglob("*"):
            shutil.chown(path, "rabbitmq", "rabbitmq")
        self.child = spawn("rabbitmq", ["rabbitmq-server"], self.root, self.env())
        wait_for(self.accepting, 120, f"private RabbitMQ node {self.node}")

    def accepting(self) -> bool:
        if self.child is not None and self.child.proc.poll() is not None:
            raise RuntimeError(f"private RabbitMQ exited:\n{self.child.log()[-3000:]}")
        return port_open(self.port)

    def ctl(self, *args: str) -> None:
        result = subprocess.run(["rabbitmqctl", "-n", self.node, *args], env=self.env(),
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {result.stdout}{result.stderr}")

    def stop(self) -> None:
        self.ctl("stop_app")

    def start(self) -> None:
        self.ctl("start_app")
        wait_for(self.accepting, 60, f"private RabbitMQ node {self.node} back")

    def shutdown(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl("stop")
        if self.child is not None:
            self.child.stop()


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


@contextmanager
def private_rabbit() -> Iterator[PrivateRabbit]:
    root = Path(tempfile.mkdtemp(prefix="recur-rabbit-"))
    server = PrivateRabbit(root)
    try:
        server.boot()
        yield server
    finally:
        server.shutdown()
        shutil.rmtree(root, ignore_errors=True)
