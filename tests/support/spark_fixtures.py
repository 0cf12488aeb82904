"""The one SparkSession of a test run (local[2], no UI, few shuffle partitions).

Starting Spark costs seconds, so every test that needs it shares this
session; the seed job's ``getOrCreate`` finds it too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """A local Spark session for the whole run, stopped at its end."""
    from pyspark.sql import SparkSession

    # Python workers must run this venv's interpreter to import recur.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[2]").appName("recur-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
