"""Outbound HTTP: POST one resequenced message to its destination.

One pooled ``httpx.Client`` per process (connections are reused across sends;
it is created lazily, so each forked worker child gets its own). A send that
may pass (5xx, 408, 429, timeout, connection error) is retried with doubling
backoff; any other non-2xx answer is a refusal that retrying cannot fix.

The request names the destination and the sequence number (body and
headers, plus ``Idempotency-Key: <destination>:<seq>``): if a sender crashes
after the receiver got a message but before the send was recorded, the next
sender sends the same sequence number again and the receiver can drop it.
``X-Recur-Fence`` names the sender's lease (see :mod:`routing.lease`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpx

from config.errors import DestinationUnavailable
from config.settings import Settings

RETRYABLE_STATUS = frozenset({408, 429})


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


@cache
def http_client(timeout: float) -> httpx.Client:
    """The process's pooled client (thread-safe: the outbound worker uses threads)."""
    return httpx.Client(timeout=timeout, limits=httpx.Limits(max_keepalive_connections=20))


def post_once(url: str, delivery: Delivery, cfg: Settings) -> int:
    """POST once; the status code, or DestinationUnavailable if it may pass."""
    try:
        response = http_client(cfg.send_timeout).post(url, json=delivery.body(),
                                                      headers=delivery.headers())
    except httpx.HTTPError as exc:
        raise DestinationUnavailable(
            f"{delivery.destination} seq {delivery.seq}: {type(exc).__name__}: {exc}") from exc
    if response.status_code >= 500 or response.status_code in RETRYABLE_STATUS:
        raise DestinationUnavailable(
            f"{delivery.destination} seq {delivery.seq}: HTTP {response.status_code}")
    return response.status_code


def post_with_retries(url: str, delivery: Delivery, cfg: Settings,
                      still_mine: Callable[[], bool]) -> int | None:
    """POST with up to RECUR_SEND_RETRIES retries and doubling backoff.

    ``still_mine`` is asked before every try (it extends the sender lease); None
    means the lease was lost and nothing more may be sent. Raises the last
    DestinationUnavailable when every try failed.
    """
    wait, failures = cfg.send_backoff, 0
    while still_mine():
        try:
            return post_once(url, delivery, cfg)
        except DestinationUnavailable:
            failures += 1
            if failures > cfg.send_retries:
                raise
        time.sleep(wait)
        wait = min(wait * 2, cfg.send_backoff_max)
    return None
