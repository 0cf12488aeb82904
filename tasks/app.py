"""The Celery app: ``celery -A tasks worker -Q short`` finds it as ``tasks.app``.

Secure and lossless defaults: JSON only (pickle refused), late acks so a
message is acknowledged only after its task ran, a lost worker's message
requeued, and a failed task rejected into its bucket's dead-letter queue
rather than acknowledged away.
"""

from __future__ import annotations

import os
import sys
from functools import cached_property
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP

from config import keys
from config.errors import EXIT_ERROR, ConfigError, one_line
from config.settings import Settings, settings
from routing.blocked import blocked_callbacks
from routing.queues import TASK_EXCHANGE, work_queues
from routing.routed import task_sender
from routing.router import route_task

DEFAULT_QUEUE = "short"


class RoutedAMQP(AMQP):  # type: ignore[misc]
    """Celery's publishing, with every task message ``mandatory``: one no queue takes (its
    bucket queue deleted or unbound since this process declared it) is declared again and
    published again before ``apply_async``/``send_task``/``retry`` return, or refused with
    PublishRefused naming the queue (routing/routed.py), never confirmed and dropped."""

    def _create_task_sender(self) -> Any:
        return task_sender(super()._create_task_sender())


class RecurCelery(Celery):  # type: ignore[misc]
    """Celery whose worker applies the bucket profile of the queue it consumes, whose
    revoke also cancels stored jobs (tasks/revoke.py), and whose AsyncResult reads the
    due-jobs store for a job key (tasks/stored_result.py)."""

    control_cls = "tasks.revoke:RecurControl"
    amqp_cls = "tasks.app:RoutedAMQP"

    @cached_property
    def Worker(self) -> Any:
        return self.subclass_with_self("tasks.worker:BucketWorker")

    @cached_property
    def AsyncResult(self) -> Any:
        return self.subclass_with_self("tasks.stored_result:StoredResult")


def celery_config(cfg: Settings) -> dict[str, Any]:
    """Celery settings derived from recur's settings."""
    return {
        "broker_url": cfg.broker_url,
        "result_backend": cfg.results_url,
        "result_backend_transport_options": {"global_keyprefix": keys.celery_prefix(
            cfg.key_prefix)},
        # Publisher confirms: apply_async returns only once the broker has the message.
        "broker_transport_options": {"confirm_publish": True,
                                     **blocked_callbacks(cfg.broker_url)},
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        # A failure or hard timeout is rejected (not acked): the broker dead-letters it.
        "task_acks_on_failure_or_timeout": False,
        "task_queues": work_queues(cfg),
        "task_default_queue": DEFAULT_QUEUE,
        "task_default_exchange": TASK_EXCHANGE.name,
        "task_default_exchange_type": TASK_EXCHANGE.type,
        "task_default_routing_key": DEFAULT_QUEUE,
        "task_create_missing_queues": False,
        "task_routes": (route_task,),
        # Results of tens of millions of runs would fill Redis: keep failures only, and
        # those for RECUR_RESULT_EXPIRES (a day): `recur dead list` shows the error beside
        # a dead letter; the dead letter itself stays in RabbitMQ until replayed.
        "task_ignore_result": True,
        "task_store_errors_even_if_ignored": True,
        "result_expires": cfg.result_expires,
        "task_track_started": False,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_consumer": "tasks.consumer:DeadLetteringConsumer",
        # Your task modules (RECUR_IMPORTS): every `celery -A tasks` command imports them.
        "imports": cfg.imports,
        "enable_utc": True,
        "timezone": "UTC",
    }


def _settings_for_app() -> Settings:
    """The environment's settings; under ``celery -A tasks …`` (or config.worker_entry) a bad
    one is the ``recur: …`` line and exit 2 that ``recur`` gives, not Celery's "Unable to
    load celery application" with a traceback (it catches every Exception of the import)."""
    try:
        return settings()
    except ConfigError as exc:
        program = os.path.normpath(sys.argv[0]) if sys.argv else ""
        if not program.endswith(("celery", os.path.join("celery", "__main__.py"),
                                 os.path.join("config", "worker_entry.py"))):
            raise
        print(f"recur: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_ERROR) from None


def create_app(cfg: Settings | None = None) -> RecurCelery:
    """Build the Celery app from ``cfg`` (default: the environment's settings)."""
    app = RecurCelery("recur", set_as_current=True)
    app.config_from_object(celery_config(cfg or _settings_for_app()))
    return app


app = create_app()
