"""The ``recur status`` click command. tasks/cli/status.py puts it on the full
``recur`` group; config/entry.py runs it on :func:`alone`, a group with only this
command, so ``recur status`` never imports the ``tasks`` package (the Celery app)."""

from __future__ import annotations

import sys

import click

from config.settings import settings
from scheduler.status.output import run


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for machines.")
@click.option("--exact", is_flag=True,
              help="Count every row (a scan of the table: seconds at millions of rows) "
                   "instead of PostgreSQL's estimates and capped index probes.")
def status(as_json: bool, exact: bool) -> None:
    """Per bucket: scheduled, due now, lag, dispatched, leases, dead, queue depth.

    On PostgreSQL, counts past 5,000 rows a bucket are estimates (~) or
    lower bounds (≥); --exact counts them. Exit code 2 when the store,
    the broker or Redis cannot be read.
    """
    sys.exit(run(settings(), as_json, exact))


def alone() -> click.Group:
    """A ``recur`` group holding ``status`` only (and ``--debug``, read by config/entry.py):
    what ``recur status`` runs, its usage and help the same as on the full group."""
    group = click.Group("recur", params=[click.Option(
        ["--debug"], is_flag=True, help="Show the traceback of an error, not only its one "
        "line.")], help="recur: recurring Celery work at scale.")
    group.add_command(status)
    return group
