"""A private PostgreSQL server on a free port, for tests that take the database down.

The machine's shared PostgreSQL is never stopped: a test that needs an outage
runs its own server (initdb into a temporary directory, as the ``postgres``
user), stops and starts that one, and removes it at the end.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support import services

#: The installed PostgreSQL's server binaries (the newest version on the machine).
BIN = (Path("/usr/lib/postgresql")
       / sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1] / "bin")


def as_postgres(*argv: str) -> None:
    result = subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stdout}{result.stderr}")


@dataclass
class PrivatePostgres:
    """One private server: ``url`` is a SQLAlchemy URL of its ``postgres`` database."""

    root: Path
    port: int
    #: Extra server settings (``-c name=value ...``), e.g. to make a crash lose more.
    options: str = ""

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"),
                    "-w", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                    f"-c fsync=off {self.options}", "start")

    def stop(self) -> None:
        as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """Stop as a crash does (``-m immediate``): WAL not yet written is lost."""
        as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")


@contextmanager
def private_postgres(options: str = "") -> Iterator[PrivatePostgres]:
    """A started private server (with extra server ``options``); stopped and deleted
    afterwards."""
    root = Path(tempfile.mkdtemp(prefix="recur-pg-"))
    shutil.chown(root, "postgres", "postgres")
    server = PrivatePostgres(root, services.free_port(), options)
    as_postgres(str(BIN / "initdb"), "-D", str(server.data), "-A", "trust", "-U", "postgres",
                "--no-sync")
    server.start()
    try:
        yield server
    finally:
        subprocess.run(["runuser", "-u", "postgres", "--", str(BIN / "pg_ctl"), "-D",
                        str(server.data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
