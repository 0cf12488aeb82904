"""Run a benchmark against a private PostgreSQL 15 with autovacuum on.

The machine's shared server (127.0.0.1:5432) runs with ``autovacuum = off``
(``/etc/postgresql/15/main/conf.d/90-ci.conf``) and is never changed or
restarted. This starts a server of the same version in a data directory under
/tmp (``initdb`` and ``pg_ctl`` as the ``postgres`` user when run as root), with
the shared server's settings but for autovacuum, which stays at PostgreSQL's
default (on, and its default thresholds and cost limits): ``SETTINGS`` below
repeats the shared server's (all initdb's defaults); ``log_autovacuum_min_duration
= 0`` only logs each autovacuum (how long it took, what it removed). It creates
database ``test``, runs the command with ``RECURBENCH_PG_PORT`` set to the
server's port (``bench/private_env.py`` reads it), then stops the server
(``pg_ctl stop -m fast``) and removes its directory; ``--log`` keeps the
server's log.

    python -m bench.private_postgres [--log PATH] -- python -m bench.bench_store_scale ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

BIN = Path("/usr/lib/postgresql/15/bin")
#: The shared server's settings (``SELECT name, setting FROM pg_settings WHERE source =
#: 'configuration file'``), autovacuum aside; initdb's defaults, spelled out so that
#: initdb's probing of the machine cannot pick others.
SETTINGS = {"listen_addresses": "127.0.0.1", "shared_buffers": "128MB",
            "max_connections": "100", "max_wal_size": "1GB", "min_wal_size": "80MB",
            "fsync": "on", "dynamic_shared_memory_type": "posix", "TimeZone": "Etc/UTC",
            "log_timezone": "Etc/UTC", "log_autovacuum_min_duration": "0"}


def as_postgres(*argv: str) -> None:
    """Run a server binary, as ``postgres`` if we are root (initdb refuses root)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    result = subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stdout}{result.stderr}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start(root: Path, port: int) -> None:
    data = root / "data"
    as_postgres(str(BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                "--encoding=UTF8", "--locale=C.UTF-8")
    options = " ".join(f"-c {name}={value}" for name, value in SETTINGS.items())
    as_postgres(str(BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w",
                "-o", f"-p {port} -k {root} {options}", "start")
    as_postgres(str(BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                "test")


def stop(root: Path) -> None:
    if not (root / "data" / "postmaster.pid").exists():
        return
    as_postgres(str(BIN / "pg_ctl"), "-D", str(root / "data"), "-m", "fast", "-w", "stop")


def terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, help="keep the server's log here")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the benchmark to run (after --)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run")
    signal.signal(signal.SIGTERM, terminate)
    root = Path(tempfile.mkdtemp(prefix="recur-bench-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    code = 1
    try:
        start(root, port)
        print(f"private PostgreSQL on 127.0.0.1:{port}, data in {root}", flush=True)
        code = subprocess.run(command, env={**os.environ, "RECURBENCH_PG_PORT": str(port)},
                              check=False).returncode
    finally:
        try:
            stop(root)
        finally:
            if args.log and (root / "log").exists():
                shutil.copyfile(root / "log", args.log)
            shutil.rmtree(root, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
