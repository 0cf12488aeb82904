"""A user's bucket table from a TOML file (``RECUR_BUCKETS_FILE``), strictly checked.

::

    [buckets.short]
    soft_time_limit = 30     # seconds; required
    time_limit = 45          # seconds, >= soft_time_limit; required
    concurrency = 4          # processes (prefork) or threads (threads); required
    pool = "prefork"         # prefork | threads | solo; required
    prefetch = 4             # optional, default 1
    queue = "short"          # optional, default the bucket's name
    work_seconds = 0.05      # optional: process_message's simulated work, <= soft_time_limit
    jitter = 0.5             # optional, default 0: recurring messages' phase, 0..1 of 'every'
    rate_limit = "10/s"      # optional: every job's starts per key (config/bucket_rates.py),
    rate_burst = 1           #   with its burst and the message field keyed on
    rate_key = "user_id"

    [kinds]
    ping = "short"

    [tasks."myapp.call_partner"]   # optional: a task's own default rate
    rate_limit = "2/s"

The file is the whole table: its buckets in file order, its kinds (none if
it has no ``[kinds]``) and its tasks' default rates. Anything wrong (an unknown
key, a duplicate queue, a hard limit below the soft one, a bad rate, an unknown
pool, a kind naming no bucket, a number that is nan, inf or beyond its bound in
:data:`BOUNDS`) is one
:class:`BucketsFileError` naming the file, the bucket and the field, raised
before any process starts.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, cast

from config.bucket_rates import FIELDS as RATE_FIELDS
from config.bucket_rates import rate_default, task_rates
from config.buckets import BUILTIN, POOLS, Bucket, BucketTable, Pool
from config.errors import BucketsFileError
from config.text import visible

REQUIRED = ("soft_time_limit", "time_limit", "concurrency", "pool")
OPTIONAL = ("queue", "prefetch", "work_seconds", "jitter", *RATE_FIELDS)
#: Queue names recur keeps for itself (the resequencer's sends).
RESERVED_QUEUES = frozenset({"outbound"})
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
#: Largest value of each number (docs/configuration.md): a day for one task (the lease must
#: outlast it), a thousand reserved messages per process.
BOUNDS: dict[str, float] = {"soft_time_limit": 86400, "time_limit": 86400,
                            "prefetch": 1000, "work_seconds": 86400}
#: Largest concurrency per pool: processes cost memory each, threads a stack, solo runs one.
CONCURRENCY = {"prefork": 256, "threads": 1024, "solo": 1}
#: Buckets and kinds of one table: each bucket is two queues and a worker fleet.
MAX_BUCKETS, MAX_KINDS = 64, 1000
#: Largest bucket file read: 64 buckets and 1000 kinds take a few dozen KiB.
MAX_FILE_BYTES = 1 << 20


class _Where:
    """Builds errors that say where in the file the problem is."""

    def __init__(self, path: str) -> None:
        self.path = shown_path(path)

    def error(self, problem: str, bucket: str | None = None,
              key: str | None = None) -> BucketsFileError:
        where = [self.path]
        if bucket is not None:
            where.append(f"bucket {bucket!r:.80}")
        if key is not None:
            where.append(key)
        return BucketsFileError(f"{': '.join(where)}: {problem}")


def _number(where: _Where, bucket: str, key: str, value: Any, integer: bool,
            high: float, why: str = "") -> float:
    """A positive number at most ``high`` (an integer >= 1 when ``integer``)."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = "an integer" if integer else "a number"
        raise where.error(f"must be {wanted}, got {value!r:.60}", bucket, key)
    if value != value or value in (float("inf"), float("-inf")):
        raise where.error(f"must be a finite number, got {value!r}", bucket, key)
    if value <= 0:
        raise where.error(f"must be positive, got {value!r}", bucket, key)
    if value > high:
        raise where.error(f"must be at most {high:g}{why}, got {_short(value)}", bucket, key)
    return float(value)


def _short(value: float) -> str:
    """A number for an error line (a 10**400 from TOML has no float and no short repr)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _check_keys(where: _Where, name: str, spec: Any) -> None:
    if not NAME.fullmatch(name):
        raise where.error("a bucket name is letters, digits, '_', '-' or '.' "
                          "(at most 63)", name)
    if not isinstance(spec, Mapping):
        raise where.error(f"must be a table ([buckets.{name}]), got {spec!r:.80}", name)
    for key in spec:
        if key not in REQUIRED + OPTIONAL:
            raise where.error(f"unknown key (known: {', '.join(REQUIRED + OPTIONAL)})",
                              name, key)
    for key in REQUIRED:
        if key not in spec:
            raise where.error("missing (required)", name, key)


def _bucket(where: _Where, name: str, spec: Any) -> Bucket:
    _check_keys(where, name, spec)
    soft = _number(where, name, "soft_time_limit", spec["soft_time_limit"], False,
                   BOUNDS["soft_time_limit"])
    hard = _number(where, name, "time_limit", spec["time_limit"], False, BOUNDS["time_limit"])
    if hard < soft:
        raise where.error(f"{spec['time_limit']!r} is below soft_time_limit "
                          f"{spec['soft_time_limit']!r}", name, "time_limit")
    pool = spec["pool"]
    if pool not in POOLS:
        raise where.error(f"unknown pool {pool!r:.80} (known: {', '.join(POOLS)})", name, "pool")
    queue = spec.get("queue", name)
    if not isinstance(queue, str) or not NAME.fullmatch(queue) or queue.endswith(".dead"):
        raise where.error(f"not a usable queue name: {queue!r:.80}", name, "queue")
    if queue.lower().startswith("amq."):  # RabbitMQ refuses to declare one (ACCESS_REFUSED)
        raise where.error(f"queue {queue!r}: names starting 'amq.' are RabbitMQ's own",
                          name, "queue")
    return Bucket(
        name, queue, soft_time_limit=float(soft), time_limit=float(hard),
        prefetch=int(_number(where, name, "prefetch", spec.get("prefetch", 1), True,
                             BOUNDS["prefetch"])),
        concurrency=int(_number(where, name, "concurrency", spec["concurrency"], True,
                                CONCURRENCY[pool], f" for pool {pool!r}")),
        pool=cast(Pool, pool), work_seconds=_work(where, name, spec, soft),
        jitter=_jitter(where, name, spec),
        rate=rate_default(spec, f"bucket={name}", lambda problem, key: where.error(
            problem, name, key)))


def _jitter(where: _Where, name: str, spec: Mapping[str, Any]) -> float:
    """A fraction of the interval: 0 (none) to 1 (the whole interval)."""
    value = spec.get("jitter", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise where.error(f"must be a fraction from 0 to 1, got {value!r:.60}", name, "jitter")
    return float(value)


def _work(where: _Where, name: str, spec: Mapping[str, Any], soft: float) -> float:
    """Simulated work: 0 up to the soft limit (longer could never finish)."""
    work = spec.get("work_seconds", 0.0)
    if isinstance(work, bool) or not isinstance(work, int | float) or not 0 <= work <= soft:
        raise where.error(f"must be a number from 0 to soft_time_limit {soft:g}, "
                          f"got {work!r:.60}", name, "work_seconds")
    return float(work)


def _kinds(where: _Where, raw: Any, names: set[str]) -> Mapping[str, str]:
    if not isinstance(raw, Mapping):
        raise where.error(f"[kinds] must be a table of kind = \"bucket\", got {raw!r:.80}")
    if len(raw) > MAX_KINDS:
        raise where.error(f"{len(raw)} kinds: at most {MAX_KINDS}", key="kinds")
    for kind, bucket in raw.items():
        if not NAME.fullmatch(kind):
            raise where.error(f"kind {kind!r:.70} is not a name (letters, digits, '_', '-' "
                              "or '.', at most 63)", key="kinds")
        if not isinstance(bucket, str) or bucket not in names:
            raise where.error(f"kind {kind!r} maps to unknown bucket {bucket!r:.80} "
                              f"(buckets: {', '.join(sorted(names))})", key="kinds")
    return MappingProxyType(dict(raw))


def parse_table(document: Mapping[str, Any], path: str) -> BucketTable:
    """The bucket table a parsed TOML document describes (BucketsFileError if invalid)."""
    where = _Where(path)
    for key in document:
        if key not in ("buckets", "kinds", "tasks"):
            raise where.error(f"unknown top-level key {key!r} (known: buckets, kinds, tasks)")
    raw = document.get("buckets")
    if not isinstance(raw, Mapping) or not raw:
        raise where.error("no buckets: give at least one [buckets.<name>] table")
    if len(raw) > MAX_BUCKETS:
        raise where.error(f"{len(raw)} buckets: at most {MAX_BUCKETS}")
    buckets = tuple(_bucket(where, name, spec) for name, spec in raw.items())
    seen: dict[str, str] = {}
    for b in buckets:
        if b.queue in RESERVED_QUEUES:
            raise where.error(f"queue {b.queue!r} is recur's own", b.name, "queue")
        if b.queue in seen:
            raise where.error(f"queue {b.queue!r} is already bucket {seen[b.queue]!r}'s",
                              b.name, "queue")
        seen[b.queue] = b.name
    kinds = _kinds(where, document.get("kinds", {}), {b.name for b in buckets})
    return BucketTable(buckets, kinds, source=path,
                       task_rates=task_rates(document.get("tasks", {}), path))


def shown_path(path: str) -> str:
    """The file's path as an error line shows it: control characters escaped, cut short."""
    text = visible(path)
    return text if len(text) <= 200 else text[:200] + "..."


def _read(path: str) -> bytes:
    """The file's bytes: a regular file of at most MAX_FILE_BYTES (a FIFO or a device such
    as /dev/zero would block or never end)."""
    with open(path, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise BucketsFileError(f"{shown_path(path)}: cannot read it: not a regular file")
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise BucketsFileError(f"{shown_path(path)}: over {MAX_FILE_BYTES} bytes: not a "
                               "bucket table")
    return data


@cache
def load_table(path: str) -> BucketTable:
    """The table in ``path`` ('' : the built-in one), read once per process."""
    if not path:
        return BUILTIN
    shown = shown_path(path)
    try:
        document = tomllib.loads(_read(path).decode("utf-8"))
    except OSError as exc:
        raise BucketsFileError(f"{shown}: cannot read it: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL in the path: open() takes no such name
        if isinstance(exc, tomllib.TOMLDecodeError):
            raise BucketsFileError(f"{shown}: not valid TOML: {exc}") from exc
        if isinstance(exc, UnicodeDecodeError):  # TOML is UTF-8
            raise BucketsFileError(f"{shown}: not valid TOML: not UTF-8 text (byte "
                                   f"{exc.start + 1})") from exc
        raise BucketsFileError(f"{shown}: cannot read it: {exc}") from exc
    return parse_table(document, path)
