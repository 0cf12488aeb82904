"""One-shot set-up commands: ``recur topology``, ``recur settings``, ``recur db upgrade``."""

from __future__ import annotations

import sys

import click

from config.settings import settings
from tasks.cli.group import cli


@cli.command()
def topology() -> None:
    """Declare every bucket queue and dead-letter queue on the broker."""
    from routing.queues import declare_topology
    from tasks.app import app
    from tasks.broker_ops import broker_connection

    with broker_connection(app) as conn:
        for name in declare_topology(conn, settings()):
            click.echo(f"declared {name}")


@cli.command("settings")
def show_settings() -> None:
    """Print every setting: variable, default and why; then every bad RECUR_ variable."""
    from config.settings_report import settings_report

    sys.exit(settings_report())


@cli.group()
def db() -> None:
    """Manage the due-jobs database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Create or upgrade the due-jobs tables (RECUR_DATABASE_URL) with the migrations."""
    from scheduler.store.connection import make_engine
    from scheduler.store.migrate import upgrade

    engine = make_engine(settings().database_url)
    try:
        click.echo(f"due-jobs schema at revision {upgrade(engine, revision)}")
    finally:
        engine.dispose()
