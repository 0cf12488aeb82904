"""Per-user distributed lock for Celery tasks: ``@user_lock``. Read in this order:
decorator.py (a delivery's life), held.py (a held lock: run, release), chain.py (the
next jobs run in the same process), store.py + lock.lua (Redis side and the ordering
rule), runtime.py (watchdog, reaper, numbering at publish), job.py (headers, JSON,
events). docs/distlock.md says what it guarantees and which failure loses what."""

from tasks.distlock import runtime as _runtime  # noqa: F401 - numbers jobs at publish
from tasks.distlock.decorator import LockSpec, user_lock
from tasks.distlock.job import LockGrant, fencing_token

__all__ = ["LockGrant", "LockSpec", "fencing_token", "user_lock"]
