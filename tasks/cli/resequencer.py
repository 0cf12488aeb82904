"""``recur resequencer status``: the resequencer's per-destination state."""

from __future__ import annotations

from typing import Any

import click

from config.destinations import check_destination_arg
from config.errors import InvalidArgument
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
    """Per destination: next sequence to send, buffered, in flight, sent, skipped."""
    from routing.deadletter import MAX_LIST
    from routing.redis_client import get_redis
    from routing.reseq.state import Resequencer

    if not 0 <= show_skipped <= MAX_LIST:  # Redis would read -5 as "all but the last 4"
        raise InvalidArgument(f"--skipped must be 0..{MAX_LIST}, got {show_skipped}")
    for name in destinations:
        check_destination_arg(name)
    reseq = Resequencer(get_redis(), settings())
    found = resequencer_statuses(destinations)
    if not found:
        click.echo("no resequencer destinations yet")
    for s in found:
        click.echo(destination_line(s))
        for record in reseq.skipped(s.destination, show_skipped) if show_skipped else []:
            click.echo(f"  skipped seq={record['seq']} id={record['id']} {record['reason']}")


def resequencer_statuses(destinations: tuple[str, ...]) -> list[Any]:
    """Status of the named destinations (default: every one the resequencer has seen)."""
    from routing.redis_client import get_redis
    from routing.reseq.state import Resequencer

    reseq = Resequencer(get_redis(), settings())
    return [reseq.status(name) for name in destinations or reseq.destinations()]
