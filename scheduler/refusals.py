"""What a publish says about rows it could not publish: the rows to set aside, and why.

A publisher returns None when the broker confirmed every row as given. Otherwise
it returns a :class:`Published`: rows whose message cannot be built or sent
(refused, with a :class:`Refusal`: they are set aside in the store, never
claimed again) and rows whose confirmed copy carries another lease stamp than
the batch's (sent again while a refused row was isolated: the store records
that stamp, so an unconfirmed earlier copy is a stale one).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

#: Why a row was refused, as the ``reason`` label of ``recur_scheduler_set_aside_total``.
TOO_LARGE = "too_large"
UNKNOWN_BUCKET = "unknown_bucket"
UNDECODABLE = "undecodable"
#: The broker refused the row's message on its own (its channel closed over it).
BROKER_REFUSED = "broker_refused"
KINDS = (TOO_LARGE, UNKNOWN_BUCKET, UNDECODABLE, BROKER_REFUSED)


@dataclass(frozen=True)
class Refusal:
    """Why one row cannot be published: a kind (a metric label) and a line for operators."""

    kind: str
    reason: str


def unknown_bucket_reason(bucket: str, names: Iterable[str]) -> str:
    """Why a row of ``bucket`` cannot be published: the bucket table ``names`` lacks it."""
    return f"bucket {bucket!r} is not in the bucket table (buckets: {', '.join(names)})"


@dataclass
class Published:
    """What a publish did besides confirming every row as given (see the module)."""

    refused: dict[str, Refusal] = field(default_factory=dict)
    leases: dict[str, datetime] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.refused or self.leases)
