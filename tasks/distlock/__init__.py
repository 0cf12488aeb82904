"""Per-user distributed lock for Celery tasks: ``@user_lock`` (see decorator.py)
and docs/distlock.md."""

from tasks.distlock import submit as _submit  # noqa: F401 - numbers jobs at publish
from tasks.distlock.decorator import LockSpec, user_lock
from tasks.distlock.grant import LockGrant, fencing_token

__all__ = ["LockGrant", "LockSpec", "fencing_token", "user_lock"]
