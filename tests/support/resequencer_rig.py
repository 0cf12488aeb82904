"""A resequencer test rig: a real HTTP receiver and real worker processes.

Processing workers consume the ``short`` bucket queue, the sender worker the
``outbound`` queue (threads, as ``recur`` runs it); every process is stopped
when the rig closes, also when the test failed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.settings import Settings, load_settings
from tests.support.fixtures import spawn_worker
from tests.support.processes import Child
from tests.support.receiver import Receiver
from tests.support.resequencer_work import STEP
from tests.support.services import ROOT


def rig_environment(receiver: Receiver, destinations: list[str],
                    **settings: str) -> dict[str, str]:
    """RECUR_* variables for the rig's workers (and its own Settings)."""
    return {
        "RECUR_DESTINATIONS": ",".join(f"{d}:{receiver.url(d)}" for d in destinations),
        "RECUR_IMPORTS": "tests.support.resequencer_work",
        "RECUR_RESEQ_STEPS": ",".join(f"{d}:{STEP}" for d in destinations),
        "PYTHONPATH": str(ROOT),  # the steps live in tests/, not in the package
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
        child, nodename = spawn_worker(self.app, queue, self.log_dir, concurrency=concurrency,
                                       env=self.env, args=args)
        self.children.append(child)
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
