"""The seed's checks of a payload's schedule and numbers, as Spark columns.

``apply_async`` refuses a recurring message whose ``every``, ``runs`` or
``jitter`` is malformed (routing/recurrence.py, ``recurrence_of``); a seeded row
is stored without passing through it, so the seed applies the same rules, and
names the same fields, here: else the worker dead-letters the row at its first
run. And a number too large for a double (``1e999``, 400 digits) is no JSON value
to ``json.dumps(allow_nan=False)``, while Spark's parser reads it as infinity
and writes it back as the string ``"Infinity"``: such a payload is refused, not
stored changed.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from routing.recurrence import MAX_EVERY, MAX_RUNS

Check = tuple[Column, Column]
#: A variant's numeric types (a JSON number: whole, decimal or with an exponent).
NUMBER = r"^(BIGINT|DOUBLE|DECIMAL\(.*\))$"
#: Text that may hold a number beyond a double: 309+ digits or a 3-digit
#: exponent (rare; only those rows pay for re-encoding to look).
LONG_DIGITS, BIG_EXPONENT = r"[0-9]{309}", r"[eE][+]?0*[1-9][0-9]{2}"


#: The schedule's fields of each row's parsed payload, computed once in their own
#: projection (:func:`schedule_columns`): each check below only reads them. Built into
#: every check, they were extracted again per check, a third of the seed's time.
FIELDS = ("every", "runs", "jitter")


def _raw(name: str) -> str:
    return f"_schedule_{name}"


def _kind(name: str) -> str:
    return f"_schedule_{name}_type"


def schedule_columns() -> list[Column]:
    """Each schedule field as a variant (NULL when absent or the payload is no object)
    and its type's name: the columns :func:`schedule_checks` reads."""
    columns = []
    for name in FIELDS:
        value = F.try_variant_get(F.col("payload_json"), f"$.{name}", "variant")
        columns += [value.alias(_raw(name)), F.schema_of_variant(value).alias(_kind(name))]
    return columns


def _present(name: str) -> Column:
    return F.col(_raw(name)).isNotNull() & ~F.is_variant_null(F.col(_raw(name)))


def _is_number(name: str) -> Column:
    return F.coalesce(F.col(_kind(name)).rlike(NUMBER), F.lit(False))


def _value(name: str) -> Column:
    return F.try_variant_get(F.col(_raw(name)), "$", "double")


def schedule_checks(min_every: float) -> list[Check]:
    """recurrence_of's refusals, in its order, for an object payload with every or runs
    (read from :func:`schedule_columns`)."""
    recurs = F.col(_raw("every")).isNotNull() | F.col(_raw("runs")).isNotNull()
    every, runs, jitter = _value("every"), _value("runs"), _value("jitter")
    whole_runs = F.coalesce(F.col(_kind("runs")) == F.lit("BIGINT"), F.lit(False))
    return [
        (recurs & F.col(_raw("every")).isNull(),
         F.lit("payload.every: missing: 'runs' needs 'every'")),
        (recurs & ~_is_number("every"), F.lit(
            f"payload.every: must be a number of seconds from {min_every:g} "
            f"(RECUR_MIN_EVERY) to {MAX_EVERY:.0f}")),
        (recurs & (every < F.lit(min_every)), F.lit(
            f"payload.every: must be at least RECUR_MIN_EVERY = {min_every:g} s "
            "(a shorter interval runs the job back to back)")),
        (recurs & ~(every <= F.lit(MAX_EVERY)), F.lit(
            f"payload.every: must be at most {MAX_EVERY:.0f} s (ten years)")),
        (recurs & _present("runs") & ~(whole_runs & runs.between(1, MAX_RUNS)), F.lit(
            f"payload.runs: must be a whole number of runs left from 1 to {MAX_RUNS} "
            "or null (forever)")),
        (recurs & _present("jitter") & ~(_is_number("jitter") & jitter.between(0, 1)), F.lit(
            "payload.jitter: must be a fraction of 'every' from 0 to 1 or null "
            "(the bucket's)")),
    ]


def may_overflow(text: Column) -> Column:
    """Whether ``text`` matches ``LONG_DIGITS`` or ``BIG_EXPONENT``: the digits' search
    only in text long enough to hold them, each pattern alone (Java's regex tried both
    branches of ``A|B`` at every character: 2 µs a row, a tenth of the seed's JVM time)."""
    return ((F.octet_length(text) >= 309) & text.rlike(LONG_DIGITS)) | text.rlike(BIG_EXPONENT)


def overflow_check() -> Check:
    """A payload with a number no double holds (Spark reads it as infinity). A JSON line's
    payload is Spark's re-encoding already ("Infinity"): its line as read is searched."""
    text = F.col("payload_text")
    suspect = F.when(text.contains("Infinity"), may_overflow(F.col("source"))).otherwise(
        may_overflow(text))
    infinite = F.to_json(F.col("payload_json")).rlike(r'"-?Infinity"')
    return (F.when(suspect, F.coalesce(infinite, F.lit(False))).otherwise(F.lit(False)),
            F.lit("payload: not a JSON value (a number too large for a double)"))
