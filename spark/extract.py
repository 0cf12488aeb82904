"""Read the seed input (Parquet, CSV or JSON lines) into the transform's raw columns."""

from __future__ import annotations

from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from config.errors import SeedInputError
from spark.parse import parse_json_lines, parse_table

FORMATS = ("parquet", "csv", "json")
SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv",
            ".json": "json", ".jsonl": "json", ".ndjson": "json"}


def detect_format(path: str) -> str:
    """The format named by the file's suffix (``--format`` overrides it)."""
    fmt = SUFFIXES.get(Path(path.rstrip("/")).suffix.lower())
    if fmt is None:
        raise SeedInputError(f"cannot tell the format of {path!r} from its suffix "
                             f"(known: {', '.join(SUFFIXES)}): give --format "
                             f"{'|'.join(FORMATS)}")
    return fmt


def read_input(spark: SparkSession, path: str, fmt: str | None = None) -> DataFrame:
    """The raw rows of ``path``; JSON lines are read as text so a bad line is a reject."""
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise SeedInputError(f"unknown input format {fmt!r} (known: {', '.join(FORMATS)})")
    try:
        if fmt == "json":
            lines = spark.read.text(path)
            return parse_json_lines(lines.where(F.trim(F.col("value")) != ""))
        if fmt == "csv":
            return parse_table(spark.read.option("header", True).csv(path))
        return parse_table(spark.read.parquet(path))
    except AnalysisException as exc:
        raise SeedInputError(f"cannot read {fmt} input {path!r}: {exc}") from exc
