"""``recur resequencer status``: the resequencer's per-destination state."""

from __future__ import annotations

import sys

import click

from config.destinations import check_destination_arg
from config.errors import EXIT_ERROR, InvalidArgument
from config.settings import settings
from tasks.cli.group import cli
from tasks.cli.status import destination_line


@cli.group()
def resequencer() -> None:
    """Inspect the resequencer's per-destination state."""


@resequencer.command("status")
@click.argument("destinations", nargs=-1)
@click.option("--skipped", "show_skipped", default=0, show_default=True,
              help="Also list this many of each destination's newest skip records.")
def resequencer_status(destinations: tuple[str, ...], show_skipped: int) -> None:
    """Per destination: next sequence to send, buffered, in flight, sent, skipped.

    State another program wrote in Redis (a value that is no number, a key of another
    type) is named in one ``recur:`` line per key, everything else shown; exit code 2."""
    from routing.deadletter import MAX_LIST
    from routing.redis_client import get_redis
    from routing.reseq.status_reading import Reading

    if not 0 <= show_skipped <= MAX_LIST:  # Redis would read -5 as "all but the last 4"
        raise InvalidArgument(f"--skipped must be 0..{MAX_LIST}, got {show_skipped}")
    for name in destinations:
        check_destination_arg(name)
    reading = Reading(get_redis(), settings().key_prefix)
    found = [reading.status(name) for name in destinations or reading.destinations()]
    if not found and not reading.unreadable:
        click.echo("no resequencer destinations yet")
    for s in found:
        click.echo(destination_line(s))
        for line in reading.skipped(s.destination, show_skipped) if show_skipped else []:
            click.echo(line)
    for line in reading.unreadable:
        click.echo(f"recur: {line}", err=True)
    if reading.unreadable:
        sys.exit(EXIT_ERROR)
