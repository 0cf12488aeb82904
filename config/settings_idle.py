"""The idle scheduler's setting (RECUR_SCHEDULER_IDLE_INTERVAL), a base of ``Settings``:
config/settings_fields.py is at its size limit. Being a base class, it is an ordinary
field (read, checked and printed by ``recur settings`` like every other). What it
sets: scheduler/idle.py, docs/operations.md (Idle cost).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class IdleSettings:
    """How long an idle scheduler may sleep between two passes."""

    scheduler_idle_interval: float = field(
        default=2.0,
        metadata={"doc": "Longest sleep of a scheduler whose passes find nothing to do (the "
                         "sleep doubles from RECUR_SCHEDULER_INTERVAL up to it, never past "
                         "the next due time or lease end in the store, and at most half "
                         "RECUR_SCHEDULE_THRESHOLD); what only a pass sees (a job moved to "
                         "now, a resumed bucket) waits at most this long."})
