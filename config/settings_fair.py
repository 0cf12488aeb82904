"""The fair-share settings (RECUR_FAIR_SHARE, RECUR_FAIR_SHARE_QUOTA), a base of
``Settings``: config/settings_fields.py is at its size limit. Being a base class, they
are ordinary fields (read, checked and printed by ``recur settings`` like every other).
What they switch: scheduler/fair_share.py, docs/flow-control.md (Fair share).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FairShareSettings:
    """Fair share between users in each bucket while it is behind."""

    fair_share: bool = field(
        default=True,
        metadata={"doc": "1: while a bucket is behind and one user dominates the head of "
                         "its due rows, the users behind it are dealt into rounds claimed "
                         "first (a slice of at most the quota per user a round, the dominant "
                         "user's beside them): every user with due work runs before any runs "
                         "again, and the dominant user's bulk keeps its due order and every "
                         "idle slot; 0: strict due-time order (a scheduler started with 0 "
                         "puts dealt rows back in due order)."})
    fair_share_quota: int = field(
        default=100,
        metadata={"doc": "Rows of one user per fair-share round: a user with more than "
                         "this among the first 2000 due rows of a bucket that is behind "
                         "dominates it; 1 is strict round robin (more rounds, as many writes)."})
