"""Every Redis key recur writes, in one place.

All keys start with the configured prefix (RECUR_KEY_PREFIX), so deployments
and test runs sharing one Redis never see each other's keys.

=====================================  ======  =====================================
key                                    type    holds
=====================================  ======  =====================================
``<prefix>:completed``                 stream  recent task completions (capped)
``<prefix>:stats:processed``           hash    bucket -> tasks completed
``<prefix>:celery-task-meta-<id>``     string  Celery's stored failure of task <id>
=====================================  ======  =====================================
"""

from __future__ import annotations


def completed(prefix: str) -> str:
    """Stream of recent completions: one entry per finished task run."""
    return f"{prefix}:completed"


def processed_counts(prefix: str) -> str:
    """Hash of completed-task counts per bucket."""
    return f"{prefix}:stats:processed"


def celery_prefix(prefix: str) -> str:
    """Prefix Celery's result backend puts before its own keys."""
    return f"{prefix}:"
