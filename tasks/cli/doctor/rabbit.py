"""``recur doctor``'s RabbitMQ checks (tasks/cli/doctor/command.py prints them).

The broker answers; its version has quorum queues with delivery limits (3.8+);
every recur queue exists with the type and arguments recur declares (a queue's
are fixed when it is first declared, so a queue made by an older recur or by
hand keeps its old ones). The queues are read from the management API when it
answers; otherwise each existing queue is declared again over AMQP with recur's
arguments, which the broker refuses (406) when they differ: same answer, and
nothing is created (a missing queue is only reported).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from amqp.exceptions import NotFound, PreconditionFailed, ResourceLocked
from kombu import Connection, Queue

from config.errors import BrokerUnavailable
from config.redact import masked
from config.settings import Settings
from routing.broker import connect
from tasks.cli.doctor.check import Check, fail, ok, said, warn

#: Oldest RabbitMQ with quorum queues and x-delivery-limit.
QUORUM_SINCE = (3, 8)
TIMEOUT = 5


class ManagementUnreachable(Exception):
    """The management API did not answer with the queues (reason in the message)."""


def checks(cfg: Settings) -> list[Check]:
    """Reachable, version, queues."""
    url = masked(cfg.broker_url)
    conn = Connection(cfg.broker_url, connect_timeout=TIMEOUT)
    try:
        try:
            connect(conn)
        except BrokerUnavailable as exc:  # whatever kombu's transport raised, as its cause
            return [fail("rabbitmq", f"cannot reach {url}: {said(exc.__cause__ or exc)}: start "
                                     f"it, or fix RECUR_BROKER_URL (version and queues not "
                                     f"checked)")]
        version = str(conn.connection.server_properties.get("version", "?"))
        return [ok("rabbitmq", f"reachable at {url} (RabbitMQ {version})"),
                version_check(cfg, version), queues_check(cfg, conn)]
    finally:
        with contextlib.suppress(Exception):
            conn.release()


def version_check(cfg: Settings, version: str) -> Check:
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        return warn("rabbitmq version", f"{version!r} is not a version recur can read: "
                                        f"quorum queues need 3.8 or later")
    if (int(found[1]), int(found[2])) >= QUORUM_SINCE:
        return ok("rabbitmq version", f"{version}: has quorum queues with delivery limits "
                                      f"(3.8 or later)")
    if cfg.queue_type == "quorum":
        return fail("rabbitmq version", f"{version} has no quorum queues or delivery limits "
                                        f"(3.8 or later): upgrade RabbitMQ")
    return warn("rabbitmq version", f"{version}: upgrade to 3.8 or later for quorum queues")


def expected_queues(cfg: Settings) -> dict[str, Queue]:
    """Every queue recur declares, by name, with its arguments."""
    from routing.queues import OUTBOUND, dead_queue, work_queue

    return {q.name: q for b in (*cfg.buckets.buckets, OUTBOUND)
            for q in (work_queue(b, cfg), dead_queue(b, cfg))}


def queues_check(cfg: Settings, conn: Connection) -> Check:
    from tasks.cli.flower_main import broker_api

    queues = expected_queues(cfg)
    api = broker_api(cfg.broker_url, cfg.flower_broker_api)
    try:
        problems, missing = from_management(api, conn.virtual_host or "/", queues)
        how = f"read from the management API {masked(api)}"
    except ManagementUnreachable as exc:
        problems, missing = by_redeclaring(conn, queues)
        how = (f"checked by declaring them again: the management API {masked(api)} "
               f"is not reachable ({exc})")
    if problems:
        return fail("rabbitmq queues", f"{'; '.join(problems)}: a queue keeps the type and "
                    f"arguments it was first declared with: move its messages away, delete it "
                    f"and run `recur topology` (docs/security.md) [{how}]")
    if missing:
        return warn("rabbitmq queues", f"not declared yet: {', '.join(missing)}: run `recur "
                    f"topology`, or start a worker or the scheduler [{how}]")
    return queue_type_check(cfg, len(queues), how)


def queue_type_check(cfg: Settings, count: int, how: str) -> Check:
    if cfg.queue_type != "quorum":
        return warn("rabbitmq queues", f"{count} {cfg.queue_type} queues: no delivery limit, "
                    f"so a message that kills its worker is delivered again for ever: "
                    f"RECUR_QUEUE_TYPE=quorum [{how}]")
    return ok("rabbitmq queues", f"{count} quorum queues, each work queue with delivery limit "
              f"{cfg.max_deliveries - 1} (RECUR_MAX_DELIVERIES={cfg.max_deliveries}) [{how}]")


def from_management(api: str, vhost: str,
                    queues: dict[str, Queue]) -> tuple[list[str], list[str]]:
    """(problems, missing queues) as the management API lists the vhost's queues."""
    listed = {q["name"]: q for q in management_get(api, f"queues/{quote(vhost, safe='')}"
                                                   "?columns=name,type,arguments,durable,"
                                                   "auto_delete,exclusive,"
                                                   "effective_policy_definition")}
    problems, missing = [], []
    for name, queue in queues.items():
        if name not in listed:
            missing.append(name)
            continue
        problems += differences(name, queue.queue_arguments or {}, listed[name])
    return problems, missing


def differences(name: str, wanted: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """What differs between the queue recur declares and the one the API shows."""
    args = found.get("arguments") or {}
    policy = found.get("effective_policy_definition") or {}
    out = []
    if found.get("type") != wanted.get("x-queue-type"):
        out.append(f"{name} is {found.get('type')}, recur declares {wanted.get('x-queue-type')}")
    want_limit = wanted.get("x-delivery-limit")
    have_limit = args.get("x-delivery-limit", policy.get("delivery-limit"))
    if want_limit is not None and have_limit != want_limit:
        out.append(f"{name} has delivery limit {have_limit if have_limit is not None else 'none'}"
                   f", recur declares {want_limit}")
    for key in sorted(set(wanted) | (set(args) & CHECKED_ARGUMENTS)):
        if key not in ("x-queue-type", "x-delivery-limit") and args.get(key) != wanted.get(key):
            out.append(f"{name} has {key} {args.get(key, 'none')!r}, recur declares "
                       f"{wanted.get(key, 'none')!r}")
    for flag, recurs in (("durable", True), ("auto_delete", False), ("exclusive", False)):
        if found.get(flag, recurs) != recurs:
            out.append(f"{name} is {'' if found.get(flag) else 'not '}{flag.replace('_', '-')}"
                       f", recur declares it {'' if recurs else 'not '}{flag.replace('_', '-')}")
    return out


#: Queue arguments recur never declares that the broker compares on a redeclare (one set by
#: someone else makes it refuse every declare of recur's: 406 PRECONDITION_FAILED).
CHECKED_ARGUMENTS = frozenset({
    "x-max-length", "x-max-length-bytes", "x-message-ttl", "x-expires", "x-overflow",
    "x-max-priority", "x-single-active-consumer", "x-queue-mode", "x-dead-letter-exchange",
    "x-dead-letter-routing-key", "x-delivery-limit", "x-max-in-memory-length",
    "x-max-in-memory-bytes"})


def management_get(api: str, path: str) -> Any:
    """GET ``api + path`` as JSON with the URL's credentials; ManagementUnreachable else."""
    parts = urlsplit(api)
    netloc = parts.netloc.rpartition("@")[2] or "localhost"  # credentials go in a header
    request = urllib.request.Request(urlunsplit(
        (parts.scheme, netloc, parts.path.rstrip("/") + "/" + path, "", "")))
    if parts.username:
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(token.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read(4_000_000))
    except urllib.error.HTTPError as exc:
        raise ManagementUnreachable(f"HTTP {exc.code}") from exc
    except (OSError, ValueError) as exc:
        raise ManagementUnreachable(said(exc)) from exc


def by_redeclaring(conn: Connection, queues: dict[str, Queue]) -> tuple[list[str], list[str]]:
    """(problems, missing queues): each existing queue declared again with recur's arguments.

    A passive declare first, so a missing queue is never created; then the real
    declare, which the broker refuses (406 PRECONDITION_FAILED) when an argument
    differs. Each refusal closes its channel, so every queue gets fresh ones.
    """
    problems, missing = [], []
    for name, queue in queues.items():
        with conn.channel() as channel:
            try:
                channel.queue_declare(queue=name, passive=True)
            except NotFound:
                missing.append(name)
                continue
            except ResourceLocked as exc:  # 405: an exclusive queue of another connection
                problems.append(str(exc.reply_text).split(" - ", 1)[-1])
                continue
        with conn.channel() as channel:
            try:
                channel.queue_declare(queue=name, durable=True, auto_delete=False,
                                      arguments=queue.queue_arguments)
            except PreconditionFailed as exc:
                problems.append(str(exc.reply_text).split(" - ", 1)[-1])
    return problems, missing
