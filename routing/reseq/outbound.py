"""Outbound HTTP: POST one resequenced message to its destination.

The request names the destination and the sequence number (body and
headers, plus ``Idempotency-Key: <destination>:<seq>``): if a sender crashes
after the receiver got a message but before the send was recorded, the next
sender sends the same sequence number again and the receiver can drop it.
``X-Recur-Fence`` names the sender's lease (see :mod:`routing.reseq.lease`).

**One deadline for the whole request.** httpx's timeouts are per phase (each
read may take that long), so a receiver trickling its answer a byte at a time
would hold a sender as long as it liked. Our transport's network backend
gives every connect, read and write only what is left of the request's
deadline (RECUR_SEND_TIMEOUT from the start of the POST), so the request ends
at the deadline whatever phase it is in: connecting, sending, waiting for the
status line, or reading the body.

**A bounded answer.** At most ``BODY_LIMIT`` bytes of the body are read (a
short reason, kept with a dead letter); the rest is never read, and a
connection whose body was not read to its end is closed, not reused.
Redirects are not followed (a 3xx is an outage: config/destination_policy.py),
and neither are HTTP(S)_PROXY variables: every byte of a send must be under the
deadline, and a proxy transport would not be.

One pooled client per process (connections are reused across sends; created
lazily in each process, so a forked worker child gets its own).

What each status means (sent, retry, outage, dead letter) is the policy's
word; here a try that may pass (5xx, 408, 429, no answer) is retried with
doubling backoff, and anything else is returned to the sender at once.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import httpcore
import httpx

from config.destination_policy import Verdict, verdict_for
from config.errors import ConfigError, DestinationUnavailable
from config.settings import Settings
from routing.reseq.body import UNSENDABLE, strict_json

#: Bytes of an answer's body read at most (the start of a refusal's reason).
BODY_LIMIT = 4096
#: Characters of that body kept in a reason.
DETAIL_CHARS = 200


@dataclass(frozen=True)
class Delivery:
    """One message on its way to a destination."""

    destination: str
    seq: int
    message_id: str
    arrived_at: float
    result: Any
    #: The sender lease's fence (0: none); grows with every new lease of the destination.
    fence: int = 0

    def body(self) -> dict[str, Any]:
        return {"destination": self.destination, "seq": self.seq, "id": self.message_id,
                "arrived_at": self.arrived_at, "result": self.result}

    def headers(self) -> dict[str, str]:
        """The fence is a header, not in the body: a re-send by the next sender carries
        the same body, and a receiver can refuse a fence lower than one it accepted."""
        named = {"X-Recur-Destination": self.destination, "X-Recur-Seq": str(self.seq),
                 "Idempotency-Key": f"{self.destination}:{self.seq}"}
        return {**named, "X-Recur-Fence": str(self.fence)} if self.fence else named


@dataclass(frozen=True)
class Answer:
    """What a destination said to one delivery (after its retries)."""

    #: The HTTP status (0: no answer: connection error or the deadline passed).
    status: int
    #: The policy's word on it.
    verdict: Verdict
    #: One line: the reason phrase and the start of the body, or the error.
    detail: str
    #: Tries it took (1 + retries).
    tries: int = 1

    def describe(self) -> str:
        return f"HTTP {self.status} {self.detail}".strip() if self.status else self.detail


#: When the POST running in this thread must be over (time.monotonic()).
_DEADLINE: ContextVar[float | None] = ContextVar("recur_send_deadline", default=None)


def left(timeout: float | None) -> float | None:
    """``timeout``, cut to what is left of the current request's deadline."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise httpcore.ReadTimeout("the request's deadline passed")
    return remaining if timeout is None else min(timeout, remaining)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, left(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend, connecting within the deadline, with DeadlineStreams."""

    def __init__(self) -> None:
        self.inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return DeadlineStream(self.inner.connect_tcp(host, port, left(timeout), local_address,
                                                     socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:
        return DeadlineStream(self.inner.connect_unix_socket(path, left(timeout),
                                                             socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport on a connection pool that uses the DeadlineBackend."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits)
        if not isinstance(getattr(self, "_pool", None), httpcore.ConnectionPool):
            raise ConfigError("httpx.HTTPTransport no longer keeps its pool in _pool: "
                               "routing/reseq/outbound.py cannot bound a request's time")
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(), max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, network_backend=DeadlineBackend())


_lock = threading.Lock()
_client: tuple[int, httpx.Client] | None = None


def http_client() -> httpx.Client:
    """The process's pooled client (thread-safe: the outbound worker uses threads)."""
    global _client
    with _lock:
        if _client is None or _client[0] != os.getpid():
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=20)
            _client = (os.getpid(), httpx.Client(
                transport=DeadlineTransport(limits), follow_redirects=False, trust_env=False))
        return _client[1]


def post(url: str, delivery: Delivery, timeout: float, body: bytes) -> tuple[int, str]:
    """POST ``body`` (the delivery's, :func:`strict_json`) once, within ``timeout`` seconds
    all told: (status, detail).

    DestinationUnavailable when there is no complete answer in time or no
    connection.
    """
    what = f"{delivery.destination} seq {delivery.seq}"
    token = _DEADLINE.set(time.monotonic() + timeout)
    try:
        with http_client().stream("POST", url, content=body, headers={
                **delivery.headers(), "Content-Type": "application/json"},
                timeout=timeout) as response:
            head = read_at_most(response, BODY_LIMIT)
            return response.status_code, detail_of(response, head)
    except httpx.TimeoutException as exc:
        raise DestinationUnavailable(f"{what}: no complete answer within {timeout:g}s "
                                     f"(RECUR_SEND_TIMEOUT)") from exc
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        # ValueError: a host the URL parser or the resolver cannot encode (IDNAError, a
        # label over 63 bytes) raises it; escaping, it would fail the sender's task.
        raise DestinationUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    finally:
        _DEADLINE.reset(token)


def read_at_most(response: httpx.Response, limit: int) -> bytes:
    """The start of the body, never more than ``limit`` bytes kept (raw: not decompressed,
    so a small compressed body cannot grow into a large one here)."""
    data = bytearray()
    for chunk in response.iter_raw():
        data += chunk[:limit - len(data)]
        if len(data) >= limit:
            break
    return bytes(data)


def detail_of(response: httpx.Response, head: bytes) -> str:
    """The reason phrase and the start of the body, printable, on one line, each cut to
    DETAIL_CHARS (a reason phrase may be as long as the answer's whole head, ~100 KB)."""
    phrase = printable(response.reason_phrase)
    if 200 <= response.status_code < 300:
        return phrase
    encoding = response.headers.get("content-encoding", "identity")
    text = printable(head.decode("utf-8", "replace") if encoding in ("", "identity")
                     else f"({encoding} body not shown)")
    return f"{phrase}: {text}" if text else phrase


def printable(text: str) -> str:
    """``text`` on one line of printable characters, at most DETAIL_CHARS (then "...")."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text[:DETAIL_CHARS] + "..." if len(text) > DETAIL_CHARS else text


def answer_once(url: str, delivery: Delivery, cfg: Settings) -> Answer:
    """POST once and say what the answer means for this destination. An entry that
    cannot be sent as JSON (NaN, a lone surrogate: buffered before steps' results were
    checked for them) is this message's fault: a dead letter, never a wedged sender."""
    try:
        body = strict_json(delivery.body())
    except UNSENDABLE as exc:
        return Answer(0, Verdict.DEAD, f"{delivery.destination} seq {delivery.seq}: the "
                      f"result cannot be sent as JSON: {type(exc).__name__}: {exc}")
    try:
        status, detail = post(url, delivery, cfg.send_timeout, body)
    except DestinationUnavailable as exc:
        return Answer(0, Verdict.RETRY, str(exc))
    return Answer(status, verdict_for(cfg, delivery.destination, status), detail)


def post_once(url: str, delivery: Delivery, cfg: Settings) -> int:
    """POST once; the status code, or DestinationUnavailable if the try may pass."""
    answer = answer_once(url, delivery, cfg)
    if answer.verdict is Verdict.RETRY:
        raise DestinationUnavailable(answer.detail if not answer.status else
                                     f"{delivery.destination} seq {delivery.seq}: "
                                     f"{answer.describe()}")
    return answer.status


def post_with_retries(url: str, delivery: Delivery, cfg: Settings,
                      still_mine: Callable[[], bool],
                      paced: Callable[[], bool] | None = None) -> Answer | None:
    """POST; a try that may pass is retried up to RECUR_SEND_RETRIES times with doubling
    backoff. The first answer that is not a RETRY, or the last try's.

    ``still_mine`` is asked before every try (it extends the sender lease); None
    means the lease was lost and nothing more may be sent. ``paced`` (a destination
    with a rate: routing/reseq/pace.py) is asked before every retry: it waits for the
    retry's slot, or says False when the slot is far off, and the last answer is
    returned then (the sender backs off).
    """
    wait, tries = min(cfg.send_backoff, cfg.send_backoff_max), 0
    while still_mine():
        tries += 1
        answer = answer_once(url, delivery, cfg)
        if answer.verdict is not Verdict.RETRY or tries > cfg.send_retries:
            return replace(answer, tries=tries)
        time.sleep(wait)
        wait = min(wait * 2, cfg.send_backoff_max)
        if paced is not None and not paced():
            return replace(answer, tries=tries)
    return None
