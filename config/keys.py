"""Every Redis key recur writes, in one place.

All keys start with the configured prefix (RECUR_KEY_PREFIX), so deployments
and test runs sharing one Redis never see each other's keys.

=====================================  ======  =====================================
key                                    type    holds
=====================================  ======  =====================================
``<prefix>:completed``                 stream  recent task completions (capped)
``<prefix>:stats:processed``           hash    bucket -> tasks completed
``<prefix>:celery-task-meta-<id>``     string  Celery's stored failure of task <id>
``<prefix>:reseq:destinations``        set     destinations the resequencer has seen
``<prefix>:reseq:{<d>}:<part>``        (many)  destination <d>'s resequencer state: see
                                               ``reseq`` and routing/reseq/lua/*.lua
``<prefix>:reseq:{<d>}:outage``        hash    destination <d>'s outage (TTL): see
                                               ``reseq_outage``
``<prefix>:lock:{<u>}:<part>``         (many)  user <u>'s lock, order and parked jobs:
                                               see ``user_lock`` and tasks/distlock/lock.lua
``<prefix>:lock:wake``                 zset    users to look at again, by due time (ms)
``<prefix>:lock:counter``              string  job numbers and fencing tokens
``<prefix>:lock:stats``                hash    lock event counters (busy, handovers, ...)
``<prefix>:rate:{<k>}``                hash    rate-limited key <k>'s GCRA times and
                                               reserved slots: see routing/gcra.lua
``<prefix>:rate:stats``                hash    deferred:<bucket>, waiting:<bucket>
=====================================  ======  =====================================
"""

from __future__ import annotations

import re

#: A key prefix: short, and only characters that mean nothing to Redis Cluster hash tags
#: (``{}``) or to SCAN/KEYS patterns (``*?[]``), so ``<prefix>:*`` matches our keys only.
PREFIX_CHARS = re.compile(r"[A-Za-z0-9_.:-]+")
MAX_PREFIX_LENGTH = 64


def check_prefix(prefix: str) -> str:
    """``prefix`` if it is a usable key prefix; ValueError saying why not."""
    if not prefix:
        raise ValueError("key_prefix must not be empty: keys of every deployment would mix")
    if len(prefix) > MAX_PREFIX_LENGTH:
        raise ValueError(f"key_prefix must be at most {MAX_PREFIX_LENGTH} characters, "
                         f"got {len(prefix)}")
    if not PREFIX_CHARS.fullmatch(prefix):
        raise ValueError("key_prefix may hold only letters, digits and '_.:-' (no spaces, "
                         "braces or the glob characters *?[] that break SCAN patterns)")
    return prefix


def completed(prefix: str) -> str:
    """Stream of recent completions: one entry per finished task run."""
    return f"{prefix}:completed"


def processed_counts(prefix: str) -> str:
    """Hash of completed-task counts per bucket."""
    return f"{prefix}:stats:processed"


def reseq(prefix: str, destination: str, part: str) -> str:
    """One part of a destination's resequencer state; the hash tag keeps a destination's
    keys in one Redis Cluster slot, so its Lua scripts can touch them all.

    Parts: seq (string, last sequence number assigned), pending (hash seq -> arrival
    JSON, assigned but not yet sent or skipped), buffer (hash seq -> processed result
    JSON), sent (string, last sequence number sent or skipped), sender (string, token
    of the one sender, with its lease TTL), fence (string, fence of the latest sender
    lease: only grows), wake (string, due ms of the booked sender run),
    gap (string 'seq:ms', when the sender first saw seq missing with later ones
    ready), skipped (list of skip records, newest first, capped), stats (hash of
    counters: sent, skipped, late, dead, refused:<status>, deferred:rate = sends that
    waited for their slot under the destination's rate), outage (hash: the
    destination's current outage, see ``reseq_outage``), rate (hash: the GCRA times
    of a destination with a ``rate=``, routing/gcra.lua; expires when idle).
    """
    return f"{prefix}:reseq:{{{destination}}}:{part}"


#: The part holding a destination's outage (``reseq(prefix, d, OUTAGE)``).
OUTAGE = "outage"


def reseq_outage(prefix: str, destination: str) -> str:
    """Hash of the destination's current outage (since, status, reason, tries, seq, kind,
    last), written by its sender on every refused try with a TTL (a sender that stops
    trying lets it expire) and deleted when the destination answers again: what
    ``recur status`` names and the exporter's ``recur_destination_outage`` reads."""
    return reseq(prefix, destination, OUTAGE)


def reseq_destinations(prefix: str) -> str:
    """Set of every destination the resequencer has seen."""
    return f"{prefix}:reseq:destinations"


#: Parts of a user's lock state (``user_lock(prefix, u, part)``), in lock.lua's KEYS
#: order: owner (string, holder's token, with the lease TTL), mark (hash: started,
#: done = highest numbers that started / finished, gapat), wait (zset of numbers given
#: out and not finished), parked (zset of job JSON by number), skipped (set of numbers
#: passed over), ids (hash task id -> number for jobs numbered on arrival). All but
#: owner and parked expire RECUR_LOCK_WAIT_BUDGET (+5 min) after the user's last job:
#: memory follows recently busy users, not the population.
LOCK_PARTS = ("owner", "mark", "wait", "parked", "skipped", "ids")


def user_lock(prefix: str, user: str, part: str) -> str:
    """One part of a user's lock state; the hash tag keeps a user's keys in one slot."""
    return f"{prefix}:lock:{{{user}}}:{part}"


def lock_wake(prefix: str) -> str:
    """Sorted set of users whose parked jobs need a look at a due time (ms)."""
    return f"{prefix}:lock:wake"


def lock_counter(prefix: str) -> str:
    """The one counter behind job numbers and fencing tokens (only ever grows)."""
    return f"{prefix}:lock:counter"


def lock_stats(prefix: str) -> str:
    """Hash of lock event counters, summed over every worker."""
    return f"{prefix}:lock:stats"


def rate_limit(prefix: str, key: str) -> str:
    """Hash of one rate-limited key (``@rate_limit``): its GCRA times and reserved slots."""
    return f"{prefix}:rate:{{{key}}}"


def rate_stats(prefix: str) -> str:
    """Hash of rate-limit counters per bucket: deferred (ever), waiting (now)."""
    return f"{prefix}:rate:stats"


def celery_prefix(prefix: str) -> str:
    """Prefix Celery's result backend puts before its own keys."""
    return f"{prefix}:"
