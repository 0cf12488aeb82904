"""Publishes that land in a queue or fail loudly: never confirmed and dropped as unroutable.

RabbitMQ confirms a message that no queue is bound to take and drops it. A long-running
producer declares a queue once (kombu remembers it per connection), so after an operator
deleted a bucket's queue, or removed its binding to ``recur.tasks``, every publish of that
producer to it would vanish. recur's publishes are ``mandatory``: such a message comes back
(basic.return, which RabbitMQ sends before the confirm, so the confirm wait has read it),
its queue is declared and bound again (routing/queues.declare_again) and the message that
came back is published again; if that one comes back too, :class:`PublishRefused` names the
queue. A routed message costs nothing more: no round trip, only a look at a list.

Used by Celery's task publishes (tasks/app.py: ``apply_async``, ``send_task``, retries,
hand-backs, handovers, a worker's publishes), the dead-letter replay (routing/deadletter.py)
and the resequencer's dead letters (routing/reseq/dead_letters.py). The scheduler's batch
publisher does the same in its own way (scheduler/publisher.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from kombu import Queue
from kombu.utils.functional import ChannelPromise

from config.errors import BrokerBlocked, PublishRefused
from config.settings import settings
from routing.blocked import blocked_at
from routing.broker import PUBLISH_ERRORS
from routing.queues import declare_again

T = TypeVar("T")
#: Celery's native delayed delivery exchange: 28 bits of delay, then the queue's key.
DELAYED_EXCHANGE = "celery_delayed_27"
DELAY_BITS = 28
#: Seconds to wait for the confirm of a message published again.
CONFIRM_TIMEOUT = 30.0


class Returned(NamedTuple):
    reply: str
    exchange: str
    routing_key: str
    message: Any


class Returns:
    """A channel's basic.return listener: the messages that came back, not yet handled."""

    def __init__(self) -> None:
        self.messages: list[Returned] = []

    def __call__(self, exc: Any, exchange: str, routing_key: str, message: Any) -> None:
        reply = f"{getattr(exc, 'reply_code', '')} {getattr(exc, 'reply_text', exc)}".strip()
        self.messages.append(Returned(reply, exchange, routing_key, message))

    def take(self) -> list[Returned]:
        taken, self.messages = self.messages, []
        return taken


def listening(producer: Any) -> Returns | None:
    """The producer's listener, made on first use; None on a transport without returns
    (kombu's virtual ones) or for a producer with a listener of another's. It is the
    producer's ``on_return``: kombu adds it to the channel it opens (or revives) the
    producer on, within the publish and its retries (the channel is not opened here)."""
    returns = producer.on_return
    if returns is None:
        transport = getattr(producer.connection, "transport", None)
        if getattr(transport, "driver_type", None) != "amqp":
            return None
        returns = producer.on_return = Returns()
    elif not isinstance(returns, Returns):
        return None
    channel = producer._channel  # a channel kombu already opened does not get it again
    if not isinstance(channel, ChannelPromise):
        channel.events["basic_return"].add(returns)  # a set: once
    return returns


def routed(producer: Any, publish: Callable[[], T], extra: Iterable[Queue] = ()) -> T:
    """``publish()`` (a mandatory publish through ``producer``, with confirms), then every
    message that came back unroutable declared again and published again, or
    :class:`PublishRefused`. What is declared again: recur's work and dead-letter queues,
    and ``extra`` (a queue of the caller's own, e.g. a destination's dead letters)."""
    returns = listening(producer)
    result = publish()
    if returns is None:
        return result
    handlers = producer.channel.events["basic_return"]
    for stale in [h for h in handlers if isinstance(h, Returns) and h is not returns]:
        handlers.discard(stale)  # a producer made per call on a shared channel left it
    if returns.messages:
        publish_again(producer, returns, extra)
    return result


def queue_of(returned: Returned) -> str:
    """The queue a returned message was meant for (its key, past a delay's bits)."""
    if returned.exchange == DELAYED_EXCHANGE:
        return returned.routing_key.split(".", DELAY_BITS)[-1]
    return returned.routing_key


def publish_again(producer: Any, returns: Returns, extra: Iterable[Queue]) -> None:
    """Declare the queues of the returned messages again and publish them again, each
    confirmed; :class:`PublishRefused` for one that comes back again."""
    came_back = returns.take()
    said = declare_again(
        producer.connection.channel, {queue_of(r) for r in came_back}, settings(), extra
    )
    for first in came_back:
        producer.channel.basic_publish(
            first.message,
            exchange=first.exchange,
            routing_key=first.routing_key,
            mandatory=True,
            confirm_timeout=CONFIRM_TIMEOUT,
        )
        again = returns.take()
        if again:
            queue = queue_of(first)
            done = [s for s in said if s.startswith(f"queue {queue} ")]
            raise PublishRefused(
                f"queue {queue!r} takes no message: one published to {first.exchange!r} with "
                f"key {first.routing_key!r} came back unroutable ({again[0].reply}) after "
                f"recur tried to declare the queue again ("
                + (done[0] if done else "it is no queue of recur's")
                + "); the message was not published"
            )


def task_sender(send: Callable[..., Any]) -> Callable[..., Any]:
    """Celery's task sender (``AMQP._create_task_sender``) made ``mandatory`` and
    :func:`routed`, its confirm wait bounded (CONFIRM_TIMEOUT): used by tasks/app.py for
    ``apply_async``, ``send_task``, retries, hand-backs and a worker's publishes."""

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        # A broker under a resource alarm blocks publishing: the confirm waits for it
        # up to a deadline (never forever), then BrokerBlocked; no retry adds a copy.
        blocked = blocked_at(str(producer.connection.host))
        timeout = options.pop("confirm_timeout", None) or CONFIRM_TIMEOUT

        def refused(exc: BaseException, _interval: float = 0.0) -> None:
            if blocked.since is not None:  # kombu dropped the connection (or we do)
                producer.connection.collect()  # its close would wait for the alarm
                raise BrokerBlocked(f"broker: task {name} {message[0].get('id', '')}: not "
                                    f"confirmed in {timeout:g}s: {blocked.describe()}; "
                                    f"it may still be delivered when the alarm clears"
                                    ) from exc

        policy = {**(options.pop("retry_policy", None) or {}), "errback": refused}
        try:
            return routed(producer, lambda: send(
                producer, name, message, **{**options, "confirm_timeout": timeout,
                                            "retry_policy": policy, "mandatory": True}))
        except PUBLISH_ERRORS as exc:
            refused(exc)
            raise

    return send_task_message
