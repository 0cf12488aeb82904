"""A producer whose bucket queue was deleted or unbound after it declared it once.

RabbitMQ confirms a message no queue is bound to take and drops it; kombu declares a queue
once per connection. recur publishes mandatory: the message comes back, its queue is
declared and bound again and the message published again before the call returns
(routing/routed.py); a queue that cannot be declared again is one clear error, not a loss.
In-process, against the real broker, in a vhost of this module's own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import amqp
import pytest
from kombu import Connection

from config.buckets_in_use import BUCKETS_BY_NAME
from config.errors import PublishRefused
from config.settings import settings
from routing.deadletter import replay_dead
from routing.queues import declare_topology
from routing.reseq import dead_letters as letters
from routing.reseq.dead_letters import DeadLetter
from tasks.app import RecurCelery, celery_config
from tests.support import services

pytestmark = pytest.mark.services

SHORT = BUCKETS_BY_NAME["short"]
TASK = "recur.test.unroutable_probe"  # by name: no task of the app, routed by queue=


@pytest.fixture(scope="module")
def vhost(live_services: None) -> Iterator[str]:
    with services.scratch_vhost("unroutable") as name:
        yield name


@pytest.fixture
def app(vhost: str) -> Iterator[Any]:
    """A long-running producer of its own (not the current app) with the topology declared
    and the short queue empty."""
    cfg = replace(settings(), broker_url=f"amqp://guest:guest@127.0.0.1:5672/{vhost}")
    producer = RecurCelery("recur-unroutable", set_as_current=False)
    producer.config_from_object(celery_config(cfg))
    with producer.connection_for_write() as conn:
        declare_topology(conn, cfg)
        with conn.channel() as ch:
            ch.queue_purge(SHORT.queue)
            ch.queue_purge(SHORT.dead_queue)
    yield producer
    producer.close()


@pytest.fixture
def raw(vhost: str) -> Iterator[Any]:
    """An operator's channel on the vhost."""
    conn = amqp.Connection(
        "127.0.0.1:5672", userid="guest", password="guest", virtual_host=vhost, confirm_publish=True
    )
    conn.connect()
    try:
        yield conn.channel()
    finally:
        conn.close()


def publish(app: Any) -> str:
    task_id = uuid.uuid4().hex
    app.send_task(TASK, args=[{"n": 1}], task_id=task_id, queue=SHORT.queue)
    return task_id


def unbind(ch: Any, queue: str) -> None:
    """Remove every binding of ``queue`` to recur.tasks (its name, and ``#.<name>`` which
    Celery's delayed delivery of quorum queues adds): nothing routes to it any more."""
    for key in (queue, f"#.{queue}"):
        ch.queue_unbind(queue, "recur.tasks", key)


def queued_ids(ch: Any, queue: str) -> list[str]:
    """The task ids in ``queue``, taken out of it (the publish was confirmed: they are in)."""
    ids = []
    while (message := ch.basic_get(queue, no_ack=True)) is not None:
        ids.append(message.headers["id"])
    return ids


def test_publish_after_the_queue_was_deleted_lands_in_it_again(app: Any, raw: Any) -> None:
    first = publish(app)  # the producer declares the queue once, here
    assert queued_ids(raw, SHORT.queue) == [first]
    raw.queue_delete(SHORT.queue)
    second = publish(app)
    assert queued_ids(raw, SHORT.queue) == [second]  # declared again, with the message
    third = publish(app)  # and the queue keeps taking them
    assert queued_ids(raw, SHORT.queue) == [third]


def test_publish_after_the_queue_was_unbound_lands_in_it(app: Any, raw: Any) -> None:
    publish(app)
    unbind(raw, SHORT.queue)
    raw.queue_purge(SHORT.queue)
    task_id = publish(app)
    assert queued_ids(raw, SHORT.queue) == [task_id]


def test_a_queue_that_cannot_be_declared_again_is_one_clear_error(app: Any, raw: Any) -> None:
    publish(app)
    raw.queue_delete(SHORT.queue)
    raw.queue_declare(
        SHORT.queue, durable=True, auto_delete=False, arguments={"x-queue-type": "classic"}
    )  # someone else's, unbound
    try:
        with pytest.raises(PublishRefused) as refused:
            publish(app)
        line = str(refused.value)
        assert "\n" not in line and f"queue '{SHORT.queue}' takes no message" in line, line
        assert f"queue {SHORT.queue} cannot be declared again" in line, line
        assert queued_ids(raw, SHORT.queue) == []
    finally:
        raw.queue_delete(SHORT.queue)


def test_dead_letter_replay_to_an_unbound_queue_is_not_lost(app: Any, raw: Any) -> None:
    task_id = publish(app)
    message = raw.basic_get(SHORT.queue, no_ack=True)
    assert message is not None and message.headers["id"] == task_id
    raw.basic_publish(
        amqp.Message(message.body, **message.properties),
        exchange="recur.dead",
        routing_key=SHORT.dead_queue,
    )
    unbind(raw, SHORT.queue)
    with Connection(app.conf.broker_url, transport_options={"confirm_publish": True}) as conn:
        assert replay_dead(conn, SHORT) == 1
    assert queued_ids(raw, SHORT.queue) == [task_id]
    assert queued_ids(raw, SHORT.dead_queue) == []


def test_a_destination_dead_letter_after_its_queue_was_deleted_is_kept(app: Any, raw: Any) -> None:
    cfg = replace(settings(), broker_url=app.conf.broker_url)
    dest = f"unroutable-{uuid.uuid4().hex[:6]}"
    try:
        letters.publish(cfg, DeadLetter(dest, 1, "m1", "refused: HTTP 400", 400, 0.0))
        raw.queue_delete(letters.queue_name(dest))  # the pooled producer declared it once
        letters.publish(cfg, DeadLetter(dest, 2, "m2", "refused: HTTP 400", 400, 0.0))
        with Connection(app.conf.broker_url) as conn:
            assert [d.seq for d in letters.list_letters(conn, dest)] == [2]
    finally:
        raw.queue_delete(letters.queue_name(dest))
