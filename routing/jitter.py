"""Jitter: each recurring job's own phase, derived from its job key, so a population
spreads over its interval and stays spread.

A job that recurs ``every`` seconds with jitter ``j`` (0 to 1) runs at its *slots*,
the instants ``k * every + phase`` (k whole, counted from the Unix epoch), where
``phase = fraction(job_key) * j * every`` and ``fraction`` is a stable hash of the key
in [0, 1). The same key always has the same phase, in every process, every seed and
every release (MD5, which the seed computes alike in Spark: ``spark/transform.py``).

After a run dispatched for due time ``d`` (or now, if unknown), the next due time is
the first slot at or after ``d + j * every`` that is still ahead of now:

- on its slots (``d`` a slot) the next slot is ``d + every`` exactly: no drift, since
  the time the run took or waited is never added, so lateness cannot accumulate and a
  burst cannot re-form;
- moving onto its slots (the first reschedule of a job that was due anywhere) the
  next run is at most ``j * every`` later than ``d + every``, and at least
  ``j * every`` after ``d`` (it may come up to ``(1 - j) * every`` early, once);
- a run that fell a whole interval behind skips to the next slot ahead of now: missed
  slots are not caught up in a burst.

Jitter 0 is no jitter: the caller keeps its own rule (``every`` after now).
"""

from __future__ import annotations

import hashlib
import math

#: The hash's resolution: 52 bits, exact in a double (Spark computes the same value).
HASH_BITS = 52
#: Hex digits of the key's MD5 that make the fraction (13 x 4 = 52 bits).
HASH_HEX = HASH_BITS // 4
#: Slack on "at or after" (seconds): a due time read back from the store is rounded
#: to the microsecond, and must still count as its own slot.
SLACK = 0.001


def key_fraction(job_key: str) -> float:
    """The key's stable place in [0, 1): the first 52 bits of the MD5 of its UTF-8."""
    digest = hashlib.md5(job_key.encode("utf-8", "surrogatepass"), usedforsecurity=False)
    return int(digest.hexdigest()[:HASH_HEX], 16) / float(1 << HASH_BITS)


def phase(job_key: str, every: float, jitter: float) -> float:
    """Seconds after each multiple of ``every`` (from the epoch) at which the key runs."""
    return key_fraction(job_key) * jitter * every


def slot_at_or_after(t: float, every: float, offset: float) -> float:
    """The first instant ``k * every + offset`` (k whole) that is not before ``t - SLACK``."""
    slot = math.ceil((t - SLACK - offset) / every) * every + offset
    while slot < t - SLACK:  # float rounding of a huge quotient
        slot += every
    return slot


def next_due(job_key: str, every: float, jitter: float, ran_due: float | None,
             now: float) -> float:
    """Epoch seconds of the job's next run after a run due at ``ran_due`` (see above)."""
    offset = phase(job_key, every, jitter)
    base = now if ran_due is None else ran_due
    due = slot_at_or_after(base + jitter * every, every, offset)
    if due <= now:  # fell behind a whole interval: the next slot ahead, no catch-up
        due = slot_at_or_after(now + SLACK * 2, every, offset)
    return due


def first_due(job_key: str, every: float, jitter: float, start: float) -> float:
    """A new job's first due time on its phase: its first slot at or after ``start``,
    within ``[start, start + every)`` (the seed's spread; the same key, the same time)."""
    return slot_at_or_after(start, every, phase(job_key, every, jitter))
