"""The seed job's SparkSession: ``local[*]`` by default, the cluster under spark-submit."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

APP_NAME = "recur-seed"
#: Spark's cap on the bytes of one Arrow batch sent to Python; at its largest value
#: Spark stops measuring the batch after every row.
ARROW_BATCH_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
UNMEASURED = str(2**31 - 1)


def under_spark_submit() -> bool:
    """Whether spark-submit launched this driver (it then owns master and config)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def seed_session(master: str | None = None) -> SparkSession:
    """Get or create the session: timestamps in UTC, Python workers on this interpreter."""
    builder = SparkSession.builder.appName(APP_NAME).config("spark.sql.session.timeZone", "UTC")
    if master or not under_spark_submit():
        builder = builder.master(master or "local[*]").config("spark.ui.showConsoleProgress",
                                                              "false")
    # PySpark starts its Python workers with $PYSPARK_PYTHON, else `python3` from PATH,
    # which is not this venv: without this the workers cannot import recur.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return builder.getOrCreate()


@contextmanager
def unmeasured_arrow_batches(spark: SparkSession) -> Iterator[None]:
    """Turn off Spark's byte cap on Arrow batches for the block, then put it back.

    With a cap set, Spark works out the batch's size after each row it adds:
    about 1 µs a row, a sixth of the JVM's work on a generated row. Only for
    rows known to be small: a batch still ends at 10,000 rows
    (``spark.sql.execution.arrow.maxRecordsPerBatch``), which the byte cap
    guards for rows read from a file, whose size nothing bounds.
    """
    previous = spark.conf.get(ARROW_BATCH_BYTES)
    assert previous is not None, "Spark's SQL conf has a default for every key it knows"
    spark.conf.set(ARROW_BATCH_BYTES, UNMEASURED)
    try:
        yield
    finally:
        spark.conf.set(ARROW_BATCH_BYTES, previous)
