"""Fair share on the store (SQLite and PostgreSQL, no processes): a look deals the users
hidden behind a dominant one into rounds claimed first; keeping up changes nothing;
off means due order; dealt rows stay scheduled rows for operators; none is lost."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from scheduler import fair_share
from scheduler.fair_share import FairShare
from scheduler.store import Claimed, DueStore, Job
from scheduler.store.aside import AsideRows
from scheduler.store.control import JobControl, JobFilter
from scheduler.store.due_histogram import due_histogram
from scheduler.store.fair import FairRows

T0 = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def job(key: str, user: str, due: datetime, bucket: str = "short") -> Job:
    msg = {"id": key, "user_id": user, "bucket": bucket, "payload": None}
    return Job(key, "tasks.process_message", bucket,
               json.dumps({"args": [msg], "kwargs": {}}), due)


def population(store: DueStore) -> tuple[list[str], list[str], list[str]]:
    """200 rows of a noisy user due from T0 - 10 s, a light user's 2 rows among its
    first ones, and 15 quiet users' rows due 5 s after the noisy ones."""
    noisy = [f"n{i:03}" for i in range(200)]
    light = ["l-a", "l-b"]
    quiet = [f"q{i:02}" for i in range(15)]
    start = T0 - timedelta(seconds=10)
    jobs = [job(k, "noisy", start + timedelta(milliseconds=10 * i)) for i, k in enumerate(noisy)]
    jobs += [job("l-a", "light", start + timedelta(milliseconds=95)),
             job("l-b", "light", start + timedelta(milliseconds=105))]
    jobs += [job(k, f"quiet-{k}", T0 - timedelta(seconds=5)) for k in quiet]
    store.schedule(jobs, T0 - timedelta(seconds=20))
    return noisy, light, quiet


def claim(store: DueStore, fair: FairShare, limit: int, now: datetime = T0) -> list[str]:
    got: list[Claimed] = []
    store.dispatch("short", limit, now, now + LEASE, got.extend,
                   dealt=fair.before_fill("short", now))
    return [c.job_key for c in got]


def fill(store: DueStore, fair: FairShare, room: int) -> list[str]:
    """What the drain does: look if the last fill left due rows, claim a room, probe."""
    keys = claim(store, fair, room)
    fair.after_fill("short", len(keys), T0)
    return keys


@pytest.fixture
def small_head(monkeypatch: pytest.MonkeyPatch) -> None:
    """A head of 20 rows, so the look reads on past the dominant user."""
    monkeypatch.setattr(fair_share, "HEAD_ROWS", 20)
    monkeypatch.setattr(fair_share, "SCAN_CHUNK", 50)


def test_quiet_users_behind_a_noisy_backlog_come_first(store: DueStore,
                                                       small_head: None) -> None:
    noisy, light, quiet = population(store)
    fair = FairShare(FairRows(store), enabled=True, quota=3)
    first = fill(store, fair, 10)  # behind: a full room of the noisy user's rows
    assert first == noisy[:10]
    got = claim(store, fair, 30)
    # Round 1: the noisy user's next 3 rows, the light user's 2 and each quiet user's
    # one, in due order; then the noisy user's bulk, in due order, where it was.
    assert got == [light[0], noisy[10], light[1], noisy[11], noisy[12], *quiet, *noisy[13:23]]
    rest = claim(store, fair, 1000)
    assert rest == noisy[23:]
    assert claim(store, fair, 10) == []


def test_keeping_up_is_due_order_and_a_mixed_head_is_not_dealt(store: DueStore) -> None:
    noisy, light, quiet = population(store)
    fair = FairShare(FairRows(store), enabled=True, quota=3)
    everything = fill(store, fair, 1000)  # the room holds every due row: it keeps up
    assert ties_sorted(everything) == due_order(noisy, light, quiet)
    assert FairRows(store).state("short", T0, 100, 100).dealt_ever == 0
    # Behind, but nobody holds more than the quota at the head: due order too.
    store.schedule([job(f"m{i}", f"user-{i % 10}", T0 - timedelta(seconds=1) + i * MS)
                    for i in range(30)], T0)
    fair = FairShare(FairRows(store), enabled=True, quota=3)
    assert fill(store, fair, 10) + fill(store, fair, 10) + fill(store, fair, 10) == [
        f"m{i}" for i in range(30)]
    assert FairRows(store).state("short", T0, 100, 100).dealt_ever == 0


MS = timedelta(milliseconds=1)


def due_order(noisy: list[str], light: list[str], quiet: list[str]) -> list[str]:
    return [*noisy[:10], light[0], noisy[10], light[1], *noisy[11:], *quiet]


def ties_sorted(keys: list[str]) -> list[str]:
    """The quiet rows share one due time: the store may claim ties in any order."""
    tail = [k for k in keys if k.startswith("q")]
    return [k for k in keys if not k.startswith("q")] + sorted(tail)


def test_off_means_strict_due_order_and_puts_dealt_rows_back(store: DueStore,
                                                            small_head: None) -> None:
    noisy, light, quiet = population(store)
    fair = FairShare(FairRows(store), enabled=True, quota=3)
    fill(store, fair, 10)
    fair.before_fill("short", T0)  # behind: the next fill looks first
    assert FairRows(store).rounds("short") is not None  # rows were dealt
    off = FairShare(FairRows(store), enabled=False, quota=3)
    got = fill(store, off, 20) + fill(store, off, 1000)
    assert FairRows(store).rounds("short") is None
    assert ties_sorted(got) == due_order(noisy, light, quiet)[10:]


def test_dealt_rows_are_scheduled_rows_for_operators(store: DueStore,
                                                      small_head: None) -> None:
    noisy, light, quiet = population(store)
    rows = FairRows(store)
    fair = FairShare(rows, enabled=True, quota=3)
    fill(store, fair, 10)
    fair.before_fill("short", T0)
    state = rows.state("short", T0, 100, 1000)
    assert state.dealt_rows == 20 and state.rounds is not None
    assert state.rounds.lowest == state.rounds.highest == 1
    assert state.dealt_ever == 20 and state.dealt_users == 17
    assert state.head_users == 1 and state.largest_rows == state.head_rows  # the bulk
    # Counted and seen: due rows, the oldest (a dealt one), a list page in due order.
    head = store.heads(["short"], T0, 1000)["short"]
    assert head.due == 190 + 2 + 15  # the light user's first row, dealt, is the oldest:
    assert head.oldest_scheduled_at == T0 - timedelta(seconds=10) + 95 * MS
    assert store.stats(T0)["short"].scheduled == 207
    ctl = JobControl(store)
    page = ctl.page(JobFilter(bucket="short", state="scheduled"), 100)
    listed = [r.job_key for r in page.jobs]
    page = ctl.page(JobFilter(bucket="short", state="scheduled"), 200, page.cursor)
    listed += [r.job_key for r in page.jobs]
    assert listed == due_order(noisy, light, quiet)[10:]
    shown = ctl.get("q03")
    assert shown is not None and shown.state == "scheduled"
    # Cancel one; move one into the future (due order again); write one again.
    assert ctl.cancel("q00") is not None
    ctl.move("q01", T0 + timedelta(minutes=3), T0)
    store.schedule([job("q02", "quiet-q02", T0 - timedelta(seconds=5))], T0)
    assert due_histogram(store, ["short"], T0, 5)["short"] == [0, 0, 0, 1, 0]
    assert rows.state("short", T0, 100, 1000).dealt_rows == 17
    # A bucket no scheduler knows any more: its dealt rows are set aside too.
    aside = AsideRows(store).set_aside_bucket("short", T0, 1000, "test", T0)
    assert aside == 207 - 2 and rows.rounds("short") is None


def test_every_row_runs_once_and_a_rescheduled_row_is_not_dealt(store: DueStore,
                                                               small_head: None) -> None:
    noisy, light, quiet = population(store)
    fair = FairShare(FairRows(store), enabled=True, quota=3)
    seen: list[str] = []
    while batch := fill(store, fair, 7):
        seen += batch
        if "q04" in batch and seen.count("q04") == 1:  # a dealt row reschedules itself:
            token = store.live_dispatch("q04")
            assert token is not None
            assert store.reschedule("q04", token[0], T0 - timedelta(seconds=30), T0)
            assert FairRows(store).window("short", T0, T0 - timedelta(minutes=1), 1)[0][0] \
                == "q04"
    assert sorted(seen) == sorted(noisy + light + quiet + ["q04"])
    assert seen.count("q04") == 2
