"""``recur status``'s fair-share lines: per bucket, the users at the head of its due rows
and the rows dealt into rounds (scheduler/fair_share.py), each one bounded read."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from config.buckets_in_use import bucket_table
from config.settings import Settings

if TYPE_CHECKING:
    from scheduler.status.source import StatusSource

#: Due rows read at the head of each bucket, and dealt rows counted at most.
HEAD = 2000
CAP = 100_000


def fair_share_state(source: StatusSource, cfg: Settings, now: datetime
                     ) -> dict[str, dict[str, Any]]:
    """Per bucket, its fair share as ``--json`` shows it."""
    found = {}
    for bucket in bucket_table().names:
        state = source.fair_state(bucket, now, HEAD, CAP)
        doc = asdict(state)
        doc.pop("bucket")
        doc["rounds"] = None if state.rounds is None else [state.rounds.lowest,
                                                           state.rounds.highest]
        doc["oldest_dealt_at"] = state.oldest_dealt_at and state.oldest_dealt_at.isoformat()
        doc["largest_share"] = round(state.largest_rows / state.head_rows, 3) if (
            state.head_rows) else 0.0
        doc["late_seconds"] = round((now - state.oldest_dealt_at).total_seconds(), 1) if (
            state.oldest_dealt_at) else 0.0
        found[bucket] = {"enabled": cfg.fair_share, "quota": cfg.fair_share_quota, **doc}
    return found


def fair_share_lines(found: dict[str, dict[str, Any]] | None) -> list[str]:
    """A line per bucket with rows dealt into rounds, or ever dealt; one line else."""
    if found is None:
        return []
    lines = []
    for bucket, s in found.items():
        if not s["dealt_rows"] and not s["dealt_ever"]:
            continue
        dealt = f"{'≥' if s['dealt_capped'] else ''}{s['dealt_rows']:,}"
        rounds = (f" in rounds {s['rounds'][0]}..{s['rounds'][1]} for {s['dealt_users']:,} "
                  f"user(s), the oldest {s['late_seconds']:.0f}s late" if s["rounds"] else "")
        lines.append(f"fair share, {bucket}: {dealt} due row(s) dealt into rounds{rounds}; "
                     f"head: {s['head_rows']:,} due row(s) of {s['head_users']:,} user(s), "
                     f"the largest {s['largest_share']:.0%}; {s['dealt_ever']:,} dealt ever")
    if lines:
        return lines
    on = next(iter(found.values()), {"enabled": False, "quota": 0})
    return [f"fair share: {'on' if on['enabled'] else 'off'}"
            + (f" (quota {on['quota']} rows a user a round): no bucket was behind"
               if on["enabled"] else ": strict due order")]
