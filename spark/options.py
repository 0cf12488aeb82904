"""The seed job's command line (shared by ``recur seed`` and ``spark-submit``)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

from config.durations import duration_seconds
from config.settings import settings
from spark.extract import FORMATS

SINKS = ("store", "broker")


def parse_duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``15m``, ``2h`` or ``1d``."""
    try:
        seconds = duration_seconds(text, units="smhd")
    except ValueError:
        seconds = math.nan  # refused below, as a negative or infinite one is
    if not 0 <= seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 15m, 2h or 1d")
    return seconds


def parse_start(text: str) -> datetime:
    """An ISO-8601 time; one without an offset is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time") from exc
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


@dataclass(frozen=True)
class SeedOptions:
    """What to seed, and where."""

    input: str | None
    generate: int | None
    format: str | None
    seed: int
    spread: float
    start: datetime | None
    sink: str
    database_url: str
    broker_url: str
    max_connections: int
    rejects: str
    partitions: int | None
    batch: int
    master: str | None
    every: float | None = None
    runs: int | None = None
    jitter: float | None = None

    @property
    def phased(self) -> tuple[float, float] | None:
        """(every, jitter) when first due times go on each key's phase (--jitter)."""
        if self.every is None or not self.jitter:
            return None
        return self.every, self.jitter


class _Parser(argparse.ArgumentParser):
    """argparse whose refusal is one ``recur: …`` line, like every command's, not a usage
    block (``recur seed --help`` prints that); still exit code 2."""

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())[:300]
        self.exit(2, f"recur: seed: {line} (recur seed --help for the options)\n")


def parser() -> argparse.ArgumentParser:
    cfg = settings()
    p = _Parser(
        prog="recur seed", description="Seed the due-jobs store (or the broker) with a "
        "population read from a file or generated, with Spark.")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="PATH", help="Parquet, CSV or JSON lines file or "
                        "directory (one message per row; payload as JSON text in CSV/Parquet).")
    source.add_argument("--generate", metavar="N", type=positive,
                        help="Generate N synthetic messages instead.")
    p.add_argument("--format", choices=FORMATS, help="Input format (default: from the suffix).")
    p.add_argument("--seed", type=int, default=1, help="Generator seed; the same seed gives "
                   "the same rows (default: 1).")
    p.add_argument("--spread", type=parse_duration, default=3600.0, metavar="DURATION",
                   help="Spread first due times over this window (default: 1h).")
    p.add_argument("--start", type=parse_start, metavar="TIME",
                   help="Start of the spread window, ISO-8601 (default: now).")
    p.add_argument("--sink", choices=SINKS, default="store", help="store: the due-jobs "
                   "table (default); broker: publish the messages as Celery tasks now.")
    p.add_argument("--database-url", default=cfg.database_url,
                   help="Due-jobs store (default: RECUR_DATABASE_URL).")
    p.add_argument("--broker-url", default=cfg.broker_url,
                   help="Broker for --sink broker (default: RECUR_BROKER_URL).")
    p.add_argument("--max-connections", type=positive, default=4,
                   help="Most database or broker connections open at once (default: 4; "
                   "SQLite always uses 1).")
    p.add_argument("--rejects", default="seed-rejects", metavar="PATH",
                   help="Directory for rejected rows as JSON lines (default: seed-rejects).")
    p.add_argument("--partitions", type=positive, help="Partitions of a generated "
                   "population (default: one per 250,000 rows, at least one per core).")
    p.add_argument("--batch", type=positive, default=1000,
                   help="Messages per confirmed batch with --sink broker (default: 1000).")
    p.add_argument("--master", help="Spark master (default: local[*], or spark-submit's).")
    p.add_argument("--every", type=parse_duration, metavar="DURATION",
                   help="With --generate: messages recur this often (payload 'every').")
    p.add_argument("--runs", type=positive, help="With --every: runs of each message "
                   "(default: forever).")
    p.add_argument("--jitter", type=fraction, metavar="FRACTION",
                   help="With --every: each message's phase, 0 to 1 of the interval, from a "
                   "hash of its id; first due times go on it (replaces --spread) and the "
                   "worker keeps them there (payload 'jitter', docs/flow-control.md).")
    return p


def fraction(text: str) -> float:
    """A number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction from 0 to 1")
    return value


def parse_options(argv: list[str]) -> SeedOptions:
    """Parse the command line (argparse exits with a usage message on a bad one)."""
    p = parser()
    opts = SeedOptions(**vars(p.parse_args(argv)))
    if opts.every is not None and opts.generate is None:
        p.error("--every only applies to --generate (an input file's payloads say it)")
    if opts.runs is not None and opts.every is None:
        p.error("--runs needs --every")
    if opts.jitter is not None and opts.every is None:
        p.error("--jitter needs --every")
    return opts
