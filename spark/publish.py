"""``--sink broker``: publish seeded messages as Celery tasks, in confirmed batches.

One broker connection per sink (the seed job opens one per partition).
Messages go out through Celery's ``apply_async`` with one shared producer, so
routing and validation are Celery's own; but instead of waiting for the
broker's confirm after every message (the app's ``confirm_publish``), the
channel is put in confirm mode once and a batch waits for all its confirms
together: ``load`` returns only when the broker holds every message of it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from kombu.exceptions import OperationalError

from config.errors import BrokerUnavailable
from scheduler.store_bulk import BulkResult

CONFIRM_TIMEOUT = 60.0


class Confirms:
    """Counts the broker's publisher confirms on one channel (in confirm mode)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.acked = 0
        self.nacked = 0
        channel.events["basic_ack"].add(self._ack)
        channel.events["basic_nack"].add(self._nack)
        channel.confirm_select()

    def _ack(self, tag: int, multiple: bool) -> None:
        self.acked = max(self.acked, tag)

    def _nack(self, tag: int, multiple: bool) -> None:
        self.nacked += 1

    def wait(self, published: int, timeout: float = CONFIRM_TIMEOUT) -> None:
        """Block until the broker confirmed the first ``published`` messages."""
        while self.acked < published and not self.nacked:
            self.channel.connection.drain_events(timeout=timeout)
        if self.nacked:
            raise BrokerUnavailable(f"the broker refused {self.nacked} seeded message(s)")


class BrokerPublisher:
    """Publishes the message of each due-jobs ``args`` to ``tasks.process_message``."""

    def __init__(self, broker_url: str) -> None:
        from tasks.app import app
        from tasks.process import process_message

        self.task = process_message
        self.conn = app.connection_for_write(broker_url,
                                             transport_options={"confirm_publish": False})
        try:
            channel = self.conn.default_channel
        except (OSError, OperationalError) as exc:
            raise BrokerUnavailable(f"broker {self.conn.as_uri()}: {exc}") from exc
        self.confirms = Confirms(channel)
        self.producer = app.amqp.Producer(channel)
        self.published = 0

    def load(self, lines: Sequence[str]) -> BulkResult:
        """Publish one batch (``args`` JSON texts) and wait for its confirms."""
        for args in lines:
            self.task.apply_async((json.loads(args)["args"][0],), producer=self.producer)
        self.published += len(lines)
        self.confirms.wait(self.published)
        return BulkResult(len(lines), len(lines))

    def close(self) -> None:
        self.conn.release()

    def __enter__(self) -> BrokerPublisher:
        return self

    def __exit__(self, _t: type[BaseException] | None, _e: BaseException | None,
                 _tb: TracebackType | None) -> None:
        self.close()
