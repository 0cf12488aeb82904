"""One typed settings object, read from ``RECUR_*`` environment variables.

Every field has a default that works on one machine with the local services and
a one-line reason. A ``RECUR_`` variable that names no field, or a value that
does not parse, is a :class:`ConfigError` naming the variable: a misspelt
setting must never be silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from types import MappingProxyType
from typing import Any

from config.bucketfile import load_table
from config.buckets import BUILTIN, DEFAULT_KINDS, BucketTable
from config.errors import BucketsFileError, ConfigError

PREFIX = "RECUR_"


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class Settings:
    """recur's configuration. Build it with :func:`load_settings`."""

    broker_url: str = field(
        default="amqp://guest:guest@127.0.0.1:5672//",
        metadata=_doc("RabbitMQ; the local broker with its stock credentials."))
    redis_url: str = field(
        default="redis://127.0.0.1:6379/0",
        metadata=_doc("Redis for locks, resequencer state and task results."))
    database_url: str = field(
        default="sqlite:///recur.sqlite3",
        metadata=_doc("Due-jobs store; SQLite is the embedded one-machine default, "
                      "use postgresql+psycopg://... in production."))
    result_backend: str = field(
        default="",
        metadata=_doc("Celery result backend; empty means redis_url (chords need Redis)."))
    key_prefix: str = field(
        default="recur",
        metadata=_doc("Prefix of every Redis key, so several deployments or test runs "
                      "can share one Redis."))
    max_payload_bytes: int = field(
        default=1024,
        metadata=_doc("Largest encoded payload accepted; the population's messages "
                      "are under 100 bytes, so 1 KiB catches mistakes, not data."))
    max_deliveries: int = field(
        default=5,
        metadata=_doc("Deliveries of one message before it is dead-lettered; enough "
                      "to survive a few worker crashes, few enough to stop a poison loop."))
    queue_type: str = field(
        default="quorum",
        metadata=_doc("'quorum' (replicated, has delivery limits) or 'classic'."))
    work_scale: float = field(
        default=1.0,
        metadata=_doc("Multiplier of process_message's simulated work; demos and "
                      "tests shrink it."))
    completion_log_maxlen: int = field(
        default=100_000,
        metadata=_doc("Entries kept in the Redis stream of completed tasks (bounded so "
                      "it never grows with the population); 0 turns it off."))
    buckets_file: str = field(
        default="",
        metadata=_doc("TOML file with your own bucket table and kinds (docs/tasks.md); "
                      "empty means the built-in table of config/buckets.py."))
    imports: tuple[str, ...] = field(
        default=(),
        metadata=_doc("Your task modules, 'myapp.tasks,myapp.more': imported by every "
                      "recur process and by celery -A tasks, so your tasks are registered."))
    kinds: Mapping[str, str] = field(
        default_factory=lambda: DEFAULT_KINDS,
        metadata=_doc("Extra message kinds as 'kind:bucket,kind:bucket'; they add to "
                      "or override the bucket table's kinds."))
    flower_user: str = field(
        default="",
        metadata=_doc("Flower basic-auth user; no default: Flower refuses to start "
                      "without credentials."))
    flower_password: str = field(
        default="",
        metadata=_doc("Flower basic-auth password; no default, see flower_user."))
    flower_port: int = field(
        default=5555,
        metadata=_doc("Port Flower listens on (its usual one)."))
    flower_broker_api: str = field(
        default="",
        metadata=_doc("RabbitMQ management API Flower reads queue depths from "
                      "(http://user:password@host:15672/api/); empty: the broker URL's host "
                      "and credentials on the management plugin's port, 15672."))
    destinations: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}),
        metadata=_doc("Resequencer destinations as 'name:url,name:url' (HTTP POST targets); "
                      "none by default: submit refuses a destination not listed here."))
    reseq_gap_timeout: float = field(
        default=60.0,
        metadata=_doc("Seconds after its arrival a message's sequence number may stay "
                      "unprocessed before it is skipped, so a lost message never blocks "
                      "its destination forever."))
    reseq_capacity: int = field(
        default=10_000,
        metadata=_doc("Messages per destination accepted but not yet sent; intake refuses "
                      "more, so a stuck destination cannot grow Redis without bound."))
    reseq_steps: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}),
        metadata=_doc("Each destination's processing step, 'destination:task.name,...': a "
                      "task of your modules (RECUR_IMPORTS); submit(step=...) overrides it, "
                      "none means the bucket's simulated work (docs/resequencer.md)."))
    send_timeout: float = field(
        default=5.0,
        metadata=_doc("Seconds one outbound HTTP POST may take; a receiver slower than "
                      "this counts as unavailable and is retried."))
    send_retries: int = field(
        default=5,
        metadata=_doc("Retries of a failed send (5xx, connection error) before the sender "
                      "backs off and tries the same message again later."))
    send_backoff: float = field(
        default=0.2,
        metadata=_doc("Seconds before the first retry of a send; doubles each retry."))
    send_backoff_max: float = field(
        default=5.0,
        metadata=_doc("Longest wait between two tries of a send."))
    sender_lease: float = field(
        default=3.0,
        metadata=_doc("Seconds a destination's sender lease lasts; a heartbeat renews it "
                      "every third of that while the sender runs, so a killed sender's "
                      "destinations resume after at most this long."))
    log_level: str = field(
        default="INFO",
        metadata=_doc("Log level of recur's processes."))
    lock_ttl: float = field(
        default=30.0,
        metadata=_doc("Seconds a per-user lock lives without a refresh: a killed worker's "
                      "user is free again after this; the watchdog refreshes every third."))
    lock_wait_budget: float = field(
        default=3600.0,
        metadata=_doc("Seconds a locked job may wait for its user (from submission) before "
                      "it is dead-lettered instead of run."))
    lock_gap_timeout: float = field(
        default=300.0,
        metadata=_doc("Seconds a user's parked jobs wait for an earlier job that never "
                      "arrives (dead-lettered, lost) before they go ahead without it."))
    lock_reap_interval: float = field(
        default=0.5,
        metadata=_doc("Seconds between a worker's checks for users whose lock expired "
                      "with jobs parked behind it (one query, not one per job)."))
    lock_when_redis_down: str = field(
        default="retry",
        metadata=_doc("'retry' (fail closed: never run a locked task unlocked) or "
                      "'run-unlocked' (explicit opt-out)."))
    lock_chain_seconds: float = field(
        default=15.0,
        metadata=_doc("Seconds (from its delivery) a worker process goes on running its "
                      "user's parked jobs itself after a locked job, whatever the queue "
                      "depth, at most half the bucket's soft time limit; then the next job "
                      "is published. 0: always through the broker."))
    schedule_threshold: float = field(
        default=5.0,
        metadata=_doc("Delays (countdown/eta) at least this many seconds go to the due-jobs "
                      "store; shorter ones are published directly."))
    lease_seconds: float = field(
        default=1800.0,
        metadata=_doc("How long a dispatched job may stay unfinished before it is dispatched "
                      "again: above the long bucket's time limit plus queueing. Only a copy "
                      "lost without trace waits for it; dead-lettered copies and settle "
                      "writes lost in a crash come back in seconds (docs/scheduler.md)."))
    outage_budget: float = field(
        default=20.0,
        metadata=_doc("Seconds a task waits in place (retrying with backoff) for the due-jobs "
                      "store before it hands its message back to the queue: an outage of "
                      "seconds costs seconds, not a delivery (capped at half the bucket's "
                      "soft time limit)."))
    low_watermark: int = field(
        default=1000,
        metadata=_doc("Scheduler refills a bucket queue when fewer messages than this wait "
                      "in it; also the idle pull-forward trigger."))
    high_watermark: int = field(
        default=3000,
        metadata=_doc("Schedulers never fill a bucket queue beyond this many ready messages "
                      "(plus at most one batch, however many schedulers run), so RabbitMQ "
                      "holds thousands, not the population."))
    drain_batch: int = field(
        default=1000,
        metadata=_doc("Rows claimed, published and confirmed together; large enough to "
                      "amortise one confirm round trip."))
    drain_threads: int = field(
        default=2,
        metadata=_doc("Batches of one bucket a scheduler has in flight at once, each on "
                      "its own database and broker connection: one batch's confirm wait "
                      "overlaps the next one's claim and encoding (PostgreSQL; SQLite "
                      "uses 1)."))
    pull_forward: str = field(
        default=",".join(BUILTIN.names),
        metadata=_doc("Buckets whose idle workers get the earliest future jobs early "
                      "(comma list; empty turns pull-forward off; unset: every bucket "
                      "of the table)."))
    pull_forward_fraction: float = field(
        default=0.5,
        metadata=_doc("Pull-forward floor: a job is never pulled forward sooner than this "
                      "fraction of the delay its last run asked for, counted from the later of "
                      "that run and its due time (0..1; 1: a job that ran is never early)."))
    pull_forward_min_seconds: float = field(
        default=1.0,
        metadata=_doc("Pull-forward floor in seconds: whatever its delay, a job is not pulled "
                      "forward within this long of its last run."))
    scheduler_interval: float = field(
        default=0.2,
        metadata=_doc("Seconds the scheduler sleeps when a pass moved nothing; short "
                      "enough that workers drain less than the low watermark meanwhile."))
    metrics_port: int = field(
        default=0,
        metadata=_doc("Port of this process's Prometheus /metrics (worker, scheduler, "
                      "exporter, ...); 0 turns it off. Give each process on a host its own."))
    metrics_refresh: float = field(
        default=15.0,
        metadata=_doc("Seconds between the exporter's background reads of the store, queues "
                      "and Redis; a scrape only reads the last figures, so it stays cheap at "
                      "tens of millions of rows (docs/operations.md)."))
    metrics_top_destinations: int = field(
        default=10,
        metadata=_doc("Resequencer destinations exported by name (the busiest); the rest are "
                      "summed under destination=\"_other\", so label cardinality stays bounded."))
    status_interval: float = field(
        default=60.0,
        metadata=_doc("Seconds between the scheduler's INFO summary lines (dispatched, pulled "
                      "forward, recovered, lag); per-pass lines are DEBUG."))

    @property
    def buckets(self) -> BucketTable:
        """The bucket table in use (RECUR_BUCKETS_FILE, else the built-in one)."""
        return load_table(self.buckets_file)

    @property
    def results_url(self) -> str:
        """The Celery result backend URL actually used."""
        return self.result_backend or self.redis_url


def _parse_kinds(raw: str, table: BucketTable) -> Mapping[str, str]:
    kinds = dict(table.kinds)
    for item in filter(None, (part.strip() for part in raw.split(","))):
        kind, sep, bucket = item.partition(":")
        if not sep or not kind.strip() or not bucket.strip():
            raise ValueError(f"{item!r} is not 'kind:bucket'")
        if bucket.strip() not in table.names:
            raise ValueError(f"kind {kind.strip()!r} maps to unknown bucket {bucket.strip()!r}"
                             f" (buckets: {', '.join(table.names)})")
        kinds[kind.strip()] = bucket.strip()
    return MappingProxyType(kinds)


def _parse_steps(raw: str) -> Mapping[str, str]:
    steps = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        destination, sep, task = (text.strip() for text in item.partition(":"))
        if not sep or not destination or not task:
            raise ValueError(f"{item!r} is not 'destination:task.name'")
        steps[destination] = task
    return MappingProxyType(steps)


def _parse_destinations(raw: str) -> Mapping[str, str]:
    destinations = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, url = (text.strip() for text in item.partition(":"))
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"{item!r} is not 'name:http(s)://...'")
        destinations[name] = url
    return MappingProxyType(destinations)


def _parse_imports(raw: str) -> tuple[str, ...]:
    names = tuple(filter(None, (part.strip() for part in raw.split(","))))
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"{name!r} is not a module name like 'myapp.tasks'")
    return names


def _parse(name: str, kind: Any, raw: str, table: BucketTable) -> Any:
    if name == "kinds":
        return _parse_kinds(raw, table)
    if name == "imports":
        return _parse_imports(raw)
    if name == "destinations":
        return _parse_destinations(raw)
    if name == "reseq_steps":
        return _parse_steps(raw)
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    return raw


#: Bounds of numeric settings, and the choices of enumerated ones.
POSITIVE = frozenset({
    "schedule_threshold", "lease_seconds", "scheduler_interval", "low_watermark",
    "high_watermark", "drain_batch", "drain_threads", "lock_ttl", "lock_wait_budget",
    "lock_gap_timeout", "lock_reap_interval", "reseq_gap_timeout", "reseq_capacity",
    "send_timeout", "send_backoff", "send_backoff_max", "metrics_refresh",
    "metrics_top_destinations", "status_interval", "sender_lease", "outage_budget"})
NON_NEGATIVE = frozenset({"work_scale", "completion_log_maxlen", "send_retries",
                          "lock_chain_seconds", "metrics_port", "pull_forward_min_seconds"})
FRACTIONS = frozenset({"pull_forward_fraction"})
AT_LEAST_ONE = frozenset({"max_payload_bytes", "max_deliveries"})
CHOICES = {"queue_type": ("quorum", "classic"), "lock_when_redis_down": ("retry", "run-unlocked")}


#: Settings that are gone, and what replaces them.
REMOVED = {
    "reseq_processor": "removed: register the processing step as a task in your modules "
                       "(RECUR_IMPORTS) and name it per destination in RECUR_RESEQ_STEPS "
                       "or per call with submit(..., step=...) (docs/resequencer.md)",
}


def _check(values: dict[str, Any], table: BucketTable) -> None:
    """Refuse a value out of its bounds (one setting at a time, as it is read)."""
    for name, value in values.items():
        _check_bounds(name, value)
    if values.get("metrics_port", 0) > 65535:
        raise ValueError("metrics_port must be a TCP port (0 turns metrics off)")
    _check_database_url(values.get("database_url", "sqlite://"))
    for name in filter(None, values.get("pull_forward", "").split(",")):
        if name.strip() not in table.names:
            raise ValueError(f"pull_forward names unknown bucket {name.strip()!r} "
                             f"(buckets: {', '.join(table.names)})")


def _check_bounds(name: str, value: Any) -> None:
    if name in POSITIVE and value <= 0:
        raise ValueError(f"{name} must be positive")
    if name in NON_NEGATIVE and value < 0:
        raise ValueError(f"{name} must not be negative")
    if name in FRACTIONS and not 0 <= value <= 1:
        raise ValueError(f"{name} must be between 0 and 1")
    if name in AT_LEAST_ONE and value < 1:
        raise ValueError(f"{name} must be at least 1")
    if name in CHOICES and value not in CHOICES[name]:
        raise ValueError(f"{name} must be {' or '.join(map(repr, CHOICES[name]))}")


def _check_database_url(url: str) -> None:
    """Refuse URLs SQLAlchemy would fail on late and obscurely, with the fix."""
    scheme = url.partition("://")[0]
    if scheme in ("postgres", "postgresql", "postgresql+psycopg2"):
        fixed = _masked("postgresql+psycopg://" + url.partition("://")[2])
        raise ValueError(f"use {fixed} (recur talks to PostgreSQL through psycopg 3; "
                         f"SQLAlchemy has no driver for {scheme}://)")
    if not url.startswith(("sqlite:", "postgresql+psycopg:")):
        raise ValueError("must be sqlite:///<file> or postgresql+psycopg://user@host/db")


def problems(environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Parse every ``RECUR_`` variable: (values that parsed, one line per bad variable).

    All of them at once, so ``recur settings`` can list every mistake in one go.
    The bucket table comes first (RECUR_BUCKETS_FILE): kinds and pull-forward
    are checked against it, and they default to its own.
    """
    env = os.environ if environ is None else environ
    known = {f.name: f for f in fields(Settings)}
    bad: list[str] = []
    try:
        table = load_table(env.get(PREFIX + "BUCKETS_FILE", ""))
    except BucketsFileError as exc:
        bad.append(str(exc))
        table = BUILTIN
    values: dict[str, Any] = {"kinds": table.kinds, "pull_forward": ",".join(table.names)}
    for var, raw in sorted(env.items()):
        if not var.startswith(PREFIX):
            continue
        name = var[len(PREFIX):].lower()
        if name in REMOVED:
            bad.append(f"{var}: {REMOVED[name]}")
        elif name not in known:
            bad.append(f"{var}: unknown setting (see `recur settings` for the known ones)")
        else:
            try:
                value = _parse(name, known[name].type, raw, table)
                _check({name: value}, table)
            except ValueError as exc:
                bad.append(f"{var}={_masked(raw)!r}: {_plain(exc)}")
                continue
            values[name] = value
    unknown = set(values.get("reseq_steps", {})) - set(values.get("destinations", {}))
    if unknown:
        bad.append(f"RECUR_RESEQ_STEPS names destination(s) not in RECUR_DESTINATIONS: "
                   f"{', '.join(sorted(unknown))}")
    return values, bad


def _plain(exc: ValueError) -> str:
    """int()/float()'s message, said for a setting."""
    text = str(exc)
    if text.startswith(("invalid literal for int()", "could not convert string to float")):
        return f"{'not a number' if 'float' in text else 'not a whole number'} ({text})"
    return text


def _masked(raw: str) -> str:
    """A URL's password replaced by ***, so an error line can be shown and logged."""
    head, sep, rest = raw.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if sep and at and ":" in userinfo:
        return f"{head}://{userinfo.partition(':')[0]}:***@{host}"
    return raw


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``environ`` (default: the process environment)."""
    values, bad = problems(environ)
    if bad:
        raise ConfigError("; ".join(bad) if len(bad) == 1 else
                          f"{len(bad)} bad settings: " + "; ".join(bad))
    return Settings(**values)


@cache
def settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return load_settings()


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, reason) for every setting: the documentation table."""
    rows = []
    for f in fields(Settings):
        default = f.default_factory() if callable(f.default_factory) else f.default
        if isinstance(default, Mapping):
            shown = ",".join(f"{k}:{v}" for k, v in default.items())
        else:
            shown = ",".join(default) if isinstance(default, tuple) else str(default)
        rows.append((PREFIX + f.name.upper(), shown, f.metadata["doc"]))
    return rows
