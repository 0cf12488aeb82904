"""``recur status``: what the store, the broker and Redis hold, and whether each answered.

Every service is asked even when another failed, so the table shows what could be
read ("?" for the rest). Each service that could not be read is one ``recur: …``
line on stderr and makes the exit code 2; queues that do not exist yet are one
readable line (not a failure: ``recur topology`` declares them). Reading never
creates anything: no database file, no queue.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import click

from config.buckets_in_use import bucket_table
from config.errors import EXIT_ERROR, RecurError, one_line
from config.settings import Settings, settings
from routing.broker import QueueStats, inspect_queues
from routing.queues import missing_queues_line
from scheduler.store.due_histogram import MINUTES_AHEAD, due_histogram
from scheduler.store.estimates import HEAD_CAP, MINUTE_CAP, bounded_histogram
from tasks.cli import status_table as st
from tasks.cli.group import cli
from tasks.cli.status_fair import fair_share_lines, fair_share_state


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for machines.")
@click.option("--exact", is_flag=True,
              help="Count every row (a scan of the table: seconds at millions of rows) "
                   "instead of PostgreSQL's estimates and capped index probes.")
def status(as_json: bool, exact: bool) -> None:
    """Per bucket: scheduled, due now, lag, dispatched, leases, dead, queue depth.

    On PostgreSQL, counts past 5,000 rows a bucket are estimates (~) or
    lower bounds (≥); --exact counts them. Exit code 2 when the store,
    the broker or Redis cannot be read.
    """
    sys.exit(run(settings(), as_json, exact))


@dataclass
class Report:
    """What ``recur status`` found, and what it could not read."""

    buckets: list[st.BucketStatus] = field(default_factory=list)
    destinations: list[Any] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Buckets paused by `recur bucket pause`, and since when (None: unknown).
    paused: dict[str, datetime] | None = None
    #: Per bucket, scheduled rows due in each of the next minutes (jitter's histogram).
    due_histogram: dict[str, list[int]] | None = None
    #: Per bucket, @rate_limit's jobs deferred (ever) and waiting for their slot now.
    rate_limited: dict[str, dict[str, int]] | None = None
    #: Whether every store figure is an exact count (``--exact``, or few rows).
    exact: bool = True
    #: When PostgreSQL last analyzed the table its estimates come from.
    analyzed_at: datetime | None = None
    #: Per bucket, the minutes of ``due_histogram`` that are estimates.
    due_histogram_estimated: dict[str, list[int]] = field(default_factory=dict)
    #: Seconds the store's readings took.
    store_seconds: float | None = None
    #: Per bucket, the fair share: users at the head, rows dealt into rounds.
    fair_share: dict[str, dict[str, Any]] | None = None


def _failure(exc: Exception) -> str:
    line = one_line(exc)
    if line is None:
        raise exc
    return line


def read_queues(cfg: Settings, report: Report) -> dict[str, QueueStats | None]:
    names = [n for b in bucket_table().buckets for n in (b.queue, b.dead_queue)]
    try:
        found = inspect_queues(cfg.broker_url, names)
    except RecurError as exc:
        report.failures.append(_failure(exc))
        return {}
    note = missing_queues_line(found)
    if note:
        report.notes.append(note)
    return found


def read_store(cfg: Settings, report: Report,
               queues: dict[str, QueueStats | None], exact: bool = False) -> None:
    from scheduler.calls import utcnow
    from scheduler.store import DueStore
    from scheduler.store.control import JobControl

    def depth(name: str) -> int | None:
        stats = queues.get(name)
        return None if stats is None else stats.messages

    depths = {b.queue: depth(b.queue) for b in bucket_table().buckets}
    dead = {b.name: depth(b.dead_queue) for b in bucket_table().buckets}
    try:
        store = DueStore.open(cfg.database_url)
        try:
            started = time.perf_counter()
            found = st.read(store, utcnow(), exact)
            rows = st.collect(store, depths, utcnow(), found)
            report.exact, report.analyzed_at = found.exact, found.analyzed_at
            report.paused = JobControl(store).paused()
            read_histogram(store, report, exact)
            report.fair_share = fair_share_state(store, cfg, utcnow())
            report.store_seconds = round(time.perf_counter() - started, 4)
        finally:
            store.close()
    except Exception as exc:
        report.failures.append(_failure(exc))
        rows = [st.BucketStatus(b.name, None, None, None, None, None, None, None,
                                depths[b.queue]) for b in bucket_table().buckets]
    report.buckets = [st.with_dead_queue(r, dead.get(r.bucket)) for r in rows]


def read_histogram(store: Any, report: Report, exact: bool) -> None:
    """The due-time histogram: every row of the window (``--exact``), or at most
    250 per bucket and minute, the rest estimated (scheduler/store/estimates.py)."""
    from scheduler.calls import utcnow

    names = bucket_table().names
    if exact:
        report.due_histogram = due_histogram(store, names, utcnow(), MINUTES_AHEAD)
        return
    found = bounded_histogram(store, names, utcnow(), MINUTES_AHEAD)
    report.due_histogram, report.due_histogram_estimated = found.counts, found.estimated


def read_destinations(cfg: Settings, report: Report) -> None:
    from routing.redis_client import get_redis
    from routing.reseq.state import Resequencer
    from tasks.flow.limiter import counters

    try:
        reseq = Resequencer(get_redis(), cfg)
        report.destinations = [reseq.status(name) for name in reseq.destinations()]
        report.rate_limited = counters(get_redis(), cfg.key_prefix)
    except Exception as exc:
        report.failures.append(_failure(exc))


def collect(cfg: Settings, exact: bool = False) -> Report:
    report = Report()
    queues = read_queues(cfg, report)
    read_store(cfg, report, queues, exact)
    read_destinations(cfg, report)
    return report


def destination_line(s: Any) -> str:
    """One destination's status on one line (and a second naming it while in outage)."""
    line = (f"destination {s.destination}: next={s.next_seq} assigned={s.assigned} "
            f"buffered={s.buffered} in_flight={s.in_flight} sent={s.sent} skipped={s.skipped} "
            f"dead={s.dead_lettered} late={s.late} "
            + (f"rate_waits={s.rate_waits} " if getattr(s, "rate_waits", 0) else "")
            + f"sender={'running' if s.sender_active else 'idle'}")
    outage = outage_line(s)
    return f"{line}\n{outage}" if outage else line


def outage_line(s: Any) -> str | None:
    """The line naming a destination in outage (None: it is not): since when, what it
    last answered, and which sequence number waits."""
    o = s.outage
    if o is None:
        return None
    since = datetime.fromtimestamp(o.since, UTC).isoformat(timespec="seconds")
    return (f"destination {s.destination} in OUTAGE since {since} ({time.time() - o.since:.0f}s, "
            f"{o.tries} tries held back): {o.reason}; seq {o.seq} and everything after it "
            f"wait (docs/resequencer.md)")


def paused_line(paused: dict[str, datetime]) -> str:
    """``recur status``'s line about paused buckets."""
    if not paused:
        return "paused buckets: none"
    return "paused buckets: " + ", ".join(f"{b} (since {at.isoformat(timespec='seconds')})"
                                          for b, at in sorted(paused.items()))


def histogram_line(bucket: str, counts: Sequence[int], estimated: Sequence[int] = ()) -> str:
    """One bucket's histogram for ``recur status``: the counts (``~``: an estimate), and
    the busiest minute against the mean (1.0x: evenly spread; a burst shows as N x)."""
    total = sum(counts)
    peak = max(counts) * len(counts) / total if total else 0.0
    shown = (f"~{n}" if i in estimated else str(n) for i, n in enumerate(counts))
    return (f"due per minute, next {len(counts)} min, {bucket}: "
            f"{' '.join(shown)} (busiest {peak:.2f}x the mean)")


def histogram_lines(found: dict[str, list[int]] | None,
                    estimated: dict[str, list[int]] | None = None) -> list[str]:
    """A line per bucket with rows due in the next minutes (one line when none has)."""
    if found is None:
        return []
    guessed = estimated or {}
    lines = [histogram_line(b, counts, guessed.get(b, ())) for b, counts in found.items()
             if any(counts)]
    return lines or [f"due per minute, next {MINUTES_AHEAD} min: none"]


def rate_limited_line(found: dict[str, dict[str, int]]) -> str:
    """``recur status``'s line about @rate_limit: per bucket, jobs waiting for their slot
    now (an estimate) and deferred ever."""
    if not found:
        return "rate limited: none"
    return "rate limited: " + ", ".join(
        f"{b} waiting={c.get('waiting', 0)} deferred={c.get('deferred', 0)}"
        for b, c in sorted(found.items()))


def estimates_line(report: Report) -> str | None:
    """What ``~`` and ``≥`` mean, when the store's figures hold any (None: all exact)."""
    if report.exact and not report.due_histogram_estimated:
        return None
    when = ("never analyzed" if report.analyzed_at is None
            else f"analyzed {report.analyzed_at.isoformat(timespec='seconds')}")
    return (f"~: an estimate (PostgreSQL's, due_jobs {when}; per minute, from the rate of "
            f"at most {MINUTE_CAP} rows read); ≥: counted up to {HEAD_CAP}; "
            f"recur status --exact counts every row")


def run(cfg: Settings, as_json: bool, exact: bool = False) -> int:
    """Print the status; the exit code is 2 when a service could not be read."""
    report = collect(cfg, exact)
    if as_json:
        doc = json.loads(st.as_json(report.buckets))
        doc["destinations"] = [asdict(d) for d in report.destinations]
        doc["errors"] = report.failures
        doc["notes"] = report.notes
        doc["paused"] = None if report.paused is None else sorted(report.paused)
        doc["due_histogram"] = report.due_histogram
        doc["due_histogram_estimated"] = report.due_histogram_estimated
        doc["exact"] = report.exact and not report.due_histogram_estimated
        doc["analyzed_at"] = report.analyzed_at and report.analyzed_at.isoformat()
        doc["store_seconds"] = report.store_seconds
        doc["rate_limited"] = report.rate_limited
        doc["fair_share"] = report.fair_share
        click.echo(json.dumps(doc))
    else:
        click.echo(st.as_table(report.buckets))
        if report.paused is not None:
            click.echo(paused_line(report.paused))
        for line in histogram_lines(report.due_histogram, report.due_histogram_estimated):
            click.echo(line)
        note = estimates_line(report)
        if note:
            click.echo(note)
        if report.rate_limited:
            click.echo(rate_limited_line(report.rate_limited))
        for line in fair_share_lines(report.fair_share):
            click.echo(line)
        for d in report.destinations:
            click.echo(destination_line(d))
        if not report.destinations and not report.failures:
            click.echo("no resequencer destinations yet")
    for line in report.notes + report.failures:
        click.echo(f"recur: {line}", err=True)
    sys.stderr.flush()
    return EXIT_ERROR if report.failures else 0
