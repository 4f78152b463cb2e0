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


class PostgresServer:
    """A cluster in a temporary directory that can be stopped and started
    again on the same port (a sink's "server down" test); `url` is its
    `postgres` database. close() stops it and removes the directory."""

    def __init__(self) -> None:
        self.bindir = require_tool(_bindir(), "PostgreSQL's server", "apt-get install postgresql")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            require_tool(None, "psycopg", "pip install 'mlflow-profiler[postgres]'")
        self.root = tempfile.mkdtemp(prefix="mlprof-pg-", dir="/tmp")
        os.chmod(self.root, 0o755)
        self.data = os.path.join(self.root, "data")
        self._run_as = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._run_as = ["runuser", "-u", "postgres", "--"]
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        try:
            self._run(
                f"{self.bindir}/initdb",
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            )
            self.start()
        except BaseException:
            self.close()
            raise

    def _run(self, *cmd) -> None:
        subprocess.run([*self._run_as, *cmd], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Starts the server and waits until it accepts connections."""
        log = os.path.join(self.root, "server.log")
        self._run(
            f"{self.bindir}/pg_ctl",
            "-D",
            self.data,
            "-l",
            log,
            "-w",
            "-t",
            "60",
            "-o",
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c max_connections=50 -c fsync=off",
            "start",
        )

    def stop(self) -> None:
        """Stops the server at once (connections are cut)."""
        self._run(f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")

    def close(self) -> None:
        """Stops the server if it runs and removes its directory."""
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def postgres_server():
    """Yields the URL of a running server's `postgres` database."""
    server = PostgresServer()
    try:
        yield server.url
    finally:
        server.close()


def free_port() -> int:
    """A port nothing listens on (for the server-down test)."""
    return _free_port()
