"""The scheduler's fair-share metrics (scheduler/fair_share.py), per bucket, as of its
last look: each scheduler process exports its own (``RECUR_METRICS_PORT``)."""

from __future__ import annotations

from collections import Counter as Tally

from config.lazy_metrics import counter, gauge
from scheduler.store.fair import Rounds

DEALT = counter("recur_scheduler_fair_share_dealt", "Due rows this scheduler dealt into "
                "fair-share rounds (claimed before the dominant users' bulk), by bucket.",
                ["bucket"])
USERS = gauge("recur_scheduler_fair_share_users", "Users with due rows at the head of the "
              "bucket at the last look (its first 2000 due rows).", ["bucket"])
LARGEST = gauge("recur_scheduler_fair_share_largest_share", "The largest user's share of "
                "the due rows at the head at the last look (0 to 1).", ["bucket"])
ROUNDS = gauge("recur_scheduler_fair_share_rounds", "Fair-share rounds of dealt rows waiting "
               "after the last look (0: none).", ["bucket"])


def record_look(bucket: str, head: Tally[str | None], rows: int, dealt: int,
                rounds: Rounds | None) -> None:
    """What one look saw and did."""
    USERS.labels(bucket).set(len(head))
    LARGEST.labels(bucket).set(max(head.values()) / rows if rows else 0.0)
    ROUNDS.labels(bucket).set(rounds.highest - rounds.lowest + 1 if rounds else 0)
    if dealt:
        DEALT.labels(bucket).inc(dealt)
