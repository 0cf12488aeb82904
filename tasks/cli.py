"""``recur``: the operational commands.

Each long-running command (worker, flower) execs the Celery command a user
would type, with the settings and bucket profile filled in, so signals,
logs and ``celery inspect`` behave exactly as Celery's own.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

import click

from config.buckets import Bucket, bucket_table
from config.errors import ConfigError, InvalidArgument
from config.settings import settings
from tasks.destination_dead_cli import chosen, destination_option
from tasks.doctor import doctor
from tasks.jobs_cli import bucket, jobs
from tasks.set_aside_cli import (  # recur dead list|replay --store
    bucket_or_name,
    key_option,
    name_of,
    print_set_aside,
    replay_set_aside,
    show_set_aside,
    store_option,
    store_view,
)


def celery_executable() -> str:
    """The ``celery`` next to this interpreter (a venv need not be activated)."""
    local = os.path.join(os.path.dirname(sys.executable), "celery")
    return local if os.path.exists(local) else (shutil.which("celery") or "celery")


def worker_argv(bucket: Bucket, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``celery worker`` command line that serves ``bucket`` with its profile."""
    return [
        celery_executable(), "-A", "tasks", "worker",
        "-Q", bucket.queue, "-n", f"{bucket.name}@%h",
        "-P", bucket.pool, "-c", str(bucket.concurrency),
        "--prefetch-multiplier", str(bucket.prefetch),
        "--time-limit", str(bucket.time_limit),
        "--soft-time-limit", str(bucket.soft_time_limit),
        "-l", settings().log_level, *extra,
    ]


def load_tasks() -> None:
    """Import recur's tasks and yours (RECUR_IMPORTS): a module that cannot be imported
    is one clear error here, before any process starts."""
    import tasks  # noqa: F401 - registers recur's tasks
    from tasks.imports import import_task_modules

    import_task_modules(settings().imports)


def flower_env() -> dict[str, str]:
    """Environment for Flower with basic auth; refuses to run without credentials."""
    from tasks.flower_main import basic_auth, broker_api

    cfg = settings()
    return {**os.environ, "FLOWER_BASIC_AUTH": basic_auth(cfg.flower_user, cfg.flower_password),
            "FLOWER_BROKER_API": broker_api(cfg.broker_url, cfg.flower_broker_api)}


def flower_argv(celery_args: tuple[str, ...]) -> list[str]:
    """Flower through tasks.flower_main (/metrics behind auth, every queue listed)."""
    return [sys.executable, "-m", "tasks.flower_main", "-A", "tasks", "flower",
            f"--port={settings().flower_port}", *celery_args]


def bucket_arg(_ctx: Any, _param: Any, value: str) -> Bucket:
    from routing.queues import OUTBOUND

    if value == OUTBOUND.name:  # the resequencer's sends: not a bucket, same commands
        return OUTBOUND
    table = bucket_table()
    if value not in table.by_name:
        raise click.BadParameter(f"unknown bucket {value!r} (known: {', '.join(table.names)})")
    return table.by_name[value]


@click.group()
@click.option("--debug", is_flag=True,
              help="Show the traceback of an error, not only its one line.")
def cli(debug: bool) -> None:
    """recur: recurring Celery work at scale."""
    # config.entry reads --debug itself: it must work for errors raised before click runs.


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("bucket", callback=bucket_arg)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(bucket: Bucket, celery_args: tuple[str, ...]) -> None:
    """Run a worker for BUCKET (extra arguments go to celery worker)."""
    load_tasks()
    argv = worker_argv(bucket, celery_args)
    os.execve(argv[0], argv, worker_env())


def worker_env() -> dict[str, str]:
    """With RECUR_METRICS_PORT, a fresh directory where the prefork children's metrics meet."""
    if not settings().metrics_port:
        return dict(os.environ)
    import tempfile

    from tasks.metrics.serve import MULTIPROC_ENV
    from tasks.metrics.worker_hooks import WORKER_DIR_PREFIX

    return {**os.environ, MULTIPROC_ENV: tempfile.mkdtemp(prefix=WORKER_DIR_PREFIX)}


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def flower(celery_args: tuple[str, ...]) -> None:
    """Run Flower behind basic auth (RECUR_FLOWER_USER / RECUR_FLOWER_PASSWORD)."""
    env = flower_env()
    load_tasks()
    argv = flower_argv(celery_args)
    os.execve(argv[0], argv, env)


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
    from config.entry import settings_report

    sys.exit(settings_report())


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
    if store_view(bucket, store) and destination is None:
        return show_set_aside(name_of(bucket), limit, as_json)
    if name := chosen(bucket, destination):
        from tasks.destination_dead_cli import show

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
            click.echo(f"{d.task_id} {d.task} reason={d.reason} from={d.from_queue} "
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
    if store_view(bucket, store) and destination is None:
        return replay_set_aside(name_of(bucket), keys, limit)
    if keys:
        raise InvalidArgument("--key replays set-aside rows: give --store too")
    if name := chosen(bucket, destination):
        from tasks.destination_dead_cli import replay

        return replay(name, limit)
    from routing.deadletter import replay_dead
    from tasks.app import app
    from tasks.broker_ops import broker_connection

    with broker_connection(app) as conn:
        click.echo(f"replayed {replay_dead(conn, bucket, limit)} message(s) to {bucket.queue}")


@cli.command()
def scheduler() -> None:
    """Run the scheduler: drain due jobs from the store into the bucket queues."""
    from scheduler.drain import run_scheduler
    from tasks.metrics.serve import serve_metrics

    load_tasks()
    configure_logging()
    serve_metrics(settings(), what="scheduler")
    run_scheduler(settings())


@cli.command()
def exporter() -> None:
    """Export the system-wide Prometheus gauges on RECUR_METRICS_PORT (one per deployment)."""
    from tasks.metrics.exporter import run_exporter

    configure_logging()
    run_exporter(settings())


def configure_logging() -> None:
    """RECUR_LOG_LEVEL for recur's own loggers; the libraries' stay at INFO and above
    (DEBUG shows the scheduler's per-pass lines, not every AMQP frame)."""
    import logging

    level = settings().log_level
    logging.basicConfig(level=max(logging.INFO, logging.getLevelName(level)),
                        format="[%(asctime)s: %(levelname)s/%(name)s] %(message)s")
    logging.getLogger("recur").setLevel(level)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the schema check's chatter


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for machines.")
def status(as_json: bool) -> None:
    """Per bucket: scheduled, due now, lag, dispatched, leases, dead, queue depth.

    Exit code 2 when the store, the broker or Redis cannot be read.
    """
    from tasks.status_report import run

    sys.exit(run(settings(), as_json))


@cli.group()
def db() -> None:
    """Manage the due-jobs database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Create or upgrade the due-jobs tables (RECUR_DATABASE_URL) with the migrations."""
    from scheduler.engine import make_engine
    from scheduler.migrate import upgrade

    engine = make_engine(settings().database_url)
    try:
        click.echo(f"due-jobs schema at revision {upgrade(engine, revision)}")
    finally:
        engine.dispose()


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


@cli.command()
@click.option("--messages", default=300, show_default=True, help="Messages to seed.")
@click.option("--cycles", default=3, show_default=True, help="Runs of each message.")
@click.option("--every", default=1.0, show_default=True, help="Seconds between runs.")
@click.option("--work-scale", default=0.2, show_default=True,
              help="Multiplier of the simulated work (RECUR_WORK_SCALE for the workers).")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait.")
def demo(messages: int, cycles: int, every: float, work_scale: float, timeout: float) -> None:
    """Run the main job end to end: seed, schedule, process, reschedule; print what happened."""
    from tasks.demo import run_demo

    sys.exit(run_demo(messages, cycles, every, work_scale, timeout))


@cli.group()
def resequencer() -> None:
    """Inspect the resequencer's per-destination state."""


@resequencer.command("status")
@click.argument("destinations", nargs=-1)
@click.option("--skipped", "show_skipped", default=0, show_default=True,
              help="Also list this many of each destination's newest skip records.")
def resequencer_status(destinations: tuple[str, ...], show_skipped: int) -> None:
    """Per destination: next sequence to send, buffered, in flight, sent, skipped."""
    from routing.resequencer import Resequencer
    from tasks.redis_conn import get_redis
    from tasks.status_report import destination_line

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
    from routing.resequencer import Resequencer
    from tasks.redis_conn import get_redis

    reseq = Resequencer(get_redis(), settings())
    return [reseq.status(name) for name in destinations or reseq.destinations()]


cli.add_command(jobs)  # recur jobs show|list|cancel|reschedule (tasks/jobs_cli.py)
cli.add_command(bucket)  # recur bucket pause|resume
cli.add_command(doctor)  # recur doctor: is the deployment set up as recur needs (tasks/doctor.py)


def main() -> None:
    """Console-script entry point (config.entry: one error line, exit code 2)."""
    from config.entry import main as entry_main

    entry_main()


if __name__ == "__main__":
    main()
