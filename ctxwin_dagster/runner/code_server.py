"""One code server for the whole of a ``ctxwin`` command, instead of a new one every minute.

A daemon that loads a ``python_module`` workspace starts the code server itself, and every 60
seconds it drops that server and starts another (Dagster's daemon refreshes a workspace it
manages that way, so that changed code is picked up): a Python start, Dagster and the project's
definitions, about 5 s of CPU, a minute, for as long as the command runs — an hour of a large
corpus pays about 60 of them. The definitions of a command do not change while it runs, so the
daemon that ``ctxwin run`` starts for itself loads them from a code server that the command
starts once (``dagster api grpc`` on a Unix socket, the same code location name and working
directory as the project's ``workspace.yaml``) and stops at its end; the daemon's refresh then
only asks that server again. The runs belong to the same code location (``ctxwin``) as before,
in the UI and for re-execution there.

Only a workspace of one ``python_module`` entry is served so; any other workspace (several
locations, a file, a server of its own) is left to the daemon as it is
(:func:`served_target` returns None).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctxwin_dagster.runner.processes import stop_process, with_parent_death

__all__ = ["CodeServer", "ServedTarget", "served_target"]


@dataclass(frozen=True)
class ServedTarget:
    """The code location of a workspace's single ``python_module`` entry."""

    module_name: str
    location_name: str
    working_directory: str
    attribute: str | None = None
    executable_path: str | None = None


def served_target(workspace: Path) -> ServedTarget | None:
    """The one ``python_module`` code location of ``workspace`` (a ``workspace.yaml``), or None
    when the file holds anything else.

    Example::

        >>> import tempfile
        >>> ws = Path(tempfile.mkdtemp()) / "workspace.yaml"
        >>> _ = ws.write_text("load_from:\\n  - python_module:\\n      module_name: m\\n      location_name: x\\n")
        >>> t = served_target(ws)
        >>> (t.module_name, t.location_name, t.working_directory == str(ws.parent))
        ('m', 'x', True)
        >>> _ = ws.write_text("load_from:\\n  - python_file: defs.py\\n")
        >>> served_target(ws) is None
        True
    """
    import yaml

    try:
        loaded = yaml.safe_load(workspace.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    entries = loaded.get("load_from") if isinstance(loaded, dict) else None
    if not isinstance(entries, list) or len(entries) != 1 or not isinstance(entries[0], dict):
        return None
    entry = entries[0].get("python_module")
    if isinstance(entry, str):
        entry = {"module_name": entry}
    if not isinstance(entry, dict) or set(entry) - {
        "module_name",
        "location_name",
        "working_directory",
        "attribute",
        "executable_path",
    }:
        return None
    module = entry.get("module_name")
    if not isinstance(module, str) or not module:
        return None
    folder = entry.get("working_directory")
    working = (workspace.parent / folder) if isinstance(folder, str) and folder else workspace.parent
    return ServedTarget(
        module_name=module,
        location_name=str(entry.get("location_name") or module),
        working_directory=str(working.resolve()),
        attribute=entry.get("attribute") if isinstance(entry.get("attribute"), str) else None,
        executable_path=entry.get("executable_path") if isinstance(entry.get("executable_path"), str) else None,
    )


_PREFIX = "ctxwin-code-"


def remove_orphaned_folders(parent: Path | None = None) -> list[Path]:
    """Remove the socket folders of code servers whose command is gone (killed: it could not
    remove its own); returns them. A folder of a live command is left alone."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{_PREFIX}*-*"):
        pid = folder.name[len(_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or not folder.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except OSError:  # another user's process: alive
            continue
    return removed


class CodeServer:
    """``dagster api grpc`` serving ``target`` on a Unix socket for as long as the command runs
    (it gets SIGTERM when the command dies, however it dies), and the workspace file that points a
    daemon at it.

    Args:
        target: what to serve (:func:`served_target`).
        log: the file the server's output is appended to.
        env: its environment (default: this process's); the runs it starts inherit it.
        timeout_s: how long :meth:`start` waits for the server to listen (loading the
            definitions: a few seconds; more on a busy machine).
    """

    def __init__(
        self, target: ServedTarget, *, log: Path, env: Mapping[str, str] | None = None, timeout_s: float = 300.0
    ) -> None:
        self.target = target
        self.env = dict(env) if env is not None else None
        self.log = log
        self.timeout_s = timeout_s
        self.process: subprocess.Popen | None = None
        self.folder: Path | None = None

    @property
    def socket_path(self) -> Path:
        if self.folder is None:
            raise RuntimeError("the code server is not started")
        return self.folder / "grpc.sock"

    @property
    def workspace(self) -> Path:
        """The workspace file of the daemon: this server, under the target's location name."""
        return self.socket_path.with_name("workspace.yaml")

    def start(self) -> Path:
        """Start the server, wait until it listens, write and return the daemon's workspace file.
        Raises RuntimeError naming the log when it stops or does not listen in time."""
        # A short folder: a Unix socket's path holds at most 107 bytes, and a home's may be longer.
        # Its name holds this command's pid, so that a later command removes it if this one is
        # killed (``ctxwin run`` calls remove_orphaned_folders at its start).
        self.folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        python = self.target.executable_path or sys.executable
        cmd = [python, "-m", "dagster", "api", "grpc", "--socket", str(self.socket_path)]
        cmd += ["--module-name", self.target.module_name, "--working-directory", self.target.working_directory]
        cmd += ["--location-name", self.target.location_name, "--log-level", "warning"]
        if self.target.attribute:
            cmd += ["--attribute", self.target.attribute]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                with_parent_death(cmd),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.target.working_directory,
                env=self.env,
            )
        self._wait_listening()
        import yaml

        entry = {"host": "localhost", "socket": str(self.socket_path), "location_name": self.target.location_name}
        self.workspace.write_text(
            "# Written by ctxwin for the daemon of one command: the code server that command started.\n"
            + yaml.safe_dump({"load_from": [{"grpc_server": entry}]}, sort_keys=False),
            encoding="utf-8",
        )
        return self.workspace

    def _wait_listening(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(
                    f"the code server of {self.target.module_name} stopped (exit {self.process.returncode}) "
                    f"before it listened; see {self.log}"
                )
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(str(self.socket_path))
                    return
                except OSError:
                    pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"the code server of {self.target.module_name} did not listen in {self.timeout_s:.0f}s; see {self.log}"
        )

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 30 s) and remove its socket's folder."""
        if self.process is not None:
            stop_process(self.process, signal.SIGTERM)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
