"""A real HTTP receiver for the resequencer's outbound sends (tests and benchmark).

A threaded ``http.server`` on 127.0.0.1 and a free port. It records every
POST (destination, sequence number, body, arrival time, fence) and can be told
to answer 503 for a destination, or to answer slowly; to answer any status
(401, 404, a redirect with its Location, 400 ...) for a destination until told
otherwise (``set(d, status=401)``), or for one sequence number (``refuse``); and
to trickle its answer a byte at a time (``set(d, trickle=0.5)``), recording
when the client hung up (``trickled``); or to answer raw bytes and hang up, or never
answer (``set(d, raw=b"HTTP/1.1 999 ...")``, ``raw=b"hang"``). Like a receiver that
honours ``X-Recur-Fence``, it refuses (409, recorded in ``fenced``) a request
whose fence is lower than one it already accepted for the destination: the
late send of a sender whose lease ran out.
"""

from __future__ import annotations

import dataclasses
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
    #: Answer every request with this status (0: answer normally); recorded in ``refused``.
    status: int = 0
    #: Seconds between the bytes of a trickled answer (0: answer at once).
    trickle: float = 0.0
    #: Trickle only the body (the status line and headers come at once).
    trickle_body: bool = False
    #: The body of a refusal (``status`` or ``refuse``).
    body: bytes = b""
    #: Answer with ``status`` (or 200) and a body that never ends, as fast as it is read.
    endless: bool = False
    #: Answer with these bytes as they are (a broken status line, a cut-off head, a bad
    #: chunk, ...) and close the connection; ``b"hang"``: read the request, never answer.
    raw: bytes = b""


@dataclass(frozen=True)
class Trickled:
    """A request answered a byte at a time: when it came, and when the client hung up
    (None: it read the whole answer)."""

    destination: str
    seq: int
    started: float
    hung_up: float | None


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
    #: (destination, seq, status) of every request answered with a refusal status.
    refused: list[tuple[str, int, int]] = field(default_factory=list)
    trickled: list[Trickled] = field(default_factory=list)
    endless_sent: list[int] = field(default_factory=list)
    #: (destination, seq, time) of every POST as it came, whatever it was answered.
    requests: list[tuple[str, int, float]] = field(default_factory=list)
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
                destination = self.path.rsplit("/", 1)[-1]
                with receiver.lock:
                    receiver.requests.append((destination, int(body["seq"]), time.time()))
                how = receiver.how(destination)
                if how.trickle:
                    receiver.trickle(self, destination, int(body["seq"]), how.trickle,
                                     how.trickle_body)
                    return
                if how.endless:
                    receiver.endless(self, how.status or 200)
                    return
                if how.raw:
                    receiver.raw(self, how.raw)
                    return
                code = receiver.answer(destination, body,
                                       int(self.headers.get("X-Recur-Fence", 0)))
                text = how.body if code >= 300 else b""
                self.send_response(code)
                if 300 <= code < 400:
                    self.send_header("Location", receiver.url(destination) + "/moved")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

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

    def how(self, destination: str) -> Behaviour:
        with self.lock:
            return dataclasses.replace(self.behaviour.get(destination, Behaviour()))

    def trickle(self, handler: BaseHTTPRequestHandler, destination: str, seq: int,
                every: float, body_only: bool = False) -> None:
        """Answer 200 a byte at a time, ``every`` seconds apart (status line included,
        unless ``body_only``), recording when the client hung up."""
        record = Trickled(destination, seq, time.time(), None)
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n"
        answer = head + b"x" * 64
        try:
            if body_only:
                handler.wfile.write(head)
                handler.wfile.flush()
            for i in range(len(head) if body_only else 0, len(answer)):
                handler.wfile.write(answer[i:i + 1])
                handler.wfile.flush()
                time.sleep(every)
        except OSError:
            record = dataclasses.replace(record, hung_up=time.time())
        handler.close_connection = True
        with self.lock:
            self.trickled.append(record)

    def endless(self, handler: BaseHTTPRequestHandler, status: int) -> None:
        """Answer ``status`` with a chunked body that goes on until the client hangs up;
        the bytes it took are added to ``endless_sent``."""
        handler.send_response(status)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        chunk = b"%x\r\n%s\r\n" % (65536, b"z" * 65536)
        sent = 0
        try:
            while sent < 1 << 30:
                handler.wfile.write(chunk)
                sent += 65536
        except OSError:
            pass
        handler.close_connection = True
        with self.lock:
            self.endless_sent.append(sent)

    def raw(self, handler: BaseHTTPRequestHandler, answer: bytes) -> None:
        """Write ``answer`` as it is and hang up (``b"hang"``: hold the connection open,
        answering nothing, until the client hangs up)."""
        handler.close_connection = True
        try:
            if answer == b"hang":
                while handler.rfile.read(1):
                    pass
                return
            handler.wfile.write(answer)
            handler.wfile.flush()
        except OSError:
            pass

    def answer(self, destination: str, body: dict[str, Any], fence: int = 0) -> int:
        with self.lock:
            refusal = self.refusals.get((destination, int(body["seq"])))
            if refusal:
                self.rejected.append((destination, int(body["seq"])))
                self.refused.append((destination, int(body["seq"]), refusal))
                return refusal
            how = self.behaviour.get(destination, Behaviour())
            if how.status:
                self.refused.append((destination, int(body["seq"]), how.status))
                return how.status
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

    def refused_seqs(self, destination: str, status: int | None = None) -> list[int]:
        """Sequence numbers refused at ``destination`` (with ``status``), in order."""
        with self.lock:
            return [seq for d, seq, code in self.refused
                    if d == destination and status in (None, code)]

    def seqs(self, destination: str) -> list[int]:
        """Sequence numbers received for ``destination``, in arrival order (with repeats)."""
        with self.lock:
            return [r.seq for r in self.received if r.destination == destination]

    def of(self, destination: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.destination == destination]
