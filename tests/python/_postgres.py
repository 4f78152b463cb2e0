"""A real PostgreSQL server for the store's tests: Debian's `postgresql`
binaries, a cluster made in a temporary directory, listening on 127.0.0.1
on a free port, removed at the end. PostgreSQL refuses to run as root, so
as root (CI) the cluster belongs to the `postgres` user."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile

from _helpers import require_tool


def _bindir():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server():
    """Yields the URL of a running server's `postgres` database."""
    bindir = require_tool(_bindir(), "PostgreSQL's server", "apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require_tool(None, "psycopg", "pip install 'mlflow-profiler[postgres]'")
    root = tempfile.mkdtemp(prefix="mlprof-pg-", dir="/tmp")
    os.chmod(root, 0o755)
    data = os.path.join(root, "data")
    run_as = []
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    log = os.path.join(root, "server.log")

    def run(*cmd):
        subprocess.run([*run_as, *cmd], check=True, capture_output=True, timeout=120)

    try:
        run(f"{bindir}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        run(f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
            f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c max_connections=50 -c fsync=off", "start")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(Exception):
            run(f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def free_port() -> int:
    """A port nothing listens on (for the server-down test)."""
    return _free_port()
