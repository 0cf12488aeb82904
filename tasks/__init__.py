"""recur's Celery app and tasks: ``celery -A tasks worker -Q short``."""

from routing.tracing import worker as _tracing  # noqa: F401 - tracing, when on
from tasks import resequence as _resequence  # noqa: F401 - registers its tasks
from tasks import signals as _signals  # noqa: F401 - connects the worker hooks
from tasks.app import app
from tasks.base import MessageTask
from tasks.flow import rate_limit
from tasks.metrics import worker_hooks as _metrics  # noqa: F401 - the worker's metrics
from tasks.process import process_message

__all__ = ["MessageTask", "app", "process_message", "rate_limit"]
