"""The long-running processes recur runs itself: ``recur scheduler`` and ``recur exporter``."""

from __future__ import annotations

from config.settings import settings
from tasks.cli.group import cli
from tasks.cli.worker import load_tasks


@cli.command()
def scheduler() -> None:
    """Run the scheduler: drain due jobs from the store into the bucket queues."""
    from scheduler.service import run_scheduler
    from tasks.app import app
    from tasks.metrics.serve import serve_metrics

    load_tasks()
    configure_logging()
    serve_metrics(settings(), what="scheduler")
    run_scheduler(settings(), app.conf.beat_schedule, set(app.tasks))


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
