"""``recur flower``: exec Flower through tasks/cli/flower_main.py (/metrics behind
auth, every queue listed), refusing to start without credentials."""

from __future__ import annotations

import os
import sys

import click

from config.settings import settings
from tasks.cli.group import cli
from tasks.cli.worker import load_tasks


def flower_env() -> dict[str, str]:
    """Environment for Flower with basic auth; refuses to run without credentials."""
    from tasks.cli.flower_main import basic_auth, broker_api

    cfg = settings()
    return {**os.environ, "FLOWER_BASIC_AUTH": basic_auth(cfg.flower_user, cfg.flower_password),
            "FLOWER_BROKER_API": broker_api(cfg.broker_url, cfg.flower_broker_api)}


def flower_argv(celery_args: tuple[str, ...]) -> list[str]:
    """Flower through tasks.cli.flower_main (/metrics behind auth, every queue listed)."""
    return [sys.executable, "-m", "tasks.cli.flower_main", "-A", "tasks", "flower",
            f"--port={settings().flower_port}", *celery_args]


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def flower(celery_args: tuple[str, ...]) -> None:
    """Run Flower behind basic auth (RECUR_FLOWER_USER / RECUR_FLOWER_PASSWORD)."""
    env = flower_env()
    load_tasks()
    argv = flower_argv(celery_args)
    os.execve(argv[0], argv, env)
