"""A real HTTP receiver for the resequencer's outbound sends (tests and benchmark).

A threaded ``http.server`` on 127.0.0.1 and a free port. It records every
POST (destination, sequence number, body, arrival time, fence) and can be told
to answer 503 for a destination, or to answer slowly. Like a receiver that
honours ``X-Recur-Fence``, it refuses (409, recorded in ``fenced``) a request
whose fence is lower than one it already accepted for the destination: the
late send of a sender whose lease ran out.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One POST the receiver answered with 200."""

    destination: str
    seq: int
    body: dict[str, Any]
    at: float
    fence: int = 0


@dataclass
class Behaviour:
    """How the receiver answers one destination."""

    unavailable: bool = False
    delay: float = 0.0


@dataclass
class Receiver:
    """Start with ``with Receiver() as r:``; ``r.url('billing')`` is its address."""

    received: list[Received] = field(default_factory=list)
    rejected: list[tuple[str, int]] = field(default_factory=list)
    fenced: list[tuple[str, int]] = field(default_factory=list)
    fences: dict[str, int] = field(default_factory=dict)
    behaviour: dict[str, Behaviour] = field(default_factory=dict)
    holds: dict[tuple[str, int], tuple[float, threading.Event]] = field(default_factory=dict)
    refusals: dict[tuple[str, int], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    def __enter__(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                code = receiver.answer(self.path.rsplit("/", 1)[-1], body,
                                       int(self.headers.get("X-Recur-Fence", 0)))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        assert self.server is not None and self.thread is not None
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)

    def url(self, destination: str) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/in/{destination}"

    def set(self, destination: str, **changes: Any) -> None:
        """Change how ``destination`` is answered (unavailable=True, delay=0.2, ...)."""
        with self.lock:
            current = self.behaviour.setdefault(destination, Behaviour())
            for name, value in changes.items():
                setattr(current, name, value)

    def hold(self, destination: str, seq: int, seconds: float) -> threading.Event:
        """Answer ``seq`` of ``destination`` only after ``seconds`` (recording it then);
        the event is set when that request arrives."""
        arrived = threading.Event()
        with self.lock:
            self.holds[(destination, seq)] = (seconds, arrived)
        return arrived

    def refuse(self, destination: str, seq: int, status: int) -> None:
        """Answer ``seq`` of ``destination`` with ``status`` (a 4xx) instead of 200."""
        with self.lock:
            self.refusals[(destination, seq)] = status

    def answer(self, destination: str, body: dict[str, Any], fence: int = 0) -> int:
        with self.lock:
            refusal = self.refusals.get((destination, int(body["seq"])))
            if refusal:
                self.rejected.append((destination, int(body["seq"])))
                return refusal
            how = self.behaviour.get(destination, Behaviour())
            seconds, arrived = self.holds.pop((destination, int(body["seq"])),
                                              (0.0, threading.Event()))
        arrived.set()
        if how.delay or seconds:
            time.sleep(how.delay + seconds)
        with self.lock:
            if how.unavailable:
                self.rejected.append((destination, int(body["seq"])))
                return 503
            if fence and fence < self.fences.get(destination, 0):
                self.fenced.append((destination, int(body["seq"])))
                return 409
            self.fences[destination] = max(fence, self.fences.get(destination, 0))
            self.received.append(Received(destination, int(body["seq"]), body, time.time(),
                                          fence))
            return 200

    def seqs(self, destination: str) -> list[int]:
        """Sequence numbers received for ``destination``, in arrival order (with repeats)."""
        with self.lock:
            return [r.seq for r in self.received if r.destination == destination]

    def of(self, destination: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.destination == destination]
