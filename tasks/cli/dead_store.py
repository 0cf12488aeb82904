"""``recur dead list|replay`` for the rows the scheduler set aside in the due-jobs store.

A row whose message the broker cannot take (too large, a bucket no longer in
the bucket table, a stored call that cannot be decoded) is set aside in the
store with its reason (scheduler/set_aside.py). ``recur dead list BUCKET``
shows them after the bucket's dead-letter queue; ``--store`` shows only them,
for one bucket or, without BUCKET, every bucket (also buckets that left the
bucket table). ``recur dead replay --store`` makes them due again;
``recur jobs cancel KEY`` drops one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from config.errors import InvalidArgument, InvalidMessage, SchemaOutOfDate
from config.settings import settings
from config.text import visible
from tasks.cli.params import bucket_arg

#: Characters of a job key or stored call a text line shows (--json shows them whole).
SHOWN = 200


def store_view(bucket: Any, store: bool) -> bool:
    """Whether the command shows the store's set-aside rows only: with ``--store``, or for
    a name no longer in the bucket table that has rows set aside (else the name is
    refused, naming the known buckets)."""
    if store or not isinstance(bucket, str):
        return store
    if _rows(bucket, 1, missing_ok=True):
        return True
    bucket_arg(None, None, bucket)  # raises click.BadParameter naming the known ones
    return False


def name_of(bucket: Any) -> str | None:
    """The name BUCKET was given as (a bucket, a destination or any name; None: none)."""
    return None if bucket is None else str(getattr(bucket, "name", bucket))


def _rows(bucket: str | None, limit: int, *, missing_ok: bool) -> list[Any]:
    from scheduler.store import DueStore
    from scheduler.store.aside import AsideRows

    try:
        store = DueStore.open(settings().database_url)
    except SchemaOutOfDate:
        from scheduler.store.connection import make_engine
        from scheduler.store.migrate import missing_sqlite_file

        engine = make_engine(settings().database_url)
        try:
            if missing_ok and missing_sqlite_file(engine) is not None:
                return []  # no store file: nothing was ever set aside in it
        finally:
            engine.dispose()
        raise
    try:
        return AsideRows(store).rows(bucket, limit)
    finally:
        store.close()


def message_text(row: Any) -> Any:
    """The row's message as it would be published, or its stored text when it cannot be
    decoded (that may be why it was set aside)."""
    from scheduler.wire import decode_call

    try:
        args, kwargs, _ = decode_call(row.args, row.job_key, row.bucket)
    except InvalidMessage:
        return row.args
    return args[0] if len(args) == 1 and not kwargs else {"args": args, "kwargs": kwargs}


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}...({len(text)} characters)"


def line_of(row: Any) -> str:
    at = row.set_at.isoformat(timespec="seconds")
    message = message_text(row)
    shown = message if isinstance(message, str) else json.dumps(message, default=str)
    return (f"job {visible(_cut(row.job_key))} {visible(_cut(row.task))} "
            f"reason={json.dumps(row.reason)} from=store set_aside_at={at} "
            f"bucket={visible(_cut(row.bucket))} attempts={row.attempts} "
            f"message={visible(_cut(shown))}")


def as_json(row: Any) -> str:
    return json.dumps({"source": "store", "job_key": row.job_key, "bucket": row.bucket,
                       "task": row.task, "reason": row.reason,
                       "set_aside_at": row.set_at.isoformat(), "attempts": row.attempts,
                       "message": message_text(row)}, default=str)


def print_set_aside(bucket: str | None, limit: int, json_lines: bool, *, missing_ok: bool) -> int:
    """Print the set-aside rows of ``bucket`` (None: every bucket); returns how many."""
    found = _rows(bucket, limit, missing_ok=missing_ok)
    for row in found:
        click.echo(as_json(row) if json_lines else line_of(row))
    return len(found)


def show_set_aside(bucket: str | None, limit: int, json_lines: bool) -> None:
    """``recur dead list --store [BUCKET]``."""
    if not print_set_aside(bucket, limit, json_lines, missing_ok=False) and not json_lines:
        which = f" for bucket {visible(_cut(bucket))}" if bucket else ""
        click.echo(f"no rows set aside in the due-jobs store{which}")


def replay_set_aside(bucket: str | None, keys: tuple[str, ...], limit: int) -> None:
    """``recur dead replay --store [BUCKET] [--key KEY ...]``: due again now."""
    from routing.deadletter import check_limit
    from scheduler.store import DueStore
    from scheduler.store.aside import AsideRows

    check_limit(limit)
    if keys and bucket is not None:
        raise InvalidArgument("give a BUCKET or --key KEY, not both")
    if len(keys) > limit:  # the rest would be reported "not set aside"
        raise InvalidArgument(f"--key given {len(keys)} times, more than --limit ({limit})")
    store = DueStore.open(settings().database_url)
    try:
        done = AsideRows(store).replay(bucket, keys, limit, datetime.now(UTC))
    finally:
        store.close()
    missing = sorted(set(keys) - set(done))
    click.echo(f"replayed {len(done)} set-aside job(s): scheduled again, due now")
    if missing:
        raise InvalidArgument(f"not set aside (unknown, or no longer set aside): "
                              f"{', '.join(visible(_cut(k)) for k in missing)}")
