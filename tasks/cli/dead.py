"""``recur dead list|replay``: a bucket's dead-letter queue, a destination's dead letter
(tasks/cli/dead_destination.py) or the rows set aside in the store
(tasks/cli/dead_store.py), chosen by the arguments."""

from __future__ import annotations

import json

import click

from config.buckets import Bucket
from config.buckets_in_use import bucket_table
from config.errors import InvalidArgument
from tasks.cli.dead_destination import chosen
from tasks.cli.dead_store import (
    name_of,
    print_set_aside,
    replay_set_aside,
    show_set_aside,
    store_view,
)
from tasks.cli.group import cli
from tasks.cli.params import bucket_or_name, destination_option, key_option, store_option


@cli.group()
def dead() -> None:
    """Inspect or replay a bucket's dead-letter queue."""


@dead.command("list")
@click.argument("bucket", callback=bucket_or_name, required=False)
@destination_option
@store_option
@click.option("--limit", default=100, show_default=True, help="Most to show: 1..1000.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def dead_list(bucket: Bucket, limit: int, as_json: bool, destination: str | None,
              store: bool) -> None:
    """Show dead messages of BUCKET (or --destination D's) with why they died, then the
    BUCKET's rows set aside in the due-jobs store (--store: only those)."""
    from routing.deadletter import check_limit

    check_limit(limit)
    _one_view(store, destination)
    if store_view(bucket, store) and destination is None:
        return show_set_aside(name_of(bucket), limit, as_json)
    if name := chosen(bucket, destination):
        from tasks.cli.dead_destination import show

        return show(name, limit, as_json)
    from routing.deadletter import list_dead
    from tasks.app import app
    from tasks.broker_ops import broker_connection, stored_error

    with broker_connection(app) as conn:
        found = list_dead(conn, bucket, lambda task_id: stored_error(app, task_id), limit)
    for d in found:
        if as_json:
            click.echo(json.dumps(d.__dict__, default=str))
        else:
            click.echo(f"{d.task_id or '-'} {d.task or '-'} reason={d.reason} from={d.from_queue} "
                       f"error={d.error or '-'} message={json.dumps(d.args, default=str)}")
    aside = (print_set_aside(bucket.name, limit, as_json, missing_ok=True)
             if bucket.name in bucket_table().by_name else 0)
    if not found and not aside and not as_json:
        click.echo(f"{bucket.dead_queue} is empty: no dead messages")


@dead.command("replay")
@click.argument("bucket", callback=bucket_or_name, required=False)
@destination_option
@store_option
@key_option
@click.option("--limit", default=100, show_default=True)
def dead_replay(bucket: Bucket, limit: int, destination: str | None, store: bool,
                keys: tuple[str, ...]) -> None:
    """Move dead messages of BUCKET back to its queue (--destination D: submit D's dead
    letters again, as new arrivals; --store: make its set-aside rows due again)."""
    from routing.deadletter import check_limit

    check_limit(limit)  # as list's: a negative or absurd count is a mistake, not "none"
    _one_view(store, destination)
    if store_view(bucket, store) and destination is None:
        return replay_set_aside(name_of(bucket), keys, limit)
    if keys:
        raise InvalidArgument("--key replays set-aside rows: give --store too")
    if name := chosen(bucket, destination):
        from tasks.cli.dead_destination import replay

        return replay(name, limit)
    from routing.deadletter import replay_dead
    from tasks.app import app
    from tasks.broker_ops import broker_connection

    with broker_connection(app) as conn:
        left: list[tuple[str, str]] = []
        moved = replay_dead(conn, bucket, limit, lambda task: task in app.tasks, left)
    for task_id, why in left:
        click.echo(f"left {task_id} in {bucket.dead_queue}: {why}")
    click.echo(f"replayed {moved} message(s) to {bucket.queue}")


def _one_view(store: bool, destination: str | None) -> None:
    """--store (the due-jobs store's rows) and --destination (a destination's dead letter)
    name two different places: both at once is refused, not one silently dropped."""
    if store and destination is not None:
        raise InvalidArgument("give --store or --destination, not both")
