"""RabbitMQ's ``connection.blocked``/``unblocked``: a broker that is up but refuses to take
publishes for want of memory or disk (a resource alarm). Its connections stay open and a
publish waits for its confirm; :class:`~routing.broker.broker_errors` (the translator of
the broker drivers' errors) hears the notifications through :func:`watch_blocked`, says
the alarm once per process and broker (events ``broker_blocked``/``broker_unblocked``)
and names it in the error of a publish that timed out meanwhile (BrokerBlocked).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("recur.broker")


class Blocked:
    """RabbitMQ's ``connection.blocked``/``unblocked`` (a memory or disk resource alarm)
    as the connections to one broker see them: said once per alarm, however many
    connections and reconnects meet it (event ``broker_blocked``, then
    ``broker_unblocked``); a publish that fails meanwhile is :class:`BrokerBlocked`."""

    def __init__(self, where: str) -> None:
        self.where, self.reason = where, ""
        self.since: float | None = None

    def on_blocked(self, reason: str = "") -> None:
        if self.since is None:
            self.since, self.reason = time.monotonic(), reason or "blocked"
            log.warning(
                "event=broker_blocked broker %s blocks publishing (%s): a memory or "
                "disk resource alarm (rabbitmqctl status); publishes wait for it to "
                "clear, nothing is dropped",
                self.where,
                self.reason,
            )

    def on_unblocked(self) -> None:
        if self.since is not None:
            log.warning(
                "event=broker_unblocked broker %s takes publishes again after %.1fs blocked",
                self.where,
                time.monotonic() - self.since,
            )
            self.since = None

    def describe(self) -> str:
        """What a publish that failed while blocked says."""
        return (
            f"the broker has blocked publishing for {time.monotonic() - (self.since or 0):.0f}"
            f"s ({self.reason}: a memory or disk resource alarm)"
        )


_blocked: dict[str, Blocked] = {}


def watch_blocked(raw: Any) -> Blocked:
    """The :class:`Blocked` of py-amqp connection ``raw``'s broker (one per process and
    broker address), hearing ``raw``'s notifications."""
    state = blocked_at(str(getattr(raw, "host", "broker")))
    if getattr(raw, "on_blocked", None) != state.on_blocked:
        raw.on_blocked, raw.on_unblocked = state.on_blocked, state.on_unblocked
    return state


def blocked_now(raw: Any) -> bool:
    """Whether the broker of py-amqp connection ``raw`` blocks publishing, as last heard."""
    state = _blocked.get(str(getattr(raw, "host", "")))
    return state is not None and state.since is not None


def blocked_at(host: str) -> Blocked:
    """The :class:`Blocked` of the broker at ``host`` (``host:port``)."""
    return _blocked.setdefault(host, Blocked(host))


def blocked_callbacks(url: str) -> dict[str, Any]:
    """py-amqp's ``on_blocked``/``on_unblocked`` for every connection to the broker at
    ``url`` (kombu transport options): a connection hears an alarm from its first publish."""
    from kombu import Connection

    state = blocked_at(str(Connection(url.split(";")[0]).host))
    return {"on_blocked": Notice(state.on_blocked), "on_unblocked": Notice(state.on_unblocked)}


class Notice:
    """A notice callback that also shows as JSON: Celery's ``inspect stats`` replies with
    the transport options, and a plain bound method there made every such reply an
    EncodeError (no stats for the worker at all)."""

    def __init__(self, call: Callable[..., None]) -> None:
        self.call = call

    def __call__(self, *args: Any) -> None:
        self.call(*args)

    def __json__(self) -> str:
        return f"recur.{self.call.__name__}"
