"""The seed job: extract (read or generate) → transform (check) → load, with counts.

Rejected rows never fail the job: they go to the rejects output with their
reason. The job prints a progress line while it runs and, at the end, how
many rows were read, loaded, rejected and already present.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from config.errors import RecurError
from config.settings import settings
from scheduler.store.bulk import BulkSink, open_bulk, register_task
from scheduler.store.bulk_indexes import build_indexes, defer_indexes
from scheduler.store.connection import is_sqlite, make_engine
from scheduler.store.migrate import check_schema
from spark.extract import read_input
from spark.generate import generate
from spark.load import (
    LinesOf,
    message_lines,
    partition_loader,
    rejects_of,
    run_loader,
    sink_frame,
    store_frame,
    store_lines,
)
from spark.options import SeedOptions, parse_options
from spark.preflight import check_invocation, guard_rejects_path
from spark.progress import Progress
from spark.session import seed_session, unmeasured_arrow_batches
from spark.transform import REJECT_COLUMNS, TASK, Rules, check, message_json

REJECT_SCHEMA = ", ".join(f"{c} string" for c in REJECT_COLUMNS)
#: Rows per partition of a generated population: small steps of progress and retry.
GENERATED_PER_PARTITION = 250_000


@dataclass(frozen=True)
class SeedReport:
    """The counts the job prints at the end."""

    read: int
    loaded: int
    rejected: int
    present: int
    seconds: float
    sink: str
    rejects_path: str

    def line(self) -> str:
        rate = self.read / self.seconds if self.seconds else 0.0
        return (f"seed: read {self.read}, loaded {self.loaded}, rejected {self.rejected}, "
                f"already present {self.present} ({self.sink}) in {self.seconds:.1f}s "
                f"({rate:,.0f} rows/s); "
                + (f"rejects in {self.rejects_path}" if self.rejected else "no rejects"))


def source_frame(spark: SparkSession, opts: SeedOptions, rules: Rules) -> DataFrame:
    """The raw rows: the input file's, or a generated population's."""
    if opts.input is not None:
        return read_input(spark, opts.input, opts.format)
    assert opts.generate is not None, "parse_options requires --input or --generate"
    partitions = opts.partitions or max(spark.sparkContext.defaultParallelism,
                                        -(-opts.generate // GENERATED_PER_PARTITION))
    return generate(spark, opts.generate, opts.seed, partitions, rules.kinds,
                    opts.every, opts.runs, opts.jitter)


#: Rows per store transaction: big enough to amortise a commit (and a merge), small enough
#: that a failed chunk is cheap to redo.
STORE_CHUNK = 100_000
SQLITE_CHUNK = 5_000


def check_store(url: str) -> None:
    """Fail once, in the driver, if the store's schema is missing or old."""
    engine = make_engine(url)
    try:
        check_schema(engine)
    finally:
        engine.dispose()


def broker_sink(url: str) -> Callable[[], BulkSink]:
    def open_sink() -> BulkSink:
        from spark.publish import BrokerPublisher

        return BrokerPublisher(url)

    return open_sink


def store_sink(url: str) -> Callable[[], BulkSink]:
    return lambda: open_bulk(url)


@dataclass(frozen=True)
class LoadPlan:
    """What the loader runs: the sink frame, its lines, the sink, chunk size and
    how many connections it may hold."""

    frame: DataFrame
    lines_of: LinesOf
    open_sink: Callable[[], BulkSink]
    chunk: int
    max_connections: int


def load_plan(opts: SeedOptions, checked: DataFrame) -> LoadPlan:
    """The load of ``checked`` into the sink ``opts`` names."""
    if opts.sink == "broker":
        return LoadPlan(sink_frame(checked, {"line": message_json()}), message_lines,
                        broker_sink(opts.broker_url), opts.batch, opts.max_connections)
    check_store(opts.database_url)
    frame = store_frame(checked, opts.start or datetime.now(UTC), opts.spread, opts.phased)
    lines = store_lines(register_task(opts.database_url, TASK))
    if is_sqlite(opts.database_url):  # one writer: more connections would only queue
        return LoadPlan(frame, lines, store_sink(opts.database_url), SQLITE_CHUNK, 1)
    return LoadPlan(frame, lines, store_sink(opts.database_url), STORE_CHUNK,
                    opts.max_connections)


def write_rejects(spark: SparkSession, output: DataFrame, path: str) -> int:
    """Write the rejected rows as JSON lines under ``path``; return how many there were.

    With none, nothing is created (an earlier run's local rejects output at ``path`` is
    removed, so what is there is always this run's).
    """
    rejected = rejects_of(output)
    if rejected.isEmpty():
        local = Path(path)
        if "://" not in path and local.is_dir():
            shutil.rmtree(local)  # guard_rejects_path checked it is a rejects output
        return 0
    rejected.write.mode("overwrite").json(path)
    return spark.read.schema(REJECT_SCHEMA).json(path).count()


def run_seed(spark: SparkSession, opts: SeedOptions,
             emit: Callable[[str], None] = print) -> SeedReport:
    """Seed the population described by ``opts``; return the counts."""
    started = time.monotonic()
    guard_rejects_path(opts.rejects)
    rules = Rules.from_settings(settings())
    checked = check(source_frame(spark, opts, rules), rules)
    plan = load_plan(opts, checked)
    # A generated row is under 300 bytes: its batches need no byte cap.
    small_rows = unmeasured_arrow_batches(spark) if opts.generate else nullcontext()
    # An empty store is loaded without its secondary indexes, built after (bulk_indexes.py).
    deferred = defer_indexes(opts.database_url) if opts.sink == "store" else []
    with small_rows, Progress(spark.sparkContext, emit) as progress:
        progress.step = f"checking and loading into the {opts.sink}"
        try:
            result, output = run_loader(
                plan.frame, partition_loader(plan.open_sink, plan.chunk, plan.lines_of),
                plan.max_connections)
        finally:
            if deferred:
                progress.step = f"building {len(deferred)} indexes"
                build_indexes(opts.database_url)
        progress.step = "writing rejects"
        try:
            rejected = write_rejects(spark, output, opts.rejects)
        finally:
            output.unpersist()
    return SeedReport(read=result.offered + rejected, loaded=result.loaded, rejected=rejected,
                      present=result.present, seconds=time.monotonic() - started,
                      sink=opts.sink, rejects_path=opts.rejects)


def main(argv: list[str]) -> int:
    """Run the seed job from a command line; 0 on success, 2 on our errors."""
    opts = parse_options(argv)
    try:  # what can be refused before Spark starts (and prints its banner)
        check_invocation(opts)
    except RecurError as exc:
        print(f"recur: seed: {exc}", file=sys.stderr)
        return 2
    spark = seed_session(opts.master)
    try:
        report = run_seed(spark, opts, emit=lambda line: print(line, flush=True))
    except RecurError as exc:
        print(f"recur seed: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    print(report.line(), flush=True)
    return 0
