"""Load the checked rows per partition (into the store or onto the broker) in one pass.

Spark computes each checked row once and hands it to Python in Arrow
batches (``mapInArrow``, no per-row Python objects): the columns of a valid
row's due-jobs row (store; ``spark.copy_lines`` makes them COPY lines) or its
task arguments (broker), or the reject columns of a bad one. A partition is
one sink with one connection. Spark
runs at most one task per core at once, so with more cores than
``max_connections`` the frame is coalesced to ``max_connections``
partitions, as Spark's own JDBC writer does with its ``numPartitions``;
otherwise partitions stay small, so a retried task redoes little and the
progress line moves often. Each partition returns its rejects and one count record;
the output is kept (persisted) so the driver reads the counts and writes the
rejects without loading twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from scheduler.store.bulk import BulkResult, BulkSink, PostgresBulk
from spark.copy_lines import LINE_COLUMNS, args_json, due_lines
from spark.transform import REJECT_COLUMNS, TASK, first_due

#: due_at as text PostgreSQL and Python both read, with its offset (Z).
DUE_TEXT = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
COUNT, REJECT = "count", "reject"
DUE_COLUMNS = ("job_key", "task", "bucket", "args", "due_at")
DUE_SCHEMA = "job_key string, task string, bucket string, args string, due_at timestamp"

OUTPUT_NAMES = ("record", *REJECT_COLUMNS, "offered", "loaded")
OUTPUT_SCHEMA = ("record string, source string, field string, reason string, "
                 "offered long, loaded long")

SinkFactory = Callable[[], BulkSink]
#: The lines to load of a chunk of valid rows (those whose first column is set), in
#: the order to load them.
LinesOf = Callable[[pa.RecordBatch], pa.Array]
#: The order a chunk goes into the store in: the drain index's (bucket, due_at).
DRAIN_ORDER = [("bucket", "ascending"), ("due_text", "ascending")]


def store_frame(checked: DataFrame, start: datetime, spread_seconds: float,
                phased: tuple[float, float] | None = None) -> DataFrame:
    """The sink frame for the store: ``LINE_COLUMNS`` of valid rows (due times
    placed and written as text), the reject columns of the others."""
    value = {"job_key": F.col("id"), "bucket": F.col("resolved_bucket"),
             "due_text": F.date_format(first_due(start, spread_seconds, phased), DUE_TEXT)}
    return sink_frame(checked, {name: value.get(name, F.col(name)) for name in LINE_COLUMNS})


def due_jobs(checked: DataFrame, start: datetime, spread_seconds: float,
             phased: tuple[float, float] | None = None) -> DataFrame:
    """The valid rows as due-jobs rows (``DUE_COLUMNS``): the transform's output as a
    frame, ``args`` encoded by ``spark.copy_lines`` exactly as the loader's COPY
    lines carry it (the loader itself streams the lines, not this frame)."""
    rows = checked.where(F.col("reason").isNull()).select(
        F.col("id").alias("job_key"), F.lit(TASK).alias("task"),
        F.col("resolved_bucket").alias("bucket"), "user_id", "kind", "payload_text",
        first_due(start, spread_seconds, phased).alias("due_at"))

    def encode(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            args = args_json(batch.column("user_id"), batch.column("payload_text"),
                             batch.column("kind"))
            yield pa.RecordBatch.from_arrays(
                [batch.column(name) if name != "args" else args for name in DUE_COLUMNS],
                names=list(DUE_COLUMNS))

    return rows.mapInArrow(encode, DUE_SCHEMA)


def store_lines(task_code: int) -> LinesOf:
    """The COPY lines of a chunk of the store sink frame's valid rows, for the task
    coded ``task_code``, sorted in the drain index's order.

    Rows in their own order (due times spread by a hash) insert into random
    pages of the ``(bucket, due_at)`` index; once it outgrows the database's
    shared buffers, most inserts first read a page back and write one out.
    Sorted, a chunk walks the index once.
    """
    def lines(chunk: pa.RecordBatch) -> pa.Array:
        return due_lines(chunk, task_code).take(pc.sort_indices(chunk, sort_keys=DRAIN_ORDER))

    return lines


def message_lines(batch: pa.RecordBatch) -> pa.Array:
    """The broker sink frame's lines: the task arguments themselves."""
    return batch.column(0)


def sink_frame(checked: DataFrame, columns: dict[str, Column]) -> DataFrame:
    """``columns`` of valid rows (the first one never NULL), the reject columns of the
    others."""
    valid = F.col("reason").isNull()
    return checked.select(*[F.when(valid, c).alias(name) for name, c in columns.items()],
                          *[F.when(~valid, F.col(c)).alias(c) for c in REJECT_COLUMNS])


def _records(kind: str, rows: pa.RecordBatch | None, total: BulkResult | None,
             text: pa.DataType) -> pa.RecordBatch:
    """Output records: the rejects of ``rows``, or one count record of ``total``."""
    n = rows.num_rows if rows is not None else 1
    columns = ([rows.column(c).cast(text) for c in REJECT_COLUMNS] if rows is not None
               else [pa.nulls(1, text)] * 3)
    counts = ([pa.array([total.offered]), pa.array([total.loaded])] if total is not None
              else [pa.nulls(n, pa.int64())] * 2)
    return pa.RecordBatch.from_arrays([pa.array([kind] * n, text), *columns, *counts],
                                      names=list(OUTPUT_NAMES))


def copy_block(lines: pa.Array) -> memoryview:
    """The text of a string array without nulls as one buffer, without copying.

    Arrow keeps a string array's values end to end in one buffer, and every
    COPY line ends with its newline: the slice the array spans is exactly the
    COPY text of its rows (no Python string per row, no join).
    """
    _, offsets, values = lines.buffers()
    ends = memoryview(offsets).cast("q" if pa.types.is_large_string(lines.type) else "i")
    return memoryview(values)[ends[lines.offset]:ends[lines.offset + len(lines)]]


def _load(sink: BulkSink, lines: pa.Array) -> BulkResult:
    if isinstance(sink, PostgresBulk):
        return sink.load_copy(copy_block(lines), len(lines))
    return sink.load(lines.to_pylist())


def partition_loader(open_sink: SinkFactory, chunk: int, lines_of: LinesOf) -> Callable[
        [Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The partition function: load valid rows ``chunk`` at a time (``lines_of`` each
    chunk), pass rejects through."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        total, text = BulkResult(), pa.string()
        pending: list[pa.RecordBatch] = []
        held = 0
        with open_sink() as sink:
            for batch in batches:
                text = batch.column("source").type
                valid = pc.is_valid(batch.column(0))
                bad = batch.filter(pc.invert(valid))
                if bad.num_rows:
                    yield _records(REJECT, bad, None, text)
                good = batch.filter(valid)
                pending.append(good)
                held += good.num_rows
                while held >= chunk:
                    rows = pa.concat_batches(pending)
                    total += _load(sink, lines_of(rows.slice(0, chunk)))
                    pending, held = [rows.slice(chunk)], held - chunk
            if held:
                total += _load(sink, lines_of(pa.concat_batches(pending)))
        yield _records(COUNT, None, total, text)

    return run


def run_loader(frame: DataFrame, loader: Callable[[Iterable[pa.RecordBatch]],
                                                  Iterator[pa.RecordBatch]],
               max_connections: int) -> tuple[BulkResult, DataFrame]:
    """Load every partition, at most ``max_connections`` at once.

    Returns the summed counts and the persisted output, whose REJECT records
    the caller writes and then unpersists.
    """
    slots = frame.sparkSession.sparkContext.defaultParallelism
    if frame.rdd.getNumPartitions() > max_connections and slots > max_connections:
        frame = frame.coalesce(max_connections)
    output = frame.mapInArrow(loader, OUTPUT_SCHEMA).persist(StorageLevel.MEMORY_AND_DISK)
    counts = output.where(F.col("record") == COUNT).agg(
        F.sum("offered").alias("offered"), F.sum("loaded").alias("loaded")).first()
    assert counts is not None, "an aggregate always has one row"
    return BulkResult(int(counts["offered"] or 0), int(counts["loaded"] or 0)), output


def rejects_of(output: DataFrame) -> DataFrame:
    """The REJECT records of the loader output as reject rows."""
    return output.where(F.col("record") == REJECT).select(*REJECT_COLUMNS)
