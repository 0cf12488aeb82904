"""A synthetic population (``--generate N``) in the transform's raw columns.

Realistic for recur: most work is short (70 % short, 25 % medium, 5 % long),
three in ten messages name a kind instead of a bucket, users are UUIDs with
a skewed number of jobs each (a few users own many), and payloads are small
JSON objects of 20 to 90 bytes. Every value is a hash of the row number and
the seed, never a random draw, so the same ``--generate N --seed S`` yields
the same rows whatever the partitioning: a re-run or a retried task seeds
exactly the same jobs.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

#: Share of the population in each bucket.
MIX = (("short", 0.70), ("medium", 0.25), ("long", 0.05))
#: Share of messages that name a kind (mapped to their bucket) instead of a bucket.
KIND_SHARE = 0.3
#: Messages per user on average.
JOBS_PER_USER = 10
SCALE = 1_000_000
#: Payload data is a slice of this at a hashed offset: hex-looking text of
#: 4 to 64 characters, far cheaper than hashing every row again.
DATA_ALPHABET = "".join(f"{(i * 0x9E3779B1) & 0xFFFFFFFF:08x}" for i in range(1, 17))


def _uniform(ident: Column, seed: int, salt: int) -> Column:
    """A number in [0, 1) that depends only on the row, the seed and ``salt``."""
    return F.pmod(F.xxhash64(ident, F.lit(seed), F.lit(salt)), F.lit(SCALE)) / SCALE


def _bucket(u: Column) -> Column:
    choice, acc = None, 0.0
    for name, share in MIX[:-1]:
        acc += share
        choice = (F.when(u < acc, F.lit(name)) if choice is None
                  else choice.when(u < acc, F.lit(name)))
    assert choice is not None
    return choice.otherwise(F.lit(MIX[-1][0]))


def _kind_of(bucket: Column, u: Column, kinds: Mapping[str, str]) -> Column:
    """One of the kinds that map to ``bucket`` (NULL if the bucket has none)."""
    chosen = None
    for name, _share in MIX:
        options = sorted(k for k, b in kinds.items() if b == name)
        if not options:
            continue
        pick = F.element_at(F.array(*[F.lit(k) for k in options]),
                            (F.floor(u * len(options)) + 1).cast("int"))
        chosen = (F.when(bucket == name, pick) if chosen is None
                  else chosen.when(bucket == name, pick))
    return chosen if chosen is not None else F.lit(None).cast("string")


def _user_uuid(user: Column, seed: int) -> Column:
    """A UUID-formatted user id derived from the user number."""
    hexed = F.sha2(F.concat_ws("/", F.lit(str(seed)), user.cast("string")), 256)
    return F.concat_ws("-", *[F.substring(hexed, start, length) for start, length in
                              ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))])


def generate(spark: SparkSession, count: int, seed: int, partitions: int,
             kinds: Mapping[str, str], every: float | None = None,
             runs: int | None = None, jitter: float | None = None) -> DataFrame:
    """``count`` generated messages as raw rows (ids ``gen-<seed>-<n>``).

    With ``every``, each payload also says how the message recurs
    (``"every": <seconds>, "runs": <runs or null>``, see tasks/process.py), and
    with ``jitter`` its phase (``"jitter": <fraction>``, routing/jitter.py).
    """
    users = max(1, count // JOBS_PER_USER)
    rows = spark.range(count, numPartitions=max(1, partitions))
    n = F.col("id")
    ident = F.concat(F.lit(f"gen-{seed}-"), n.cast("string"))
    bucket = _bucket(_uniform(n, seed, 1))
    with_kind = _uniform(n, seed, 2) < KIND_SHARE
    kind = _kind_of(bucket, _uniform(n, seed, 3), kinds)
    # Squaring a uniform number skews it towards 0: low user numbers own many jobs.
    user = F.floor(_uniform(n, seed, 4) * _uniform(n, seed, 4) * users).cast("long")
    data = F.substring(F.lit(DATA_ALPHABET), (F.floor(_uniform(n, seed, 6) * 64) + 1).cast("int"),
                       (F.floor(_uniform(n, seed, 5) * 61) + 4).cast("int"))
    recurrence = "" if every is None else (
        f',"every":{every:g},"runs":{"null" if runs is None else runs}'
        + ("" if jitter is None else f',"jitter":{jitter:g}'))
    payload = F.concat(F.lit('{"n":'), n.cast("string"), F.lit(',"data":"'), data,
                       F.lit(f'"{recurrence}}}'))
    use_kind = with_kind & kind.isNotNull()
    return rows.select(
        ident.alias("source"),
        F.lit(None).cast("string").alias("problem"),
        F.array().cast("array<string>").alias("non_strings"),
        ident.alias("id"),
        _user_uuid(user, seed).alias("user_id"),
        F.when(~use_kind, bucket).alias("bucket"),
        F.when(use_kind, kind).alias("kind"),
        payload.alias("payload"),
        F.lit(None).cast("string").alias("due_at"),
    )
