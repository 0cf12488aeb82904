"""``recur status`` on the full ``recur`` group. The command lives in scheduler/status/
(it needs nothing of the Celery app), where config/entry.py runs it without importing
``tasks``; this module registers the same command here, for ``recur --help`` and
``python -m tasks.cli``."""

from __future__ import annotations

from scheduler.status.command import status
from scheduler.status.output import destination_line, outage_line
from tasks.cli.group import cli

cli.add_command(status)

__all__ = ["destination_line", "outage_line", "status"]
