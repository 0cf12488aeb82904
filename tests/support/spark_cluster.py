"""A Spark standalone cluster on this machine, from the pyspark package's own scripts.

One master and N workers (``spark-class org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker``, as ``sbin/start-master.sh`` runs them), each
in the foreground of its own process group, on free ports, with work and log
directories under a temporary directory; all bound to 127.0.0.1. Each worker
offers one core and 1 GB, so two workers are a two-executor cluster.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import Child, spawn, wait_for
from tests.support.services import free_port

SPARK_CLASS = str(Path(sys.executable).parent / "spark-class")
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass
class SparkCluster:
    """A running master and its workers; ``url`` is the ``spark://`` master URL."""

    root: Path
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    children: list[Child] = field(default_factory=list)
    worker_ports: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(self.root),
                "SPARK_NO_DAEMONIZE": "1", "PYSPARK_PYTHON": sys.executable}

    def start(self, workers: int) -> None:
        self.children.append(spawn("spark-master", [
            SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.ui_port)],
            self.root, self.env()))
        wait_for(lambda: self.state() is not None, 90, "the Spark master to answer")
        for n in range(workers):
            work = self.root / f"worker-{n}"
            work.mkdir()
            self.worker_ports.append(free_port())
            self.children.append(spawn(f"spark-worker-{n}", [
                SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", self.url,
                "--host", "127.0.0.1", "--port", str(self.worker_ports[-1]),
                "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(work)],
                self.root, self.env()))
        wait_for(lambda: self.alive_workers() == workers, 120,
                 f"{workers} Spark workers registered with the master")

    def state(self) -> dict[str, object] | None:
        """The master's JSON status page, or None while it does not answer."""
        address = f"http://127.0.0.1:{self.ui_port}/json/"
        with suppress(OSError, ValueError), urllib.request.urlopen(address, timeout=5) as page:
            state: dict[str, object] = json.load(page)
            return state
        return None

    def alive_workers(self) -> int:
        workers = (self.state() or {}).get("workers", [])
        assert isinstance(workers, list)
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def executor_pids(self) -> list[int]:
        """Process ids of the executors our workers launched (any application); an
        executor names its worker (``--worker-url spark://Worker@127.0.0.1:<port>``),
        so one whose worker already died is found too."""
        marks = [f"Worker@127.0.0.1:{port}" for port in self.worker_ports]
        return [pid for pid, cmdline in processes().items() if EXECUTOR_CLASS in cmdline
                and any(mark in cmdline for mark in marks)]

    def logs(self) -> str:
        return "\n".join(f"--- {c.name}\n{c.log()[-3000:]}" for c in self.children)

    def stop(self) -> None:
        """Stop workers, then the master; then kill whatever executor (and its Python
        workers) outlived its worker, e.g. one launched while the worker stopped."""
        for child in reversed(self.children):
            child.stop(timeout=20)
        executors = self.executor_pids()
        for pid in (*executors, *descendants(executors)):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def processes() -> dict[int, str]:
    """Every process's id and command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(
                    b"\0", b" ").decode(errors="replace")
    return found


def descendants(pids: list[int]) -> list[int]:
    """Children, grandchildren, ... of ``pids``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with suppress(OSError, IndexError, ValueError):
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = set(pids)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        found += frontier
    return found


@contextmanager
def spark_cluster(root: Path, workers: int = 2) -> Iterator[SparkCluster]:
    """Start a master and ``workers`` workers; stop them all at the end."""
    cluster = SparkCluster(root)
    try:
        cluster.start(workers)
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
