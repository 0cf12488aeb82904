"""The ``recur`` click group every command module registers on.

It lives apart from the commands so each command module imports it without
importing the package that imports them all (no cycle).
"""

from __future__ import annotations

import click


@click.group()
@click.option("--debug", is_flag=True,
              help="Show the traceback of an error, not only its one line.")
def cli(debug: bool) -> None:
    """recur: recurring Celery work at scale."""
    # config.entry reads --debug itself: it must work for errors raised before click runs.
