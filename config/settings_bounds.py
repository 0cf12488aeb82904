"""What a setting's value may be: every number's range, the enumerated choices, and
the checks of text settings (key prefix, metrics address, signing key, database URL,
no placeholder password), applied to each value as it is read."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from config.buckets import BucketTable
from config.checks import check_bind, placeholder_problem
from config.keys import check_prefix
from config.redact import masked
from config.signing import check_key

#: Bounds of numeric settings, and the choices of enumerated ones. Every number is
#: finite, at least its lower bound (the set it is in; none: >= 0) and at most its
#: AT_MOST entry (none: DEFAULT_AT_MOST); `recur settings` prints each range.
POSITIVE = frozenset({
    "schedule_threshold", "lease_seconds", "scheduler_interval", "low_watermark",
    "scheduler_idle_interval",
    "high_watermark", "drain_batch", "drain_threads", "lock_wait_budget",
    "lock_gap_timeout", "lock_reap_interval", "reseq_gap_timeout", "reseq_capacity",
    "send_timeout", "send_backoff", "send_backoff_max", "metrics_refresh",
    "metrics_top_destinations", "status_interval", "sender_lease", "outage_budget",
    "min_every", "result_expires"})
NON_NEGATIVE = frozenset({"work_scale", "completion_log_maxlen", "send_retries",
                          "lock_chain_seconds", "metrics_port", "pull_forward_min_seconds",
                          "unknown_bucket_grace"})
FRACTIONS = frozenset({"pull_forward_fraction"})
AT_LEAST_ONE = frozenset({"lock_ttl", "lock_max_parked", "reseq_max_entry_bytes",
                          "fair_share_quota", "max_payload_bytes", "max_deliveries",
                          "max_job_key_bytes", "max_call_bytes", "flower_port"})
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
    "fair_share_quota": 1_000_000,  # a round of a million rows of one user is no fair share
    "pull_forward_fraction": 1,
    # waits and timeouts: an hour for a network call or a poll, a day or a week for a budget
    "send_timeout": 300, "send_backoff": HOUR, "send_backoff_max": HOUR,
    "sender_lease": HOUR, "lock_reap_interval": HOUR, "lock_chain_seconds": HOUR,
    "outage_budget": HOUR, "metrics_refresh": HOUR, "scheduler_interval": 60,
    "scheduler_idle_interval": 60,
    "reseq_gap_timeout": DAY, "lock_ttl": DAY, "schedule_threshold": DAY,
    "pull_forward_min_seconds": DAY, "status_interval": DAY, "min_every": DAY,
    "unknown_bucket_grace": DAY, "lease_seconds": 7 * DAY, "lock_gap_timeout": 7 * DAY,
    "lock_wait_budget": 30 * DAY,
    # a user's line and one resequencer result: Redis memory, not a throughput knob
    "lock_max_parked": 10_000_000, "reseq_max_entry_bytes": 1 << 23, "result_expires": 30 * DAY,
}
#: Upper bound of a numeric setting without its own AT_MOST entry: finite, at least.
DEFAULT_AT_MOST = 1_000_000_000
CHOICES = {"queue_type": ("quorum", "classic"), "lock_when_redis_down": ("retry", "run-unlocked"),
           "otel": ("auto", "1", "0"),
           "otel_celery": ("full", "lean"),
           # what both Celery's -l and the scheduler's logging.getLevelName take
           "log_level": ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}
#: The schemes each URL setting takes (a driver would otherwise fail late, with a traceback
#: or a retry loop); result_backend's are Celery's backend aliases. Empty: see OPTIONAL_URLS.
URL_SCHEMES = {
    "broker_url": ("amqp", "amqps", "pyamqp"), "redis_url": ("redis", "rediss", "unix"),
    "flower_broker_api": ("http", "https"),
    "result_backend": ("redis", "rediss", "sentinel", "rpc", "db", "database", "cache",
                       "mongodb", "file", "s3", "gs", "dynamodb", "elasticsearch", "cassandra",
                       "couchbase", "couchdb", "consul", "arangodb", "azureblockblob",
                       "cosmosdbsql", "riak", "disabled"),
}
#: URL settings whose empty value means "derived from another one".
OPTIONAL_URLS = frozenset({"flower_broker_api", "result_backend"})


def check_values(values: dict[str, Any], table: BucketTable) -> None:
    """Refuse a value out of its bounds (one setting at a time, as it is read)."""
    for name, value in values.items():
        _check_bounds(name, value)
        _check_text(name, value)
    _check_database_url(values.get("database_url", "sqlite://"))
    for name in filter(None, values.get("pull_forward", "").split(",")):
        if name.strip() not in table.names:
            raise ValueError(f"pull_forward names unknown bucket {name.strip()!r} "
                             f"(buckets: {', '.join(table.names)})")


def is_numeric(kind: Any) -> bool:
    """Whether a field of type ``kind`` is a number, and so has a range."""
    return kind in (int, float, "int", "float")


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
    if name in URL_SCHEMES and (value or name not in OPTIONAL_URLS):
        # RECUR_BROKER_URL may list a cluster's nodes, ';'-separated (README)
        for url in value.split(";") if name == "broker_url" else [value]:
            _check_url(name, url.strip())
    problem = placeholder_problem(name, value)
    if problem:
        raise ValueError(problem)


def _check_url(name: str, url: str) -> None:
    """A URL of one of ``name``'s schemes, with a usable port (and Redis database number).
    Only the scheme and port are said, never the URL: it may hold a password."""
    schemes = URL_SCHEMES[name]
    scheme, sep, _ = url.partition("://")
    scheme = scheme.partition("+")[0].lower()  # db+postgresql://, Celery's form
    if not sep or scheme not in schemes:
        shown = f"{scheme[:20]!r}" if sep and scheme else "none"
        raise ValueError(f"{name} must be a URL {', '.join(s + '://' for s in schemes[:6])}"
                         f"{', ...' if len(schemes) > 6 else ''} (scheme: {shown})")
    _check_port(name, url)
    db = urlsplit(url).path.strip("/")
    if scheme in ("redis", "rediss") and db and not (db.isascii() and db.isdigit()
                                                     and len(db) <= 9):
        raise ValueError(f"{name}: the Redis database after the host must be a number "
                         f"(redis://host:6379/0), got {db[:20]!r}")


def _check_port(name: str, url: str) -> None:
    try:
        urlsplit(url).port  # noqa: B018 - reading it is the check (ValueError if bad)
    except ValueError as exc:
        raise ValueError(f"{name}: bad port ({exc})") from None


def _check_database_url(url: str) -> None:
    """Refuse URLs SQLAlchemy would fail on late and obscurely, with the fix."""
    scheme = url.partition("://")[0]
    if scheme in ("postgres", "postgresql", "postgresql+psycopg2"):
        fixed = masked("postgresql+psycopg://" + url.partition("://")[2], stop_at_space=False)
        raise ValueError(f"use {fixed} (recur talks to PostgreSQL through psycopg 3; "
                         f"SQLAlchemy has no driver for {scheme}://)")
    if not url.startswith(("sqlite:", "postgresql+psycopg:")):
        raise ValueError("must be sqlite:///<file> or postgresql+psycopg://user@host/db")
    _check_port("database_url", url)
    if url.startswith("sqlite:"):
        _check_sqlite_query(url)


#: What a SQLite URL's query may hold: the driver's own arguments, and with uri=true
#: SQLite's URI parameters. SQLAlchemy drops any other name with a warning (so
#: ``?mode=ro`` alone opened the file read-write) and SQLite ignores unknown URI ones.
SQLITE_DRIVER_ARGS = ("uri", "cached_statements")  # its timeout is recur's own
SQLITE_URI_ARGS = ("mode", "cache", "immutable", "nolock", "psow", "vfs")


def _check_sqlite_query(url: str) -> None:
    """Refuse a SQLite URL whose query would be ignored or would open another file."""
    parts = urlsplit(url)
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    uri = dict(parse_qsl(parts.query)).get("uri", "").lower() in ("true", "1", "yes")
    takes = SQLITE_DRIVER_ARGS + (SQLITE_URI_ARGS if uri else ())
    unknown = [name for name in names if name not in takes]
    if unknown and not uri and set(unknown) <= set(SQLITE_URI_ARGS):
        raise ValueError(f"SQLite takes {', '.join(unknown)} only in a URI: "
                         "sqlite:///file:<path>?<parameters>&uri=true")
    if unknown:
        raise ValueError(f"unknown SQLite URL parameter(s) {', '.join(unknown)[:100]} "
                         f"(it takes {', '.join(takes)})")
    if uri and not parts.path.lstrip("/").startswith("file:"):
        raise ValueError("with uri=true the path must be a URI, sqlite:///file:<path>?...: "
                         "else SQLite opens a file whose name ends with the query")
