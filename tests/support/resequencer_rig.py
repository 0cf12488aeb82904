"""A resequencer test rig: a real HTTP receiver and real worker processes.

Processing workers consume the ``short`` bucket queue, the sender worker the
``outbound`` queue (threads, as ``recur`` runs it); every process is stopped
when the rig closes, also when the test failed.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.settings import Settings, load_settings
from tasks.processes import Child, spawn, wait_for_worker
from tests.support.fixtures import services_env_spawn
from tests.support.receiver import Receiver
from tests.support.services import ROOT


def rig_environment(receiver: Receiver, destinations: list[str],
                    **settings: str) -> dict[str, str]:
    """RECUR_* variables for the rig's workers (and its own Settings)."""
    return {
        "RECUR_DESTINATIONS": ",".join(f"{d}:{receiver.url(d)}" for d in destinations),
        "RECUR_RESEQ_PROCESSOR": "tests.support.resequencer_work:random_work",
        "PYTHONPATH": str(ROOT),  # the processor lives in tests/, not in the package
        **{f"RECUR_{name.upper()}": value for name, value in settings.items()},
    }


@dataclass
class Rig:
    """Workers started with ``env``; ``cfg`` is the same configuration for the test."""

    app: Any
    env: dict[str, str]
    log_dir: Path
    children: list[Child] = field(default_factory=list)
    cfg: Settings = field(init=False)

    def __post_init__(self) -> None:
        self.cfg = load_settings({**os.environ, **self.env})

    def worker(self, queue: str, concurrency: int, *args: str) -> tuple[Child, str]:
        """Start one ``celery -A tasks worker -Q <queue>`` and wait until it answers."""
        name = f"{queue}-{uuid.uuid4().hex[:6]}"
        nodename = f"{name}@{socket.gethostname()}"
        argv = ["celery", "-A", "tasks", "worker", "-Q", queue, "-n", nodename,
                "-c", str(concurrency), "-l", "INFO", "--without-mingle", "--without-gossip",
                *args]
        child = services_env_spawn(spawn, name, argv, self.log_dir, self.env)
        self.children.append(child)
        wait_for_worker(self.app, child, nodename)
        return child, nodename

    def processing_worker(self, concurrency: int = 2) -> tuple[Child, str]:
        return self.worker("short", concurrency)

    def sender_worker(self, concurrency: int = 4) -> tuple[Child, str]:
        return self.worker("outbound", concurrency, "-P", "threads")

    def close(self) -> None:
        for child in self.children:
            child.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {c.name}\n{c.log()[-4000:]}" for c in self.children)
