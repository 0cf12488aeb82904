"""The producers' enqueue setting (RECUR_GROUP_COMMIT), a base of ``Settings``:
config/settings_fields.py is at its size limit. Being a base class, it is an ordinary
field (read, checked and printed by ``recur settings`` like every other). What it
switches: scheduler/group_commit.py, docs/tasks.md (Many calls at once).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnqueueSettings:
    """How ``apply_async`` writes its rows to the due-jobs store."""

    group_commit: bool = field(
        default=True,
        metadata={"doc": "1: the store writes of apply_async calls that one process's threads "
                         "make at the same time share one durable commit (each call still "
                         "returns only once its own row is committed; a lone call commits at "
                         "once, no added delay); 0: one commit per call."})
