"""``recur dead list|replay --destination D``: a destination's dead letter.

Thin over :mod:`routing.reseq.dead_letters`: read or replay, print. The bucket
commands (``recur dead list BUCKET``) are in tasks/cli/dead.py; these take a
destination instead of a bucket: ``--destination D``, or ``D`` in BUCKET's place
when it names a destination of RECUR_DESTINATIONS and no bucket (a bucket of
that name wins: use ``--destination``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click

from config.destinations import check_destination_arg
from config.errors import InvalidArgument, ResequencerFull
from config.settings import settings
from tasks.cli.params import DestinationArg


def check_choice(bucket: Any, destination: str | None) -> None:
    """Exactly one of BUCKET and --destination."""
    if (bucket is None) == (destination is None):
        raise InvalidArgument("give a BUCKET or --destination DESTINATION (one of them)")
    if destination is not None and not destination.strip():
        raise InvalidArgument("--destination must name a destination")
    if destination is not None:
        check_destination_arg(destination, "--destination")


def line_of(dead: Any) -> str:
    """One dead letter on one line, each field escaped and cut (--json has them whole)."""
    from routing.deadletter import shown

    at = datetime.fromtimestamp(dead.at, UTC).isoformat(timespec="seconds") if dead.at else "-"
    copies = f" copies={dead.copies}" if dead.copies > 1 else ""
    message = json.dumps(dead.message, default=str, separators=(",", ":"))
    return (f"seq={dead.seq} id={shown(dead.id) or '-'} status={dead.status or '-'} at={at}"
            f"{copies} reason={shown(json.dumps(dead.reason))} message={shown(message)}")


def show(destination: str, limit: int, as_json: bool) -> None:
    """Print up to ``limit`` (1..MAX_LIST) dead letters of ``destination``, oldest first."""
    from routing.reseq.dead_letters import list_letters, queue_name
    from tasks.app import app
    from tasks.broker_ops import broker_connection

    with broker_connection(app) as conn:
        found = list_letters(conn, destination, limit)
    for dead in found:
        click.echo(json.dumps(asdict(dead), default=str) if as_json else line_of(dead))
    if not found and not as_json:
        click.echo(f"{queue_name(destination)} is empty: no dead letters for destination "
                   f"{destination}")


def replay(destination: str, limit: int) -> None:
    """Submit up to ``limit`` dead letters of ``destination`` again, as new arrivals."""
    from routing.deadletter import check_limit, shown
    from routing.reseq.dead_letters import replay as replay_letters
    from routing.reseq.intake import submit
    from tasks.app import app
    from tasks.broker_ops import broker_connection

    check_limit(limit)
    cfg = settings()

    def resubmit(dead: Any) -> int:
        return submit(destination, dead.message, cfg, step=dead.step).seq

    with broker_connection(app) as conn:
        done = replay_letters(conn, destination, resubmit, limit)
    for old, new, message_id in done.submitted:
        click.echo(f"seq {old} (message {shown(message_id)}) submitted again as seq {new}")
    click.echo(f"replayed {len(done.submitted)} message(s) to destination {destination} as "
               f"new arrivals" + (f" ({done.repeats} repeated record(s) dropped)"
                                  if done.repeats else ""))
    for dead, why in done.left:
        click.echo(f"left seq {dead.seq} (message {shown(dead.id or '?')}) in the dead letter: "
                   f"{shown(why)}")
    if done.stopped:
        raise ResequencerFull(f"stopped: {done.stopped}; the rest stay in the dead letter")


def chosen(bucket: Any, destination: str | None) -> str | None:
    """The destination asked for (None: the bucket was), after checking one was."""
    check_choice(bucket, destination)  # both given (a DestinationArg too): refused
    return bucket.name if isinstance(bucket, DestinationArg) else destination
