"""A real PostgreSQL server of a test's own: ``initdb`` in a temporary folder, ``pg_ctl`` on a free
port of 127.0.0.1, stopped and removed after (Debian's ``postgresql`` package, which ``make
setup`` installs, gives the programs).

PostgreSQL refuses to run as root; as root the server runs as the package's ``postgres`` user,
which owns the server's folder (a folder of its own in the system's temporary folder, since a
test's ``tmp_path`` is closed to other users).

Example (not run here: it starts a server)::

    with PostgresServer() as pg:
        pg.url  # 'postgresql://postgres@127.0.0.1:54321/postgres'
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path

__all__ = ["PostgresServer", "postgres_bin"]


def postgres_bin(program: str) -> str:
    """The path of PostgreSQL's ``program`` (``initdb``, ``pg_ctl``): Debian keeps them in
    ``/usr/lib/postgresql/<version>/bin``, off the PATH."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{program}")) or [shutil.which(program) or ""]
    if not found[-1]:
        raise FileNotFoundError(
            f"PostgreSQL's {program} is not installed; `make setup` installs Debian's postgresql package "
            "(apt-get install postgresql)"
        )
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer(AbstractContextManager):
    """A PostgreSQL server on 127.0.0.1 in a temporary folder of its own, removed when it stops
    (see the module docstring).

    Attributes:
        url: ``postgresql://postgres@127.0.0.1:PORT/postgres`` (no password: trust on loopback).
        folder: the server's folder (its data, socket and ``log``).
    """

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="ctxwin-postgres-"))
        self.data = self.folder / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_user: list[str] = []

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        done = subprocess.run([*self._as_user, *cmd], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:  # initdb refuses root: run as the package's user, who owns the folder
            shutil.chown(self.folder, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run(postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off"
        self._run(
            postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start"
        )
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                [*self._as_user, postgres_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                capture_output=True,
                timeout=120,
            )
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
