"""What ``recur status`` prints: the bucket table and a line per finding (text), or one
JSON object (``--json``); then a ``recur: …`` line on stderr per note and per service
that could not be read."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import click

from config.errors import EXIT_ERROR
from config.settings import Settings
from scheduler.status import table as st
from scheduler.status.fair import fair_share_lines
from scheduler.status.report import Report, collect
from scheduler.store.status_readings import HEAD_CAP, MINUTE_CAP, MINUTES_AHEAD


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
