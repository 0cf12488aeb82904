"""What the seed job can check of its command line before Spark starts.

Starting Spark costs seconds and prints the JVM's banner; a missing input, an
empty input directory, a format that cannot be told, a malformed store or
broker URL, or a rejects path that cannot be written would otherwise end the
job only after that, or after every row was loaded (the rejects are written
last). Each is a :class:`SeedInputError` here, one line, no JVM. Only local
paths of a local run are checked: a URL (``hdfs://``, ``s3a://``), a glob, or a
plain path under spark-submit or on a cluster (its default file system may be
HDFS) is Spark's to read.
"""

from __future__ import annotations

import os
from pathlib import Path

from config.buckets import BUILTIN
from config.errors import SeedInputError
from config.settings_bounds import check_values
from spark.extract import detect_format
from spark.options import SeedOptions
from spark.session import under_spark_submit

#: Characters of a Hadoop glob: such a path names files Spark finds, not one file.
GLOB = frozenset("*?[{")


def check_invocation(opts: SeedOptions) -> None:
    """Refuse what would fail once Spark runs: input, format, URLs, rejects path."""
    local = not under_spark_submit() and (opts.master or "local").startswith("local")
    if opts.input is not None:
        if opts.format is None:
            detect_format(opts.input)
        if local:
            check_input(opts.input)
    setting = "database_url" if opts.sink == "store" else "broker_url"
    url = opts.database_url if opts.sink == "store" else opts.broker_url
    try:
        check_values({setting: url}, BUILTIN)
    except ValueError as exc:
        raise SeedInputError(f"--{setting.replace('_', '-')}: {exc}") from None
    guard_rejects_path(opts.rejects, creatable=local)


def local_path(path: str) -> Path | None:
    """The local file ``path`` names (``file:`` URLs too), or None for another scheme."""
    if path.startswith("file:"):
        path = "/" + path.removeprefix("file:").lstrip("/")
    elif "://" in path:
        return None
    return None if GLOB & set(path) else Path(path)


def check_input(path: str) -> None:
    """A local input exists, can be read, and a directory holds at least one file."""
    local = local_path(path)
    if local is None:
        return
    if not local.exists():
        raise SeedInputError(f"--input {path!r}: no such file or directory")
    if not os.access(local, os.R_OK | (os.X_OK if local.is_dir() else 0)):
        raise SeedInputError(f"--input {path!r}: permission denied")
    if local.is_dir():
        check_input_directory(path, local)
    elif not local.is_file():
        raise SeedInputError(f"--input {path!r}: not a file or directory")


def check_input_directory(path: str, local: Path) -> None:
    """Spark reads the files under a directory but those named ``_…`` or ``.…``; none
    left is an empty input, refused rather than seeding nothing."""
    for root, dirs, files in os.walk(local, onerror=_raise):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            if not name.startswith(("_", ".")):
                if not os.access(os.path.join(root, name), os.R_OK):
                    raise SeedInputError(f"--input {path!r}: cannot read "
                                         f"{os.path.join(root, name)!r}: permission denied")
                return
    raise SeedInputError(f"--input {path!r}: the directory holds no input files")


def _raise(exc: OSError) -> None:
    raise SeedInputError(f"--input: cannot list {exc.filename!r}: {exc.strerror}")


def guard_rejects_path(path: str, creatable: bool = True) -> None:
    """Refuse to let Spark's overwrite delete a local directory that is not a rejects output,
    and (``creatable``) a rejects path under a file (found only after every row loaded)."""
    local = local_path(path)
    if local is None:
        return
    if local.exists():
        if not local.is_dir() or (any(local.iterdir()) and not (local / "_SUCCESS").exists()):
            raise SeedInputError(f"--rejects {path!r} exists and is not an earlier rejects "
                                 "output: refusing to overwrite it")
        return
    if not creatable:
        return
    parent = next(p for p in local.absolute().parents if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise SeedInputError(f"--rejects {path!r}: cannot create it under {str(parent)!r}")
