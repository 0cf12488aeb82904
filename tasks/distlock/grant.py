"""What a running locked task holds (``self.request.user_lock``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LockGrant:
    """The lock a running task holds; ``fence`` only grows per user, so a downstream
    write can refuse a holder whose fence is older than one it has seen."""

    user: str
    token: str
    seq: int
    fence: int


def fencing_token(task: Any) -> int | None:
    """The fencing token of the lock ``task`` holds (None when it runs unlocked)."""
    grant = getattr(task.request, "user_lock", None)
    return grant.fence if isinstance(grant, LockGrant) else None
