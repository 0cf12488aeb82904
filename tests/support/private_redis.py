"""A redis-server of a test's own on a free port, persisting to an append-only
file as docs/distlock.md requires of the lock's Redis, so a stop, a kill -9 and a
start keep its data. Other engineers' tests share the machine: own port, own dir."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.support.processes import Child, spawn, wait_for
from tests.support.services import free_port


class PrivateRedis:
    """Start, stop (SIGTERM) or kill -9 a private redis-server with AOF.

    ``extra`` arguments go after the defaults and override them (e.g. a
    deliberately wrong ``--maxmemory-policy allkeys-lru``)."""

    def __init__(self, tmp: Path, extra: tuple[str, ...] = ()) -> None:
        self.port, self.dir = free_port(), tmp / "redis"
        self.dir.mkdir()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis.from_url(self.url, decode_responses=True,
                                           socket_timeout=5, socket_connect_timeout=1)
        self.child: Child | None = None
        self.extra = extra

    def start(self) -> None:
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", *self.extra]
        self.child = spawn(f"redis-{self.port}", argv, self.dir)
        wait_for(self.answers, 20, f"private redis on port {self.port}")

    def answers(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None

    def kill9(self) -> None:
        """A crash: no shutdown, no final AOF rewrite."""
        if self.child is not None:
            self.child.kill9()
            self.child.stop()
            self.child = None
