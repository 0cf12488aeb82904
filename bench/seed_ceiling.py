"""The seed's ceiling: the load's own cost on this machine, without Spark.

The same rows the seed generates (job keys ``gen-<seed>-<n>``, UUID users, 30 %
with a kind, payloads of 20 to 90 bytes, the bucket mix, due times spread over
the window; made with numpy, not Spark's hashes, so the same shape but other
draws) are made into the seed's COPY lines (``spark.copy_lines.due_lines``,
chunks of ``STORE_CHUNK`` sorted in the drain order as ``spark.load.store_lines``
sorts them) and written to files first, untimed. Then one process, and then
``parallel`` processes at once, each on its own share of the files, load them
through the seed's own sink (``PostgresBulk.load_copy``: its session settings,
one transaction per chunk, durable at the end) into an empty ``due_jobs`` of a
private schema at head revision, its secondary indexes dropped before and
built after exactly as the seed does (``bulk_indexes``). Reported: rows/s and
PostgreSQL CPU µs per row, of the COPY and of the index build apart.

Whatever the seed does, PostgreSQL needs at least this CPU per row: with
``cores`` cores a seed cannot pass ``cores / (PostgreSQL µs per row)`` rows/s.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.private_env import PG_PORT, pg
from bench.seed_cpu import postgres_seconds

MIX = (("short", 0.70), ("medium", 0.25), ("long", 0.05))
KIND_SHARE, JOBS_PER_USER, SPREAD_MS = 0.3, 10, 3_600_000
#: Held after a loader's last commit so the sampler sees its backend's last CPU tick.
LINGER = 0.3


def _users(count: int, seed: int) -> pa.Array:
    """UUID-formatted user ids, as spark.generate derives them (sha256 of seed/user)."""
    out = []
    for user in range(count):
        h = hashlib.sha256(f"{seed}/{user}".encode()).hexdigest()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")
    return pa.array(out)


def population(first: int, count: int, seed: int, users: pa.Array,
               kinds: Mapping[str, str], start_ms: int) -> pa.RecordBatch:
    """Rows ``first .. first+count`` of the population as the seed's sink columns."""
    from spark.copy_lines import LINE_COLUMNS
    from spark.generate import DATA_ALPHABET

    rng = np.random.default_rng([seed, first])
    n = np.arange(first, first + count)
    u = rng.random((6, count))
    names = np.array([name for name, _ in MIX])
    bucket = names[np.searchsorted(np.cumsum([s for _, s in MIX])[:-1], u[0], side="right")]
    kind = np.full(count, None, dtype=object)
    for name in names:
        options = sorted(k for k, b in kinds.items() if b == name)
        pick = (bucket == name) & (u[1] < KIND_SHARE)
        if options:
            kind[pick] = np.array(options)[(u[2][pick] * len(options)).astype(int)]
    user = users.take(pa.array((u[3] * u[3] * len(users)).astype(np.int64)))
    slices = [DATA_ALPHABET[o:o + length] for o in range(64) for length in range(4, 65)]
    data = pa.array(slices).take(pa.array((u[4] * 64).astype(int) * 61
                                          + (u[5] * 61).astype(int)))
    text = pc.cast(pa.array(n), pa.string())
    due = pa.array(start_ms + rng.integers(0, SPREAD_MS, count), pa.timestamp("ms", "UTC"))
    columns = {
        "job_key": pc.binary_join_element_wise(f"gen-{seed}-", text, ""),
        "bucket": pa.array(bucket.tolist()), "user_id": user, "kind": pa.array(kind.tolist(),
                                                                               pa.string()),
        "payload_text": pc.binary_join_element_wise('{"n":', text, ',"data":"', data, '"}', ""),
        "due_text": pc.binary_join_element_wise(
            pc.strftime(due, format="%Y-%m-%dT%H:%M:%S"), "Z", ""),
    }
    return pa.RecordBatch.from_arrays([columns[c] for c in LINE_COLUMNS], list(LINE_COLUMNS))


def write_lines(rows: int, seed: int, task_code: int, directory: Path) -> list[Path]:
    """The population's COPY lines, one file per chunk (untimed preparation)."""
    from config.settings import settings
    from spark.job import STORE_CHUNK
    from spark.load import copy_block, store_lines

    lines_of = store_lines(task_code)
    users = _users(max(1, rows // JOBS_PER_USER), seed)
    kinds, start_ms = dict(settings().kinds), int(time.time() * 1000)
    files = []
    for first in range(0, rows, STORE_CHUNK):
        batch = population(first, min(STORE_CHUNK, rows - first), seed, users, kinds, start_ms)
        path = directory / f"chunk-{first // STORE_CHUNK:05d}.copy"
        path.write_bytes(copy_block(lines_of(batch)))
        files.append(path)
    return files


def load_main(url: str, files: list[str]) -> None:
    """A loader process: COPY each file through the seed's sink; print when it ran."""
    from scheduler.store.bulk import PostgresBulk

    sink = PostgresBulk(url)
    started = time.monotonic()
    for name in files:
        data = Path(name).read_bytes()
        sink.load_copy(data, data.count(b"\n"))
    sink.make_durable()
    print(f"{started} {time.monotonic()}", flush=True)
    time.sleep(LINGER)
    sink.conn.close()


def _schema(name: str) -> str:
    from scheduler.store.connection import make_engine
    from scheduler.store.migrate import upgrade

    pg(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    pg(f"CREATE SCHEMA {name}")
    url = (f"postgresql+psycopg://postgres@127.0.0.1:{PG_PORT}/test"
           f"?options=-csearch_path%3D{name}")
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def load_once(files: list[Path], processes: int, schema: str, rows: int) -> dict[str, Any]:
    """Load ``files`` from ``processes`` loaders into a fresh schema, then build the indexes."""
    from scheduler.store.bulk import register_task
    from scheduler.store.bulk_indexes import build_indexes, defer_indexes

    url = _schema(schema)
    try:
        code = register_task(url, "tasks.process_message")
        assert code == 1, f"the lines were written for task code 1, the store gave {code}"
        deferred = defer_indexes(url)
        shares = [files[i * len(files) // processes:(i + 1) * len(files) // processes]
                  for i in range(processes)]
        pg_before = postgres_seconds()
        children = [subprocess.Popen([sys.executable, "-m", "bench.seed_ceiling", url,
                                      *map(str, share)], stdout=subprocess.PIPE, text=True)
                    for share in shares]
        spans = []
        for child in children:
            out, _ = child.communicate()
            if child.returncode != 0:
                raise SystemExit(f"seed ceiling loader failed ({child.returncode})")
            spans.append([float(x) for x in out.split()])
        copy_pg = postgres_seconds() - pg_before
        copy_s = max(end for _, end in spans) - min(start for start, _ in spans)
        started, pg_before = time.monotonic(), postgres_seconds()
        built = build_indexes(url)
        build_s, build_pg = time.monotonic() - started, postgres_seconds() - pg_before
        assert sorted(built) == sorted(deferred), (built, deferred)
        (count,), = pg(f"SELECT count(*) FROM {schema}.due_jobs")
        assert count == rows, (count, rows)
    finally:
        pg(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    total_s, total_pg = copy_s + build_s, copy_pg + build_pg
    return {"processes": processes, "rows": rows, "indexes_built": len(built),
            "rows_per_second": round(rows / total_s), "seconds": round(total_s, 2),
            "postgresql_cpu_us_per_row": round(total_pg * 1e6 / rows, 2),
            "copy": {"seconds": round(copy_s, 2), "rows_per_second": round(rows / copy_s),
                     "postgresql_cpu_us_per_row": round(copy_pg * 1e6 / rows, 2)},
            "index_build": {"seconds": round(build_s, 2),
                            "postgresql_cpu_us_per_row": round(build_pg * 1e6 / rows, 2),
                            "postgresql_cores_busy": round(build_pg / build_s, 2)}}


def ceiling(rows: int, schema: str, directory: Path, cores: int,
            parallel: tuple[int, ...] = (1, 2), seed: int = 1) -> dict[str, Any]:
    """The ceiling figures: a load from each count of processes in ``parallel``."""
    started = time.monotonic()
    files = write_lines(rows, seed, 1, directory)
    prepared = time.monotonic() - started
    runs = [load_once(files, p, f"{schema}_c{p}", rows) for p in parallel]
    least = min(run["postgresql_cpu_us_per_row"] for run in runs)
    need = round(cores / 150_000 * 1e6, 1)
    return {
        "how": "the seed's COPY lines written to files first (untimed, "
               f"{prepared:.0f}s), loaded by PostgresBulk.load_copy from 1 and from "
               "several Python processes into an empty due_jobs without its secondary "
               "indexes, which are then built as bulk_indexes builds them",
        "runs": runs, "least_postgresql_cpu_us_per_row": least,
        "postgresql_bound_rows_per_second": round(cores / least * 1e6),
        "us_per_row_for_150k_on_these_cores": need,
        "150k_within_reach_of_postgresql": least <= need,
    }


if __name__ == "__main__":
    load_main(sys.argv[1], sys.argv[2:])
