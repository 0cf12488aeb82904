"""``recur seed``: the Spark seed job (spark/job.py), run in this process so its errors
end as one ``recur: …`` line like every command's. It needs the spark extra."""

from __future__ import annotations

import sys

import click

from config.errors import ConfigError
from tasks.cli.group import cli


@cli.command(add_help_option=False,
             context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("seed_args", nargs=-1, type=click.UNPROCESSED)
def seed(seed_args: tuple[str, ...]) -> None:
    """Seed the due-jobs store with Spark (`recur seed --help` for the options)."""
    try:
        from spark.job import main as seed_main
    except ImportError as exc:
        raise ConfigError(f"recur seed needs the spark extra (pip install 'recur[spark]'): "
                          f"{exc}") from exc
    sys.exit(seed_main(list(seed_args)))
