"""One typed settings object, read from ``RECUR_*`` environment variables.

Every field has a default that works on one machine with the local services and
a one-line reason. A ``RECUR_`` variable that names no field, or a value that
does not parse, is a :class:`ConfigError` naming the variable: a misspelt
setting must never be silently ignored.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from types import MappingProxyType
from typing import Any

from config.bucketfile import NAME, load_table
from config.buckets import BUILTIN, DEFAULT_KINDS, BucketTable
from config.checks import check_bind, contradictions, is_secret, placeholder_problem
from config.destination_policy import parse_policies, parse_statuses
from config.errors import BucketsFileError, ConfigError
from config.keys import check_prefix
from config.redact import MASK, masked
from config.signing import check_key

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
    result_expires: float = field(
        default=86400.0,
        metadata=_doc("Seconds Redis keeps a failed task's error (recur dead list shows it "
                      "beside the dead letter, which stays in RabbitMQ): a failure flood costs "
                      "Redis a day of errors, not a week."))
    signing_key: str = field(
        default="",
        metadata=_doc("HMAC key signing the control headers (recur_dispatch, recur_lock_seq, "
                      "recur_lock_since): workers dead-letter a message whose headers are "
                      "unsigned or forged. Empty: off; else 16 characters or more, the same "
                      "on every process."))
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
    max_job_key_bytes: int = field(
        default=512,
        metadata=_doc("Longest job key (UTF-8 bytes) apply_async accepts for the due-jobs "
                      "store: well under PostgreSQL's index entry limit and a broker frame "
                      "(at most 1800)."))
    max_call_bytes: int = field(
        default=65536,
        metadata=_doc("Largest encoded call (a stored row's args and kwargs as JSON) apply_async "
                      "accepts for the due-jobs store, so its message always fits one broker "
                      "frame (at most 120000); the scheduler sets aside a stored row over it."))
    unknown_bucket_grace: float = field(
        default=10.0,
        metadata=_doc("Seconds a due row whose bucket is not in the scheduler's bucket table "
                      "waits (a scheduler with a newer bucket file may take it) before it is "
                      "set aside (recur dead list); raise it for a slow rolling deploy that "
                      "adds a bucket."))
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
        metadata=_doc("Resequencer destinations as 'name:url,name:url' (HTTP POST targets; a "
                      "name of letters, digits and '_.-', at most 64); "
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
    reseq_max_entry_bytes: int = field(
        default=16384,
        metadata=_doc("Largest processed result (as JSON) one resequencer entry may hold; a "
                      "bigger one is refused by name (its message skipped and dead-lettered), "
                      "so RECUR_RESEQ_CAPACITY times this bounds a destination in Redis."))
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
    destination_outage_statuses: tuple[int, ...] = field(
        default=(),
        metadata=_doc("HTTP statuses that also say a destination is not ready ('409,423', "
                      "'4xx'), besides 401, 403, 404, 410 and every 3xx: its sender keeps its "
                      "place and retries instead of setting the message aside."))
    destination_policies: Mapping[str, Mapping[int, str]] = field(
        default_factory=lambda: MappingProxyType({}),
        metadata=_doc("A destination's own statuses, 'billing:outage=409+423;dead=404,crm:"
                      "outage=4xx': outage waits and retries, dead sets that message aside "
                      "replayably (docs/resequencer.md)."))
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
    lock_max_parked: int = field(
        default=10_000,
        metadata=_doc("Jobs of one user waiting for their turn (numbered, not finished) before "
                      "apply_async refuses more (LockLineFull); a job already sent that finds "
                      "this many parked waits in the broker, not in Redis (docs/distlock.md)."))
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
    min_every: float = field(
        default=0.1,
        metadata=_doc("Shortest payload 'every' a recurring message may ask for (apply_async "
                      "refuses shorter; a stored row asking for less runs this often): "
                      "every=0 would run a job back to back for ever."))
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
    metrics_bind: str = field(
        default="127.0.0.1",
        metadata=_doc("Address the /metrics servers listen on: this host only by default; "
                      "0.0.0.0 (every interface) when a scraper elsewhere needs it, with "
                      "RECUR_METRICS_USER/PASSWORD set."))
    metrics_user: str = field(
        default="",
        metadata=_doc("Basic-auth user every /metrics asks for (with RECUR_METRICS_PASSWORD; "
                      "both or neither); empty: no auth, for a loopback-only bind."))
    metrics_password: str = field(
        default="",
        metadata=_doc("Basic-auth password of /metrics, see RECUR_METRICS_USER."))
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
    strict: bool = field(
        default=False,
        metadata=_doc("1: refuse to start (exit code 2) when Redis would lose locks or parked "
                      "jobs (no maxmemory-policy noeviction, no appendonly yes); 0: a WARNING "
                      "line at start. recur doctor fails on it too (docs/security.md)."))

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
        if not sep or not NAME.fullmatch(kind.strip()) or not bucket.strip():
            raise ValueError(f"{item!r:.80} is not 'kind:bucket' (a kind is letters, digits, "
                             "'_', '-' or '.')")
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


#: A destination's name: part of its Redis keys (a hash tag) and of its dead-letter queue.
DESTINATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _parse_destinations(raw: str) -> Mapping[str, str]:
    destinations = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        name, sep, url = (text.strip() for text in item.partition(":"))
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"{item!r} is not 'name:http(s)://...'")
        if not DESTINATION_NAME.fullmatch(name):
            raise ValueError(f"destination name {name[:70]!r} may hold only letters, digits and "
                             "'_.-' (at most 64; it names Redis keys and a dead-letter queue)")
        destinations[name] = url
    return MappingProxyType(destinations)


def _parse_imports(raw: str) -> tuple[str, ...]:
    names = tuple(filter(None, (part.strip() for part in raw.split(","))))
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"{name!r} is not a module name like 'myapp.tasks'")
    return names


def _parse_bool(raw: str) -> bool:
    """A switch: 1/true/yes or 0/false/no (any case); anything else is a mistake, not off."""
    word = raw.strip().lower()
    if word in ("1", "true", "yes"):
        return True
    if word in ("0", "false", "no"):
        return False
    raise ValueError("must be 1, 0, true, false, yes or no")


def _parse(name: str, kind: Any, raw: str, table: BucketTable) -> Any:
    if name == "kinds":
        return _parse_kinds(raw, table)
    if name == "imports":
        return _parse_imports(raw)
    if name == "destinations":
        return _parse_destinations(raw)
    if name == "reseq_steps":
        return _parse_steps(raw)
    if name == "destination_outage_statuses":
        return parse_statuses(raw)
    if name == "destination_policies":
        return parse_policies(raw)
    if kind in (bool, "bool"):
        return _parse_bool(raw)
    if kind in (int, "int"):
        return int(raw)
    if kind in (float, "float"):
        return float(raw)
    return raw


#: Bounds of numeric settings, and the choices of enumerated ones. Every number is
#: finite, at least its lower bound (the set it is in; none: >= 0) and at most its
#: AT_MOST entry (none: DEFAULT_AT_MOST); `recur settings` prints each range.
POSITIVE = frozenset({
    "schedule_threshold", "lease_seconds", "scheduler_interval", "low_watermark",
    "high_watermark", "drain_batch", "drain_threads", "lock_ttl", "lock_wait_budget",
    "lock_gap_timeout", "lock_reap_interval", "reseq_gap_timeout", "reseq_capacity",
    "send_timeout", "send_backoff", "send_backoff_max", "metrics_refresh",
    "metrics_top_destinations", "status_interval", "sender_lease", "outage_budget",
    "min_every", "result_expires"})
NON_NEGATIVE = frozenset({"work_scale", "completion_log_maxlen", "send_retries",
                          "lock_chain_seconds", "metrics_port", "pull_forward_min_seconds",
                          "unknown_bucket_grace"})
FRACTIONS = frozenset({"pull_forward_fraction"})
AT_LEAST_ONE = frozenset({"lock_max_parked", "reseq_max_entry_bytes",
                          "max_payload_bytes", "max_deliveries", "max_job_key_bytes",
                          "max_call_bytes", "flower_port"})
HOUR, DAY = 3600, 86400
#: Upper bounds: above one is a typo or a unit mistake (ms for s), not a deployment.
AT_MOST: dict[str, float] = {
    # a job key PostgreSQL can index beside a user id; a call that fits one frame
    "max_job_key_bytes": 1800, "max_call_bytes": 120_000,
    "max_payload_bytes": 1 << 20,  # a message carries references to data, not the data
    "max_deliveries": 100, "send_retries": 100,  # more is a retry loop, not resilience
    "work_scale": 1000, "completion_log_maxlen": 10_000_000, "reseq_capacity": 10_000_000,
    "flower_port": 65535, "metrics_port": 65535,  # TCP ports
    "low_watermark": 1_000_000_000, "high_watermark": 1_000_000_000,  # a benchmark: never
    "drain_batch": 100_000, "drain_threads": 64, "metrics_top_destinations": 1000,
    "pull_forward_fraction": 1,
    # waits and timeouts: an hour for a network call or a poll, a day or a week for a budget
    "send_timeout": 300, "send_backoff": HOUR, "send_backoff_max": HOUR,
    "sender_lease": HOUR, "lock_reap_interval": HOUR, "lock_chain_seconds": HOUR,
    "outage_budget": HOUR, "metrics_refresh": HOUR, "scheduler_interval": 60,
    "reseq_gap_timeout": DAY, "lock_ttl": DAY, "schedule_threshold": DAY,
    "pull_forward_min_seconds": DAY, "status_interval": DAY, "min_every": DAY,
    "unknown_bucket_grace": DAY, "lease_seconds": 7 * DAY, "lock_gap_timeout": 7 * DAY,
    "lock_wait_budget": 30 * DAY,
    # a user's line and one resequencer result: Redis memory, not a throughput knob
    "lock_max_parked": 10_000_000, "reseq_max_entry_bytes": 1 << 23, "result_expires": 30 * DAY,
}
#: Upper bound of a numeric setting without its own AT_MOST entry: finite, at least.
DEFAULT_AT_MOST = 1_000_000_000
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
        _check_text(name, value)
    _check_database_url(values.get("database_url", "sqlite://"))
    for name in filter(None, values.get("pull_forward", "").split(",")):
        if name.strip() not in table.names:
            raise ValueError(f"pull_forward names unknown bucket {name.strip()!r} "
                             f"(buckets: {', '.join(table.names)})")


def number_bounds(name: str) -> tuple[float, float, bool]:
    """(lowest, highest, whether the lowest itself is refused) of numeric setting ``name``."""
    high = 1 if name in FRACTIONS else AT_MOST.get(name, DEFAULT_AT_MOST)
    if name in POSITIVE:
        return 0, high, True
    return (1 if name in AT_LEAST_ONE else 0), high, False


def bounds_text(name: str) -> str:
    """A numeric setting's documented range, as `recur settings` prints it."""
    low, high, excluded = number_bounds(name)
    return f"above {low}, at most {_num(high)}" if excluded else f"{low} to {_num(high)}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _check_number(name: str, value: float) -> None:
    low, high, excluded = number_bounds(name)
    if (low < value if excluded else low <= value) and value <= high:  # nan fails both
        return
    if isinstance(value, float) and not math.isfinite(value):
        problem = "must be a finite number"
    elif value > high:
        problem = f"must be at most {_num(high)}"
    elif excluded:
        problem = "must be positive"
    else:
        problem = "must not be negative" if low == 0 else f"must be at least {low}"
    if name in FRACTIONS:
        problem = "must be between 0 and 1"
    raise ValueError(f"{name} {problem} ({bounds_text(name)}), got {value!r}")


def _check_bounds(name: str, value: Any) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(name, value)
    if name in CHOICES and value not in CHOICES[name]:
        raise ValueError(f"{name} must be {' or '.join(map(repr, CHOICES[name]))}")


def _check_text(name: str, value: Any) -> None:
    """The key prefix, the metrics address, and no placeholder password anywhere."""
    if name == "key_prefix":
        check_prefix(value)
    if name == "metrics_bind":
        check_bind(value)
    if name == "signing_key":
        check_key(value)
    problem = placeholder_problem(name, value)
    if problem:
        raise ValueError(problem)


def _check_database_url(url: str) -> None:
    """Refuse URLs SQLAlchemy would fail on late and obscurely, with the fix."""
    scheme = url.partition("://")[0]
    if scheme in ("postgres", "postgresql", "postgresql+psycopg2"):
        fixed = masked("postgresql+psycopg://" + url.partition("://")[2], stop_at_space=False)
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
    bad: list[str] = []
    try:
        table = load_table(env.get(PREFIX + "BUCKETS_FILE", ""))
    except BucketsFileError as exc:
        bad.append(str(exc))
        table = BUILTIN
    values: dict[str, Any] = {"kinds": table.kinds, "pull_forward": ",".join(table.names)}
    bad_names = {"buckets_file"} if bad else set()
    for var, raw in sorted(env.items()):
        if var.startswith(PREFIX) and (line := _read(var, raw, table, values)):
            bad.append(line)
            bad_names.add(var[len(PREFIX):].lower())
    unknown = set(values.get("reseq_steps", {})) - set(values.get("destinations", {}))
    if unknown:
        bad.append(f"RECUR_RESEQ_STEPS names destination(s) not in RECUR_DESTINATIONS: "
                   f"{', '.join(sorted(unknown))}")
    unknown = set(values.get("destination_policies", {})) - set(values.get("destinations", {}))
    if unknown:
        bad.append(f"RECUR_DESTINATION_POLICIES names destination(s) not in "
                   f"RECUR_DESTINATIONS: {', '.join(sorted(unknown))}")
    bad += contradictions({**defaults(), **values}, table, bad_names)
    return values, [masked(line) for line in bad]


#: Every setting's dataclass field, by name.
_FIELDS = {f.name: f for f in fields(Settings)}


def _read(var: str, raw: str, table: BucketTable, values: dict[str, Any]) -> str | None:
    """Parse and check one variable into ``values``; the line saying why not, if not."""
    name = var[len(PREFIX):].lower()
    if name in REMOVED:
        return f"{var}: {REMOVED[name]}"
    if name not in _FIELDS:
        return f"{var}: unknown setting (see `recur settings` for the known ones)"
    try:
        value = _parse(name, _FIELDS[name].type, raw, table)
        _check({name: value}, table)
    except ValueError as exc:
        problem = _plain(exc)
        if _numeric(_FIELDS[name].type) and bounds_text(name) not in problem:
            problem += f"; {name} is {bounds_text(name)}"
        return f"{var}={shown(name, raw)!r:.100}: {problem}"
    values[name] = value
    return None


def _numeric(kind: Any) -> bool:
    return kind in (int, float, "int", "float")


def defaults() -> dict[str, Any]:
    """Every setting's default value, by field name."""
    return {f.name: f.default_factory() if callable(f.default_factory) else f.default
            for f in fields(Settings)}


def shown(name: str, raw: str) -> str:
    """A setting's value as it may be printed or logged: a secret as ***, URLs masked."""
    if is_secret(name):
        return MASK if raw else raw
    return masked(raw, stop_at_space=False)


def _plain(exc: ValueError) -> str:
    """int()/float()'s message, said for a setting."""
    text = str(exc)
    if text.startswith(("invalid literal for int()", "could not convert string to float")):
        said = text.partition(":")[0]  # not the value after it: it may hold a password
        return f"{'not a number' if 'float' in text else 'not a whole number'} ({said})"
    if text.startswith("Exceeds the limit"):
        return "not a whole number of a sane size"
    return text


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
    """(variable, default, reason) for every setting: the documentation table. A numeric
    setting's reason ends with its range; a secret default is shown masked."""
    rows = []
    for f in fields(Settings):
        default = f.default_factory() if callable(f.default_factory) else f.default
        if isinstance(default, Mapping):
            text = ",".join(f"{k}:{v}" for k, v in default.items())
        else:
            text = ",".join(default) if isinstance(default, tuple) else str(default)
        doc = f.metadata["doc"]
        if _numeric(f.type):
            doc = f"{doc} Bounds: {bounds_text(f.name)}."
        rows.append((PREFIX + f.name.upper(), shown(f.name, text), doc))
    return rows
