"""BUCKET arguments and options that several commands share.

A BUCKET is a bucket of the bucket table or the resequencer's ``outbound``;
where ``--destination`` may stand instead, a destination's name is taken for it
(a bucket of that name wins); ``recur dead … --store`` also takes the name of a
bucket no longer in the bucket table (tasks/cli/dead_store.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from config.buckets import Bucket
from config.buckets_in_use import bucket_table
from config.settings import settings


def bucket_arg(_ctx: Any, _param: Any, value: str) -> Bucket:
    from routing.queues import OUTBOUND

    if value == OUTBOUND.name:  # the resequencer's sends: not a bucket, same commands
        return OUTBOUND
    table = bucket_table()
    if value not in table.by_name:
        raise click.BadParameter(f"unknown bucket {value[:70]!r} (known: {', '.join(table.names)})")
    return table.by_name[value]


@dataclass(frozen=True)
class DestinationArg:
    """BUCKET given as the name of a destination (not a bucket)."""

    name: str


def optional_bucket(ctx: Any, param: Any, value: str | None) -> Any:
    """BUCKET, where --destination may stand instead (None: not given); a destination of
    RECUR_DESTINATIONS that is no bucket is taken as ``--destination``."""
    if value is None:
        return None
    try:
        return bucket_arg(ctx, param, value)
    except click.BadParameter:
        if value in settings().destinations:
            return DestinationArg(value)
        raise


def bucket_or_name(ctx: Any, param: Any, value: str | None) -> Any:
    """BUCKET (see :func:`optional_bucket`), or the name of a bucket no longer in the
    bucket table: only the store view takes one (tasks/cli/dead_store.py store_view)."""
    try:
        return optional_bucket(ctx, param, value)
    except click.BadParameter:
        return value


#: The ``--destination`` option of ``recur dead list|replay``.
destination_option = click.option(
    "--destination", help="A resequencer destination's dead letter instead of a bucket's: "
    "the messages it refused (400, 422, ...) or whose step failed.")
store_option = click.option(
    "--store", is_flag=True,
    help="Only the rows the scheduler set aside in the due-jobs store (BUCKET's, or "
         "without BUCKET every bucket's, also buckets no longer in the bucket table).")
key_option = click.option(
    "--key", "keys", multiple=True,
    help="With --store: replay these set-aside jobs (any bucket); repeatable.")
