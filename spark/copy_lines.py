"""COPY text lines of due-jobs rows, built from Arrow columns in the Python worker.

Spark hands the loader the checked rows' columns; the line
``key<TAB>task code<TAB>bucket<TAB>args<TAB>due\\n`` (``scheduler.store.bulk.copy_line``)
is assembled here with Arrow's vectorised string kernels. Spark's own string
expressions allocate a new string per operation and per row; building the line
in the JVM cost more than all of the checks together.

``args`` is THE row-argument format (scheduler/wire.py) of a one-message call,
its array form ``[user_id, payload]`` or ``[user_id, payload, kind]`` (wire's
``MESSAGE_ARRAY`` order and ``SEPARATORS``), the payload already compact JSON
text; it is the form ``scheduler.wire.encode_call`` writes, built here a column
at a time.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from scheduler.store.bulk import COPY_ESCAPES
from scheduler.wire import SEPARATORS

#: Columns of the store's sink frame a valid row fills (NULL in a rejected row).
LINE_COLUMNS = ("job_key", "bucket", "user_id", "kind", "payload_text", "due_text")
#: A character JSON must escape inside a string (RE2 syntax).
JSON_ESCAPED = r'["\\\x00-\x1f]'
#: A character COPY's text format must escape.
COPY_ESCAPED = r"[\\\t\n\r]"


def _any(mask: pa.Array) -> bool:
    return bool(pc.any(mask).as_py())


def json_strings(values: pa.Array) -> pa.Array:
    """Each string as JSON text, escaped as ``json.dumps(ensure_ascii=False)`` does.

    Nearly every id needs no escape and is only quoted; the rare rest go
    through ``json.dumps`` one by one. NULL stays NULL.
    """
    quoted = pc.binary_join_element_wise('"', values, '"', "")
    needs = pc.fill_null(pc.match_substring_regex(values, JSON_ESCAPED), False)
    if not _any(needs):
        return quoted
    fixed = [json.dumps(v, ensure_ascii=False) for v in values.filter(needs).to_pylist()]
    return pc.replace_with_mask(quoted, needs, pa.array(fixed, quoted.type))


def copy_escape(values: pa.Array) -> pa.Array:
    """Each string escaped for COPY's text format (``scheduler.store.bulk.copy_field``)."""
    if not _any(pc.fill_null(pc.match_substring_regex(values, COPY_ESCAPED), False)):
        return values
    for raw, escaped in COPY_ESCAPES:
        values = pc.replace_substring(values, raw, escaped)
    return values


def args_json(user_id: pa.Array, payload_text: pa.Array, kind: pa.Array) -> pa.Array:
    """The compact call arguments ``[user_id, payload(, kind)]`` of each row (a NULL
    kind is left out, as ``encode_call`` leaves out an absent one)."""
    comma = SEPARATORS[0]
    kind_item = pc.fill_null(pc.binary_join_element_wise(comma, json_strings(kind), ""), "")
    return pc.binary_join_element_wise("[", json_strings(user_id), comma, payload_text,
                                       kind_item, "]", "")


def due_lines(batch: pa.RecordBatch, task_code: int) -> pa.Array:
    """The COPY lines of a batch of valid rows (``LINE_COLUMNS`` without NULLs)."""
    col = {name: batch.column(name) for name in LINE_COLUMNS}
    args = args_json(col["user_id"], col["payload_text"], col["kind"])
    return pc.binary_join_element_wise(
        copy_escape(col["job_key"]), str(task_code), copy_escape(col["bucket"]),
        copy_escape(args), pc.binary_join_element_wise(col["due_text"], "\n", ""), "\t")
