"""A queue or exchange of recur's declared by someone else with other arguments or flags.

The broker refuses recur's declare (406 PRECONDITION_FAILED, or 405 RESOURCE_LOCKED for an
exclusive queue of another connection) every time: a worker or scheduler that start must end
with one ``recur:`` line naming what differs (exit 2), not a Celery traceback or a
reconnect loop. Each case gets a fresh vhost of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import amqp
import pytest

from config.errors import one_line
from tests.support import services
from tests.support.processes import recur_argv

pytestmark = pytest.mark.services


@pytest.fixture
def vhost(live_services: None) -> Iterator[str]:
    with services.scratch_vhost("topo") as name:
        yield name


def channel(vhost: str) -> tuple[amqp.Connection, Any]:
    conn = amqp.Connection("127.0.0.1:5672", userid="guest", password="guest",
                           virtual_host=vhost)
    conn.connect()
    return conn, conn.channel()


def queue(name: str, arguments: dict[str, Any], **flags: bool) -> Callable[[Any], None]:
    def declare(ch: Any) -> None:
        ch.queue_declare(name, **{"durable": True, "auto_delete": False, **flags},
                         arguments=arguments)
    return declare


def exchange(name: str, kind: str) -> Callable[[Any], None]:
    def declare(ch: Any) -> None:
        ch.exchange_declare(name, kind, durable=True, auto_delete=False)
    return declare


CASES = {
    "classic work queue": (queue("short", {"x-queue-type": "classic"}),
                           "inequivalent arg 'x-dead-letter-exchange' for queue 'short'"),
    "other dead-letter exchange": (
        queue("short", {"x-queue-type": "quorum", "x-dead-letter-exchange": "elsewhere",
                        "x-dead-letter-routing-key": "short.dead", "x-delivery-limit": 4}),
        "inequivalent arg 'x-dead-letter-exchange' for queue 'short'"),
    "dead-letter queue with max-length": (
        queue("short.dead", {"x-queue-type": "quorum", "x-max-length": 10}),
        "inequivalent arg 'x-max-length' for queue 'short.dead'"),
    "non-durable dead-letter queue": (queue("medium.dead", {}, durable=False),
                                      "for queue 'medium.dead'"),
    "auto-delete work queue": (queue("long", {}, auto_delete=True), "for queue 'long'"),
    "exclusive dead-letter queue": (queue("short.dead", {}, exclusive=True),
                                    "locked queue 'short.dead'"),
    "direct task exchange": (exchange("recur.tasks", "direct"),
                             "inequivalent arg 'type' for exchange 'recur.tasks'"),
}


def run(argv: list[str], vhost: str, tmp_path: Path,
        extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECUR_")}
    env.update({**services.test_environment(),
                "RECUR_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}",
                "RECUR_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}", **(extra or {})})
    return subprocess.run(argv, env=env, cwd=services.ROOT, capture_output=True, text=True,
                          timeout=90)


def assert_one_line(result: subprocess.CompletedProcess[str], names: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out, out
    assert "reconnecting" not in out, out
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("recur: broker amqp://guest:***@"), out
    assert "refused recur's topology" in last and names in last, last


#: One case of each refusal the broker gives (another argument, a locked queue, an exchange
#: of another type) through the processes; every case goes through the same check
#: (routing/broker.py), held to each of CASES in one process below.
START_CASES = ["other dead-letter exchange", "exclusive dead-letter queue", "direct task exchange"]


@pytest.mark.parametrize("case", START_CASES)
def test_scheduler_start_is_one_line(vhost: str, tmp_path: Path, case: str) -> None:
    declare, names = CASES[case]
    conn, ch = channel(vhost)  # held open: an exclusive queue lives as long as it
    try:
        declare(ch)
        assert run(recur_argv("db", "upgrade"), vhost, tmp_path).returncode == 0
        assert_one_line(run(["timeout", "80", *recur_argv("scheduler")], vhost, tmp_path),
                        names)
    finally:
        conn.close()


def test_every_conflict_is_one_line_naming_what_differs(vhost: str) -> None:
    """check_access, as every process's start runs it, on each of CASES in turn (one vhost:
    each case's foreign queue or exchange deleted again before the next)."""
    from config.errors import ServiceRefused
    from config.settings import load_settings
    from routing.broker import check_access
    from routing.queues import declare_topology

    url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    cfg = load_settings({**services.test_environment(), "RECUR_BROKER_URL": url})
    for case, (declare, names) in CASES.items():
        conn, ch = channel(vhost)
        try:
            declare(ch)
            with pytest.raises(ServiceRefused) as refused:
                check_access(url, lambda c: declare_topology(c, cfg))
            line = one_line(refused.value) or ""
            assert "refused recur's topology" in line and names in line, (case, line)
            assert "\n" not in line and "amqp://guest:***@" in line, (case, line)
        finally:
            conn.close()
        conn, ch = channel(vhost)
        try:  # the case's queues and exchanges gone, recur's own too: a clean vhost
            for name in ("short", "short.dead", "medium.dead", "long"):
                ch.queue_delete(name)
            ch.exchange_delete("recur.tasks")
        finally:
            conn.close()


@pytest.mark.parametrize("argv", [["worker", "short"], ["celery"]])
def test_worker_start_is_one_line(vhost: str, tmp_path: Path, argv: list[str]) -> None:
    declare, names = CASES["classic work queue"]
    conn, ch = channel(vhost)
    try:
        declare(ch)
        command = (recur_argv(*argv) if argv[0] != "celery" else
                   [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-Q", "short",
                    "--pool", "solo"])
        assert_one_line(run(["timeout", "80", *command], vhost, tmp_path), names)
    finally:
        conn.close()


def limit(vhost: str, limits: str) -> None:
    services.rabbitmqctl("set_vhost_limits", "-p", vhost, limits)


def assert_limit_line(result: subprocess.CompletedProcess[str], names: str) -> None:
    out = result.stdout + result.stderr
    assert result.returncode == 2, out
    assert "Traceback" not in out and "Unrecoverable" not in out, out
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("recur: broker amqp://guest:***@"), out
    assert names in last and "the virtual host's limit is reached" in last, last
    assert "password" not in last, last  # not the credentials hint


def test_max_queues_below_recurs_topology_is_one_line(vhost: str, tmp_path: Path) -> None:
    limit(vhost, '{"max-queues": 5}')
    assert run(recur_argv("db", "upgrade"), vhost, tmp_path).returncode == 0
    assert_limit_line(run(["timeout", "80", *recur_argv("scheduler")], vhost, tmp_path),
                      "queue limit in vhost")


def test_max_queues_without_room_for_celerys_own_queues_is_one_line(
        vhost: str, tmp_path: Path) -> None:
    """recur's queues fit, Celery's own (its pidbox reply queue) do not: the worker's
    consumer ends with one line, not Celery's "Unrecoverable error" and traceback."""
    assert run(recur_argv("topology"), vhost, tmp_path).returncode == 0
    listed = subprocess.run(["rabbitmqctl", "-q", "-p", vhost, "list_queues", "name"],
                            capture_output=True, text=True, timeout=60, check=True)
    limit(vhost, f'{{"max-queues": {len(listed.stdout.split()) - 1}}}')  # minus the header
    assert_limit_line(run(["timeout", "80", *recur_argv("worker", "short")], vhost, tmp_path),
                      ".reply.celery.pidbox': queue limit in vhost")


def test_max_connections_reached_is_one_line(vhost: str, tmp_path: Path) -> None:
    limit(vhost, '{"max-connections": 0}')
    assert run(recur_argv("db", "upgrade"), vhost, tmp_path).returncode == 0
    assert_limit_line(run(["timeout", "80", *recur_argv("scheduler")], vhost, tmp_path),
                      "connection limit (0) is reached")


@pytest.mark.parametrize("api", ["management API", "redeclaring"])
@pytest.mark.parametrize(("case", "said"), [
    ("other dead-letter exchange",
     "short has x-dead-letter-exchange 'elsewhere', recur declares 'recur.dead'"),
    ("exclusive dead-letter queue", "short.dead is exclusive, recur declares it not exclusive")])
def test_doctor_names_the_queue(vhost: str, tmp_path: Path, case: str, said: str,
                                api: str) -> None:
    """Before, the management API's listing was compared by type and delivery limit only
    (another dead-letter exchange was "ok"), and an exclusive queue stopped the whole check
    when the API was not reachable ("the check could not run")."""
    conn, ch = channel(vhost)
    try:
        CASES[case][0](ch)
        assert run(recur_argv("db", "upgrade"), vhost, tmp_path).returncode == 0
        closed = f"http://guest:guest@127.0.0.1:{services.free_port()}/api/"
        env = {} if api == "management API" else {"RECUR_FLOWER_BROKER_API": closed}
        result = run(["timeout", "80", *recur_argv("doctor")], vhost, tmp_path, env)
    finally:
        conn.close()
    out = result.stdout + result.stderr
    assert result.returncode == 2 and "Traceback" not in out, out
    [line] = [x for x in result.stdout.splitlines() if x.startswith("FAIL  rabbitmq queues: ")]
    if api == "redeclaring":  # the broker's own words
        said = {"other dead-letter exchange":
                "inequivalent arg 'x-dead-letter-exchange' for queue 'short'",
                "exclusive dead-letter queue": "locked queue 'short.dead'"}[case]
    assert said in line, line


def scheduler_publisher(vhost: str) -> Any:
    """The scheduler's publisher on ``vhost``, declaring the topology at each connect, as
    ``recur scheduler`` does; the topology declared once first."""
    from kombu import Connection

    from config.settings import load_settings
    from routing.queues import TASK_EXCHANGE, declare_topology
    from scheduler.publisher import ConfirmingPublisher

    url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    cfg = load_settings({**services.test_environment(), "RECUR_BROKER_URL": url})
    with Connection(url) as conn:
        declare_topology(conn, cfg)
    return ConfirmingPublisher(url, TASK_EXCHANGE.name,
                               on_connect=lambda conn: declare_topology(conn, cfg))


def dispatcher(store: Any, publisher: Any, bucket: str) -> Callable[[], int]:
    from datetime import UTC, datetime, timedelta

    from scheduler.set_aside import Caught
    from tests.integration.test_store_set_aside import job

    store.schedule([job(f"{bucket}-a", bucket=bucket), job(f"{bucket}-b", bucket=bucket)],
                   datetime.now(UTC))

    def dispatch() -> int:
        now = datetime.now(UTC)
        return int(store.dispatch(bucket, 10, now, now + timedelta(minutes=30),
                                  Caught(publisher.publish)))
    return dispatch


def depth(vhost: str, queue: str) -> int:
    from kombu import Connection

    from routing.broker import queue_depth

    with Connection(f"amqp://guest:guest@127.0.0.1:5672/{vhost}") as conn:
        return queue_depth(conn, queue)


def test_a_queue_whose_binding_was_removed_is_bound_again(vhost: str, store: Any) -> None:
    """A bucket queue unbound from ``recur.tasks`` under a running scheduler (an operator's
    HTTP API call, or a queue deleted and declared again by someone else): its publishes come
    back unroutable. Before, the bucket was held back and tried again for ever, nothing
    dispatched until someone ran `recur topology`; now the publisher declares the queue and
    its binding again at the refusal, and the next try goes through. Nothing is lost."""
    from config.errors import PublishRefused

    publisher = scheduler_publisher(vhost)
    publisher.connect()  # running: connected (and the topology declared) before the unbind
    conn, ch = channel(vhost)
    try:
        for key in ("short", "#.short"):
            ch.queue_unbind("short", "recur.tasks", key)
    finally:
        conn.close()
    dispatch = dispatcher(store, publisher, "short")
    try:
        with pytest.raises(PublishRefused, match="queue short declared and bound again"):
            dispatch()
        assert dispatch() == 2
    finally:
        publisher.close()
    assert depth(vhost, "short") == 2


def test_a_foreign_queue_at_reconnect_holds_back_its_bucket_alone(vhost: str,
                                                                 store: Any) -> None:
    """``medium`` deleted and declared again by someone else (classic, unbound) under a
    running scheduler, which then reconnects (a broker restart): its declare of the topology
    is refused. Before, every reconnect failed on it and no bucket was dispatched again; now
    the refusal is a WARNING, ``short`` is dispatched, and ``medium``'s rows stay due with a
    line naming what differs."""
    from config.errors import PublishRefused

    publisher = scheduler_publisher(vhost)
    conn, ch = channel(vhost)
    try:
        ch.queue_delete("medium")
        queue("medium", {"x-queue-type": "classic"})(ch)
    finally:
        conn.close()
    short, medium = dispatcher(store, publisher, "short"), dispatcher(store, publisher, "medium")
    try:
        publisher.connect()
        assert short() == 2
        with pytest.raises(PublishRefused, match="queue medium cannot be declared again: "
                                                 "PRECONDITION_FAILED - inequivalent arg"):
            medium()
    finally:
        publisher.close()
    assert depth(vhost, "short") == 2
    assert depth(vhost, "medium") == 0
