"""The ``Settings`` dataclass: every setting, its type, default and one-line reason, in
the order ``recur settings`` prints them. Reading them from ``RECUR_*`` variables is
:mod:`config.settings`; their ranges are :mod:`config.settings_bounds`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from config.bucketfile import load_table
from config.buckets import BUILTIN, DEFAULT_KINDS, BucketTable
from config.settings_enqueue import EnqueueSettings
from config.settings_fair import FairShareSettings
from config.settings_idle import IdleSettings
from config.settings_tracing import TracingSettings


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass(frozen=True)
class Settings(TracingSettings, FairShareSettings, EnqueueSettings, IdleSettings):
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
    flower_port: int = field(default=5555, metadata=_doc("Port Flower listens on (its usual one)."))
    flower_broker_api: str = field(
        default="",
        metadata=_doc("RabbitMQ management API Flower reads queue depths from "
                      "(http://user:password@host:15672/api/); empty: the broker URL's host "
                      "and credentials on the management plugin's port, 15672."))
    destinations: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({}),
        metadata=_doc("Resequencer destinations as 'name:url,name:url' (HTTP POST targets; a "
                      "name of letters, digits and '_.-', at most 64), each optionally with "
                      "its rate, 'name:url rate=10/s burst=5' (docs/resequencer.md); "
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
        default=5.0, metadata=_doc("Longest wait between two tries of a send."))
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
    log_level: str = field(default="INFO", metadata=_doc("Log level of recur's processes."))
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
    scheduler_interval: float = field(default=0.2, metadata=_doc(
        "Seconds the scheduler sleeps when a pass moved nothing (idle: doubling up to "
        "RECUR_SCHEDULER_IDLE_INTERVAL); workers drain less than a low watermark meanwhile."))
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
