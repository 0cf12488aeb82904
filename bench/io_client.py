"""Minimal HTTP GET clients for the I/O benchmark, the same cost for every contender.

``AsyncHTTP``: keep-alive connections pooled per event loop (recur's async tasks,
arq). ``sync_get``: one keep-alive ``http.client`` connection per thread (or
process) for the sync tasks.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
from urllib.parse import urlsplit

URL_VAR = "BENCHIO_URL"
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"


def target() -> tuple[str, int]:
    parts = urlsplit(os.environ[URL_VAR])
    return parts.hostname or "127.0.0.1", parts.port or 80


class AsyncHTTP:
    """Keep-alive connections to the benchmark server, for one event loop."""

    def __init__(self) -> None:
        self.host, self.port = target()
        self.free: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def get(self) -> int:
        """One GET /; its status code."""
        if self.free:
            reader, writer = self.free.pop()
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=4096)
        writer.write(REQUEST)
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        self.free.append((reader, writer))
        return status


_clients: dict[int, AsyncHTTP] = {}


def async_client() -> AsyncHTTP:
    """The client of the running event loop."""
    loop = id(asyncio.get_running_loop())
    if loop not in _clients:
        _clients[loop] = AsyncHTTP()
    return _clients[loop]


_local = threading.local()


def sync_get() -> int:
    """One GET / on this thread's keep-alive connection; its status code."""
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = http.client.HTTPConnection(*target(), timeout=30)
    conn.request("GET", "/")
    response = conn.getresponse()
    response.read()
    return response.status
