"""The seed job's pure transform: raw rows → checked rows and rejects, first due times.

Spark columns only (no Python UDF), so it runs in the JVM at full speed; the
store's ``args`` text is assembled from these columns by ``spark.copy_lines``
(see ``spark.load.due_jobs``). The
rules are ``routing.messages.validate_message``'s, checked in the same order
so a row is rejected for the same field: id and user_id non-empty strings of
at most MAX_ID_LENGTH characters, exactly one of a known bucket or a known
kind, a payload present and at most ``max_payload_bytes`` as compact ASCII
JSON (``json.dumps``'s encoding), and an optional ISO-8601 first due time.
Then what ``apply_async`` checks of a store row (scheduler/bounds.py): the id
is the row's job key, so at most ``max_job_key_bytes`` UTF-8 bytes without
control characters, and no NUL in the user id or the payload (PostgreSQL's
json cannot hold one; a COPY batch would fail whole on it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from config.settings import Settings
from config.text import CONTROL as BOUNDS_CONTROL
from config.text import NUL_REASON
from routing.jitter import HASH_BITS, HASH_HEX, SLACK
from routing.messages import MAX_ID_LENGTH
from spark.parse import strict_parse_json
from spark.schedule_checks import overflow_check, schedule_checks, schedule_columns

#: The task every seeded job runs; the scheduler publishes ``args`` to it as-is.
TASK = "tasks.process_message"
REJECT_COLUMNS = ("source", "field", "reason")
#: Blank as Python's str.strip sees it: Unicode white space and the separators \x1c-\x1f.
BLANK = r"(?U)^[\s\x1c-\x1f]*$"
#: Printable ASCII but space and backslash: JSON text of this form is already compact.
#: (``\z``, not ``$``: Java's ``$`` also matches before a final newline.)
COMPACT_ASCII = r"^[!-\[\]-~]*\z"


@dataclass(frozen=True)
class Rules:
    """What the transform accepts: the bucket table, the kinds and the payload limit."""

    buckets: tuple[str, ...]
    kinds: Mapping[str, str]
    max_payload_bytes: int
    max_job_key_bytes: int = 512
    min_every: float = 0.1

    @classmethod
    def from_settings(cls, cfg: Settings) -> Rules:
        return cls(cfg.buckets.names, dict(cfg.kinds), cfg.max_payload_bytes,
                   cfg.max_job_key_bytes, cfg.min_every)


Check = tuple[Column, Column]


def _blank(value: Column) -> Column:
    """Whether ``value`` is empty or white space; a printable ASCII first character is not."""
    first = F.ascii(value)
    return F.when((first > 32) & (first < 127), F.lit(False)).otherwise(value.rlike(BLANK))


def _string_checks(name: str) -> list[Check]:
    value = F.col(name)
    return [
        (value.isNull() & F.array_contains("non_strings", name),
         F.lit(f"{name}: must be a non-empty string, got another JSON type")),
        (value.isNull(), F.lit(f"{name}: missing")),
        (_blank(value), F.lit(f"{name}: must be a non-empty string, got a blank one")),
        (F.char_length(value) > MAX_ID_LENGTH,
         F.lit(f"{name}: longer than {MAX_ID_LENGTH} characters")),
    ]


def _present(name: str) -> Column:
    return F.col(name).isNotNull() | F.array_contains("non_strings", name)


def _kind_bucket(rules: Rules) -> Column:
    """The bucket of the row's kind (NULL for an unknown or absent kind)."""
    pairs = [F.lit(x) for kind, bucket in sorted(rules.kinds.items()) for x in (kind, bucket)]
    return F.element_at(F.create_map(*pairs), F.col("kind")) if pairs else F.lit(None)


def _bucket_checks(rules: Rules) -> list[Check]:
    known = F.coalesce(F.col("bucket").isin(*rules.buckets), F.lit(False))
    return [
        (_present("bucket") & _present("kind"),
         F.lit("bucket: give either 'bucket' or 'kind', not both")),
        (_present("bucket") & ~known, F.concat(
            F.lit("bucket: unknown bucket "), F.coalesce(F.col("bucket"), F.lit("(not a string)")),
            F.lit(f" (known: {', '.join(rules.buckets)})"))),
        (_present("kind") & _kind_bucket(rules).isNull(), F.concat(
            F.lit("kind: unknown kind "), F.coalesce(F.col("kind"), F.lit("(not a string)")),
            F.lit(f" (known: {', '.join(sorted(rules.kinds))})"))),
        (~_present("bucket") & ~_present("kind"),
         F.lit("bucket: missing: give 'bucket' or 'kind'")),
    ]


def ascii_json_size(compact: Column) -> Column:
    """Bytes of compact JSON text once non-ASCII characters are \\u-escaped.

    ``json.dumps`` (validate_message's measure) writes each non-ASCII character
    as a 6-byte ``\\uXXXX`` escape, two of them above U+FFFF.
    """
    non_ascii = F.regexp_replace(compact, r"[\x00-\x7F]", "")
    astral = F.char_length(F.regexp_replace(non_ascii, r"[\x{0}-\x{FFFF}]", ""))
    escaped = (F.char_length(compact) - F.char_length(non_ascii)
               + 6 * (F.char_length(non_ascii) - astral) + 12 * astral)
    # All ASCII (the usual case): one byte per character, no regex needed.
    return F.when(F.octet_length(compact) == F.char_length(compact),
                  F.octet_length(compact)).otherwise(escaped)


def compact_payload() -> Column:
    """The parsed payload as compact JSON text.

    A payload that is printable ASCII with no space and no backslash has no
    white space to drop and no escape to rewrite: once it parses, it already
    is its compact form and is kept as written (numbers as spelled, e.g.
    ``1.50``, which decode to the same value). Re-encoding through ``to_json``
    costs about as much as the rest of the transform, and generated and
    machine-written payloads are nearly all of this form.
    """
    payload = F.col("payload")
    parsed = F.col("payload_json")
    return F.when(parsed.isNotNull() & payload.rlike(COMPACT_ASCII), payload).otherwise(
        F.to_json(parsed))


def _payload_checks(rules: Rules) -> list[Check]:
    size = ascii_json_size(F.col("payload_text"))
    return [
        (F.col("payload").isNull(), F.lit("payload: missing (use null for no payload)")),
        (F.col("payload_json").isNull(), F.lit("payload: not a JSON value")),
        overflow_check(),
        (size > rules.max_payload_bytes, F.concat(
            F.lit("payload: "), size.cast("string"),
            F.lit(f" bytes encoded, over the limit of {rules.max_payload_bytes}"
                  " (RECUR_MAX_PAYLOAD_BYTES)"))),
    ]


#: Control characters, refused in an id: it is the row's job key (the pattern of
#: scheduler/bounds.py's, which Java's regex reads alike).
CONTROL = BOUNDS_CONTROL.pattern
#: A JSON ``\u0000`` escape that is not itself an escaped backslash's text.
NUL_ESCAPE = r"(^|[^\\])(\\\\)*\\u0000"


def has_nul_escape(text: Column) -> Column:
    """Whether JSON ``text`` holds a ``NUL_ESCAPE``: the regex only where the six
    characters are (its search over every payload was 2.3 µs a row, the JVM's
    costliest check)."""
    return F.when(text.contains("\\u0000"), text.rlike(NUL_ESCAPE)).otherwise(F.lit(False))


def _store_checks(rules: Rules) -> list[Check]:
    """apply_async's checks of a store row (scheduler/bounds.py), after the message's."""
    key, size = F.col("id"), F.octet_length(F.col("id"))
    return [
        (size > rules.max_job_key_bytes, F.concat(
            F.lit("id: "), size.cast("string"),
            F.lit(f" bytes, at most {rules.max_job_key_bytes} (RECUR_MAX_JOB_KEY_BYTES: the "
                  "id is the job key)"))),
        (key.rlike(CONTROL), F.lit("id: control character (the id is the job key: printable "
                                   "characters only)")),
        (F.col("user_id").contains("\x00"), F.lit(f"user_id: {NUL_REASON}")),
        (has_nul_escape(F.col("payload_text")), F.lit(f"payload: {NUL_REASON}")),
    ]


#: The due times a store row may hold: Python's datetime (the scheduler reads them) ends
#: with year 9999; Spark's and PostgreSQL's go further.
DUE_RANGE = ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z")


def _due_checks() -> list[Check]:
    due, at = F.col("due_at"), F.try_to_timestamp(F.col("due_at"))
    return [(F.array_contains("non_strings", "due_at") | (due.isNotNull() & at.isNull()),
             F.lit("due_at: not an ISO-8601 time")),
            (~at.between(*[F.to_timestamp(F.lit(t)) for t in DUE_RANGE]),
             F.lit("due_at: out of range (years 1 to 9999)"))]


def _first_problem(checks: list[Check]) -> Column:
    reason = F.when(F.col("problem").isNotNull(), F.col("problem"))
    for condition, message in checks:
        reason = reason.when(condition, message)
    return reason


def check(raw: DataFrame, rules: Rules) -> DataFrame:
    """Raw rows with ``reason`` ("field: problem", NULL when valid), ``field``, the
    resolved bucket and the payload parsed (``payload_json``) and re-encoded as
    compact JSON (``payload_text``).

    The first failing rule wins, in validate_message's order. Each step is its
    own projection so Spark computes the parsed payload and the reason once.
    """
    checks = [*_string_checks("id"), *_string_checks("user_id"), *_bucket_checks(rules),
              *_payload_checks(rules), *schedule_checks(rules.min_every), *_due_checks(),
              *_store_checks(rules)]
    parsed = raw.select("*", strict_parse_json(F.col("payload")).alias("payload_json"),
                        F.coalesce(F.col("bucket"), _kind_bucket(rules)).alias("resolved_bucket"))
    compact = parsed.select("*", compact_payload().alias("payload_text"), *schedule_columns())
    reasoned = compact.select("*", _first_problem(checks).alias("reason"))
    return reasoned.select("*", F.substring_index("reason", ":", 1).alias("field"))


def rejects(checked: DataFrame) -> DataFrame:
    """The rejected rows: what was read, the field that is wrong, and why."""
    return checked.where(F.col("reason").isNotNull()).select(*REJECT_COLUMNS)


def message_json() -> Column:
    """A checked row's task arguments for publishing it: ``{"args":[<message>]}``.

    (The store keeps a shorter form, built by ``spark.copy_lines.args_json``.)
    """
    # The string fields through to_json (which escapes them and drops the absent
    # bucket or kind), then the already encoded payload spliced in before the "}".
    head = F.to_json(F.struct(*[F.col(name) for name in ("id", "user_id", "bucket", "kind")]))
    return F.concat(F.lit('{"args":['), F.left(head, F.length(head) - 1),
                    F.lit(',"payload":'), F.col("payload_text"), F.lit("}]}"))


def first_due(start: datetime, spread_seconds: float,
              phased: tuple[float, float] | None = None) -> Column:
    """The row's own due time, or one spread over [start, start + spread) by its id.

    A hash of the id (not a random number) places it, so re-runs and retried
    Spark tasks give every job the same due time. With ``phased`` (every, jitter)
    the spread is jitter's instead: each job's first slot on its key's phase from
    ``start`` (``routing.jitter.first_due``, the same MD5 and arithmetic).
    """
    if phased is not None:
        return F.coalesce(F.try_to_timestamp(F.col("due_at")), phased_due(start, *phased))
    start_ms = int(start.timestamp() * 1000)
    window_ms = max(1, int(spread_seconds * 1000))
    offset = F.pmod(F.xxhash64(F.col("id")), F.lit(window_ms))
    return F.coalesce(F.try_to_timestamp(F.col("due_at")),
                      F.timestamp_millis(F.lit(start_ms) + offset))


def phased_due(start: datetime, every: float, jitter: float) -> Column:
    """``routing.jitter.first_due`` as a column: the first slot ``k * every + phase``
    at or after ``start``, the phase from the first 52 bits of the id's MD5."""
    fraction = F.conv(F.substring(F.md5(F.col("id")), 1, HASH_HEX), 16, 10).cast("double") / (
        F.lit(float(1 << HASH_BITS)))
    offset = fraction * F.lit(jitter) * F.lit(every)
    whole = F.ceil((F.lit(start.timestamp() - SLACK) - offset) / F.lit(every))
    slot = whole * F.lit(every) + offset
    return F.timestamp_micros(F.round(slot * F.lit(1e6)).cast("long"))
