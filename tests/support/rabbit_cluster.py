"""A private three-node RabbitMQ cluster on this machine, for tests that take nodes down.

Each node is the installed ``rabbitmq-server`` with its own node name (with a
uuid: other engineers run private nodes at the same time), AMQP and
distribution ports (free ones), data and log directories, config file and an
empty plugins list (the machine's node has the management plugin on its
ports). The Erlang cookie is the machine's (``/var/lib/rabbitmq``): the
server and ``rabbitmqctl`` both run as the ``rabbitmq`` user through the
packaged wrappers. Nodes two and three join the first with ``rabbitmqctl
join_cluster``. The shared node on 5672 is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.processes import Child, spawn, wait_for
from tests.support.services import free_port, port_open

RUN = uuid.uuid4().hex[:8]


def rabbitmqctl(node: str, *args: str, timeout: float = 120) -> str:
    result = subprocess.run(["rabbitmqctl", "-n", node, *args], capture_output=True,
                            text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"rabbitmqctl -n {node} {' '.join(args)}: "
                           f"{result.stdout}{result.stderr}")
    return result.stdout


@dataclass
class RabbitNode:
    """One node: started in the foreground of its own process group."""

    index: int
    base: Path
    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    child: Child | None = None

    @property
    def name(self) -> str:
        return f"recur-{RUN}-{self.index}@localhost"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def prepare(self) -> None:
        self.base.mkdir(parents=True)
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "cluster_partition_handling = pause_minority\n")
        (self.base / "enabled_plugins").write_text("[].\n")
        for path in (self.base, *self.base.iterdir()):
            shutil.chown(path, "rabbitmq", "rabbitmq")

    def env(self) -> dict[str, str]:
        return {**os.environ, "RABBITMQ_NODENAME": self.name,
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(self.dist_port),
                "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
                "RABBITMQ_LOG_BASE": str(self.base / "log"),
                "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
                "RABBITMQ_PID_FILE": str(self.base / "node.pid")}

    def start(self) -> None:
        self.child = spawn(f"rabbit-{self.index}", ["rabbitmq-server"], self.base, self.env())
        # The AMQP listener opens last in the node's boot (cheaper to poll than the CLI).
        wait_for(lambda: self.child is not None and self.child.proc.poll() is None
                 and port_open(self.port), 180, f"node {self.name} to accept connections")

    def vm_pid(self) -> int | None:
        """The Erlang VM's process id, while it runs."""
        with suppress(OSError, ValueError):
            pid = int((self.base / "node.pid").read_text())
            os.kill(pid, 0)
            return pid
        return None

    def kill9(self) -> None:
        """``kill -9`` the node's Erlang VM (a crash: no goodbye to the cluster)."""
        pid = self.vm_pid()
        assert pid is not None and self.child is not None, f"{self.name} is not running"
        os.kill(pid, signal.SIGKILL)
        self.child.proc.wait(timeout=60)

    def stop(self) -> None:
        """Stop the node and wait until its VM is gone (it writes its files until then)."""
        if self.child is not None:
            self.child.stop(timeout=30)
        with suppress(TimeoutError):
            wait_for(lambda: self.vm_pid() is None, 30, f"{self.name} to exit")
        if (pid := self.vm_pid()) is not None:
            os.kill(pid, signal.SIGKILL)


@dataclass
class RabbitCluster:
    """Three joined nodes; ``urls`` is kombu's failover list (``;``-separated)."""

    nodes: list[RabbitNode]

    @property
    def urls(self) -> str:
        return ";".join(node.url for node in self.nodes)

    def node(self, name: str) -> RabbitNode:
        return next(n for n in self.nodes if n.name == name)

    def queues(self, via: RabbitNode) -> dict[str, dict[str, Any]]:
        """name -> {type, leader, members, messages} as the cluster reports them."""
        out = rabbitmqctl(via.name, "list_queues", "name", "type", "leader", "members",
                          "messages", "--formatter", "json", "--quiet")
        return {q["name"]: q for q in json.loads(out)}

    def leader(self, queue: str, via: RabbitNode) -> RabbitNode:
        return self.node(str(self.queues(via)[queue]["leader"]))

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.child.log()[-2000:]}" for n in self.nodes
                         if n.child is not None)


@contextmanager
def rabbit_cluster(size: int = 3) -> Iterator[RabbitCluster]:
    """Start ``size`` nodes, join them into one cluster; stop and remove them at the end."""
    root = Path(tempfile.mkdtemp(prefix="recur-rabbit-cluster-"))
    shutil.chown(root, "rabbitmq", "rabbitmq")
    cluster = RabbitCluster([RabbitNode(i, root / f"node-{i}") for i in range(size)])
    try:
        for node in cluster.nodes:
            node.prepare()
        with ThreadPoolExecutor(size) as pool:
            list(pool.map(RabbitNode.start, cluster.nodes))
        first = cluster.nodes[0]
        for node in cluster.nodes[1:]:
            rabbitmqctl(node.name, "stop_app")
            rabbitmqctl(node.name, "join_cluster", first.name)
            rabbitmqctl(node.name, "start_app")
        wait_for(lambda: running_nodes(first) == size, 60, f"{size} running cluster nodes")
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        for node in cluster.nodes:
            with suppress(Exception):
                node.stop()
        shutil.rmtree(root, ignore_errors=True)


def running_nodes(via: RabbitNode) -> int:
    status = json.loads(rabbitmqctl(via.name, "cluster_status", "--formatter", "json"))
    return len(status.get("running_nodes", []))
