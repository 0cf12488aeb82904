"""The seed job's SparkSession: ``local[*]`` by default, the cluster under spark-submit."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

APP_NAME = "recur-seed"


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
