"""Source records → the transform's raw columns (pure DataFrame → DataFrame).

Every source format becomes the same *raw* frame, so one transform validates
them all:

==============  ===========================================================
column          holds
==============  ===========================================================
``source``      the record as read, for the rejects output
``problem``     ``"field: problem"`` found while parsing (malformed line, not
                an object, unknown field), else NULL
``non_strings`` names of id/user_id/bucket/kind fields present with a
                non-string value (``validate_message`` refuses those)
``id`` ...      ``id``, ``user_id``, ``bucket``, ``kind`` when strings, else NULL
``payload``     the payload as JSON text; NULL when the field is missing
``due_at``      optional first due time as text (ISO-8601), else NULL
==============  ===========================================================
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from config.errors import SeedInputError
from routing.messages import KNOWN_FIELDS

#: Message fields plus the seed's own optional first due time.
SEED_FIELDS = tuple(sorted(KNOWN_FIELDS | {"due_at"}))
STRING_FIELDS = ("id", "user_id", "bucket", "kind")
RAW_COLUMNS = ("source", "problem", "non_strings", *STRING_FIELDS, "payload", "due_at")


def strict_parse_json(text: Column) -> Column:
    """``try_parse_json`` that refuses text after the value (NULL), as ``json.loads`` does.

    Spark's parser stops at the end of the first value: ``{"a":1} x``, two objects on
    one line, ``""x""`` all parse as their first value, and the rest is lost (or, kept as
    written, stored as JSON PostgreSQL cannot read). Inside ``[…]`` only a ``,`` or a
    ``]`` may follow a value: the text is one value when the wrapped array has exactly
    one element, unless a ``]`` of the text closed it early, which ``{"v":…}`` around it
    refuses (parsed only for text that holds a ``]``).
    """
    wrapped = F.try_parse_json(F.concat(F.lit("["), text, F.lit("]")))
    one = (F.try_variant_get(wrapped, "$[0]", "variant").isNotNull()
           & F.try_variant_get(wrapped, "$[1]", "variant").isNull())
    closed_early = F.when(text.contains("]"), F.try_parse_json(
        F.concat(F.lit('{"v":'), text, F.lit("}"))).isNull()).otherwise(F.lit(False))
    return F.when(one & ~closed_early, F.try_variant_get(wrapped, "$[0]", "variant"))


def _json_field(doc: Column, name: str) -> Column:
    return F.try_variant_get(doc, f"$.{name}", "variant")


def _is_string(value: Column) -> Column:
    return F.schema_of_variant(value) == F.lit("STRING")


def _non_strings(doc: Column) -> Column:
    """Names of the string fields (and due_at) present, not JSON null, with another JSON
    type: such a due_at is refused, not dropped for a spread one."""
    flags = [F.when(_json_field(doc, n).isNotNull() & ~F.is_variant_null(_json_field(doc, n))
                    & ~_is_string(_json_field(doc, n)), F.lit(n))
             for n in (*STRING_FIELDS, "due_at")]
    return F.filter(F.array(*flags), lambda name: name.isNotNull())


def _line_problem(line: Column, doc: Column, utf8: Column) -> Column:
    """The first problem of a line in validate_message's order, or NULL. Bytes that are
    not UTF-8 come first: the parser would read them as U+FFFD, a changed id or payload."""
    unknown = F.array_sort(F.array_except(F.json_object_keys(line),
                                          F.array(*[F.lit(f) for f in SEED_FIELDS])))
    return (F.when(~utf8, F.lit("line: not valid UTF-8 text"))
            .when(doc.isNull(), F.lit("line: not a JSON document"))
            .when(~F.schema_of_variant(doc).startswith("OBJECT"),
                  F.lit("message: must be a JSON object"))
            .when(F.size(unknown) > 0, F.concat(
                F.element_at(unknown, 1), F.lit(": unknown field (allowed: "),
                F.lit(", ".join(SEED_FIELDS)), F.lit(")"))))


def parse_json_lines(lines: DataFrame) -> DataFrame:
    """Raw columns from a frame of JSON lines (one string column named ``value``)."""
    doc = strict_parse_json(F.col("value"))
    parsed = lines.select(F.col("value").alias("raw"), doc.alias("doc"),
                          F.is_valid_utf8("value").alias("utf8"))
    d = F.col("doc")

    def string(name: str) -> Column:
        value = _json_field(d, name)
        return F.when(_is_string(value), value.cast("string")).alias(name)

    return parsed.select(  # the rejects output gets a bad line's bytes as U+FFFD
        F.when(F.col("utf8"), F.col("raw")).otherwise(F.make_valid_utf8("raw")).alias("source"),
        _line_problem(F.col("raw"), d, F.col("utf8")).alias("problem"),
        _non_strings(d).alias("non_strings"),
        *[string(n) for n in STRING_FIELDS],
        F.to_json(_json_field(d, "payload")).alias("payload"),
        F.when(_is_string(_json_field(d, "due_at")),
               _json_field(d, "due_at").cast("string")).alias("due_at"),
    )


def parse_table(table: DataFrame, corrupt: str | None = None) -> DataFrame:
    """Raw columns from a tabular source (CSV, Parquet): one column per field.

    ``payload`` holds JSON text; a missing column counts as missing in every
    row. An unknown column is a SeedInputError: the whole input is wrong.
    ``corrupt`` names the CSV reader's column for a record that is not one
    row of the header's columns (a reject, not a row cut to fit); a text
    column that is not UTF-8 (Parquet's strings are bytes) is a reject too.
    """
    fields = [c for c in table.columns if c != corrupt]
    unknown = sorted(set(fields) - set(SEED_FIELDS))
    if unknown:
        raise SeedInputError(f"input column {unknown[0]!r} is not a seed field "
                             f"(allowed: {', '.join(SEED_FIELDS)})")
    types = dict(table.dtypes)
    typed = [n for n in STRING_FIELDS if n in types and types[n] != "string"]

    def column(name: str) -> Column:
        """The field as text; NULL when missing, or when not a string (then in non_strings)."""
        if name not in types or name in typed:
            return F.lit(None).cast(StringType()).alias(name)
        return F.col(name).cast(StringType()).alias(name)

    flags = [F.when(F.col(n).isNotNull(), F.lit(n)) for n in typed]
    problems = [F.when(~F.is_valid_utf8(n), F.lit(f"{n}: not valid UTF-8 text"))
                for n in fields if types[n] == "string"]
    source = F.to_json(F.struct(*[F.col(c) for c in fields]))
    if corrupt is not None:
        problems.insert(0, F.when(F.col(corrupt).isNotNull(), F.lit(
            f"line: not a CSV record of the header's {len(fields)} columns")))
        source = F.coalesce(F.col(corrupt), source)
    return table.select(
        source.alias("source"),
        F.coalesce(*problems, F.lit(None).cast(StringType())).alias("problem"),
        F.filter(F.array(*flags).cast("array<string>"),
                 lambda name: name.isNotNull()).alias("non_strings"),
        *[column(n) for n in (*STRING_FIELDS, "payload", "due_at")],
    )
