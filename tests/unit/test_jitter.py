"""Jitter's phase arithmetic: each key on its own slots, a population spread and kept spread."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.bucketfile import parse_table
from config.errors import BucketsFileError, InvalidMessage
from routing.jitter import SLACK, first_due, key_fraction, next_due, phase
from routing.recurrence import jittered_due, recurrence_of

EVERY = 60.0
NOW = 1_750_000_000.123  # an arbitrary instant, not on a minute


def on_phase(key: str, t: float, jitter: float, every: float = EVERY) -> bool:
    """Whether ``t`` is one of the key's slots (to the microsecond)."""
    off = (t - phase(key, every, jitter)) % every
    return min(off, every - off) < 1e-5


def test_the_fraction_is_stable_and_spread() -> None:
    assert key_fraction("job-1") == key_fraction("job-1")
    # MD5's first 52 bits: a value fixed for ever (the seed computes it in Spark too).
    assert key_fraction("") == int("d41d8cd98f00b", 16) / 2**52
    fractions = [key_fraction(f"job-{i}") for i in range(20_000)]
    assert all(0 <= f < 1 for f in fractions)
    tenths = Counter(int(f * 10) for f in fractions)
    assert max(tenths.values()) < 1.1 * 2000 and min(tenths.values()) > 0.9 * 2000


def test_jitter_zero_is_todays_rule() -> None:
    """No jitter: no due time from the phase, the caller keeps 'every after now'."""
    now = datetime(2025, 1, 1, 12, 0, 7, tzinfo=UTC)
    assert jittered_due({"every": 60}, 0.0, "k", now - timedelta(seconds=3), now) is None
    assert jittered_due({"every": 60, "jitter": 0}, 0.5, "k", None, now) is None
    assert jittered_due({"n": 1}, 0.5, "k", None, now) is None  # not recurring


def test_payload_jitter_overrides_the_buckets() -> None:
    now = datetime.fromtimestamp(NOW, UTC)
    by_bucket = jittered_due({"every": 60}, 1.0, "k", None, now)
    by_payload = jittered_due({"every": 60, "jitter": 0.25}, 1.0, "k", None, now)
    assert by_bucket is not None and on_phase("k", by_bucket.timestamp(), 1.0)
    assert by_payload is not None and on_phase("k", by_payload.timestamp(), 0.25)


@pytest.mark.parametrize("jitter", [0.01, 0.3, 1.0])
def test_stays_on_phase_with_no_drift_across_many_intervals(jitter: float) -> None:
    """Runs that start late and take time never move the next slot: exactly every apart."""
    rng, key = random.Random(7), "user-42/mailbox"
    due = next_due(key, EVERY, jitter, NOW, NOW + 0.5)
    first = due
    for n in range(1, 1000):
        started = due + rng.uniform(0, 0.9 * (1 - jitter) * EVERY + 0.5)  # dispatch lag + work
        due = next_due(key, EVERY, jitter, due, started)
        assert on_phase(key, due, jitter)
        assert due == pytest.approx(first + n * EVERY, abs=1e-5)


@pytest.mark.parametrize("jitter", [0.05, 0.5, 1.0])
def test_lateness_bound_on_the_first_move(jitter: float) -> None:
    """Moving onto its phase: at most jitter x every later than 'every after its due
    time', and at least jitter x every after it."""
    for i in range(2000):
        key, ran = f"k{i}", NOW + i * 0.37
        due = next_due(key, EVERY, jitter, ran, ran + 0.2)
        assert on_phase(key, due, jitter)
        assert ran + jitter * EVERY - SLACK <= due < ran + EVERY + jitter * EVERY


def test_a_run_behind_by_intervals_skips_to_the_next_slot_ahead() -> None:
    late_by = 5.5 * EVERY
    due = next_due("k", EVERY, 1.0, NOW, NOW + late_by)
    assert NOW + late_by < due <= NOW + late_by + EVERY and on_phase("k", due, 1.0)


def test_a_burst_spreads_and_never_reforms() -> None:
    """10,000 jobs due at once: after one reschedule the busiest tenth of the interval
    holds about a tenth; it stays so over 20 intervals of random lateness."""
    rng, keys = random.Random(3), [f"job-{i}" for i in range(10_000)]
    dues = {k: next_due(k, EVERY, 1.0, NOW, NOW + rng.uniform(0, 5)) for k in keys}
    for _ in range(20):
        dues = {k: next_due(k, EVERY, 1.0, d, d + rng.uniform(0, 20)) for k, d in dues.items()}
        tenths = Counter(int((d % EVERY) / 6) for d in dues.values())
        assert max(tenths.values()) <= 1.1 * 1000


def test_first_due_is_the_first_slot_from_start() -> None:
    for i in range(500):
        due = first_due(f"k{i}", EVERY, 0.5, NOW)
        assert NOW - SLACK <= due < NOW + EVERY and on_phase(f"k{i}", due, 0.5)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", True, float("nan")])
def test_payload_jitter_is_checked_where_every_is(bad: Any) -> None:
    with pytest.raises(InvalidMessage, match=r"payload\.jitter"):
        recurrence_of({"every": 60, "jitter": bad})


def test_recurrence_keeps_its_jitter() -> None:
    rec = recurrence_of({"every": 60, "runs": 3, "jitter": 0.5})
    assert rec is not None and rec.jitter == 0.5 and rec.after_this_run().jitter == 0.5
    assert recurrence_of({"every": 60}) is not None
    assert recurrence_of({"every": 60}).jitter is None  # type: ignore[union-attr]


BUCKET = 'soft_time_limit = 10\ntime_limit = 20\nconcurrency = 1\npool = "solo"\n'


def test_bucket_file_jitter() -> None:
    import tomllib

    table = parse_table(tomllib.loads("[buckets.a]\n" + BUCKET + "jitter = 0.5\n"), "f.toml")
    assert table.get("a").jitter == 0.5
    table = parse_table(tomllib.loads("[buckets.a]\n" + BUCKET), "f.toml")
    assert table.get("a").jitter == 0.0
    with pytest.raises(BucketsFileError, match="jitter: must be a fraction from 0 to 1"):
        parse_table(tomllib.loads("[buckets.a]\n" + BUCKET + "jitter = 2\n"), "f.toml")
