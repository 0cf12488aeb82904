"""Read the seed input (Parquet, CSV or JSON lines) into the transform's raw columns."""

from __future__ import annotations

from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from config.errors import SeedInputError
from spark.parse import parse_json_lines, parse_table

FORMATS = ("parquet", "csv", "json")
#: The CSV reader's column for a record that does not fit the header (PERMISSIVE mode).
CORRUPT = "_recur_corrupt_record"
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
            return read_csv(spark, path)
        return parse_table(spark.read.parquet(path))
    except AnalysisException as exc:
        raise SeedInputError(f"cannot read {fmt} input {path!r}: {exc}") from exc


def read_csv(spark: SparkSession, path: str) -> DataFrame:
    """A CSV input's raw columns: each a string, named by the header; a record with more
    or fewer fields than the header is a reject (Spark would cut or pad it to fit).

    The CSV reader decodes bytes that are not UTF-8 as U+FFFD, so a row could not tell;
    such an input is refused whole, before anything is loaded (one more pass over it).
    """
    lines = spark.read.text(path)
    bad = lines.where(~F.is_valid_utf8("value")).select(
        F.make_valid_utf8("value").alias("line")).limit(1).collect()
    if bad:
        raise SeedInputError(f"csv input {path!r} is not UTF-8 text: a line reads "
                             f"{bad[0]['line'][:60]!r} (U+FFFD where the bytes are not)")
    header = spark.read.option("header", True).csv(path).columns
    if not header:
        raise SeedInputError(f"csv input {path!r} has no header line (the column names)")
    schema = StructType([StructField(c, StringType()) for c in header]
                        + [StructField(CORRUPT, StringType())])
    table = (spark.read.option("header", True).option("mode", "PERMISSIVE")
             .option("columnNameOfCorruptRecord", CORRUPT).schema(schema).csv(path))
    return parse_table(table, CORRUPT)
