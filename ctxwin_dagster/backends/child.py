"""A server run as a child process of a command, on loopback, for as long as the command runs.

The embedding server (:mod:`ctxwin_dagster.backends.embeddings.server`) and the local chat
model's llama.cpp server (:mod:`ctxwin_dagster.backends.chat.llama_server`) are started this
way by ``ctxwin run``, ``ctxwin evaluate``, ``ctxwin dev`` and ``ctxwin ask``:

* the child prints one line, ``<ready prefix><url>``, once it listens; :meth:`ChildServer.start`
  waits for it (up to ``timeout_s``) and returns the URL, or raises naming the child's log;
* the child's stdin is a pipe from the command, and the child stops when it closes: when the
  command ends, however it ends (``kill -9`` too), the server ends with it;
* its stderr goes to a log file in the command's home.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path

__all__ = ["ChildServer", "watch_parent"]


class ChildServer(AbstractContextManager["ChildServer", None]):
    """``python -m <module> <args>`` as a child server (see the module docstring).

    Args:
        module: the module to run; it must stop when its stdin closes (:func:`watch_parent`).
        args: its arguments.
        ready_prefix: what its ready line starts with (the URL follows).
        log: the file its stderr is appended to.
        what: how errors name it (``"the embedding server"``).
        timeout_s: seconds to wait for the ready line.
        env: variables set for it (on top of this process's environment).
        drop_env: variables removed from its environment.
    """

    def __init__(
        self,
        module: str,
        args: list[str],
        *,
        ready_prefix: str,
        log: Path,
        what: str,
        timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
        drop_env: tuple[str, ...] = (),
        hint: str = "",
    ) -> None:
        self.module = module
        self.args = list(args)
        self.ready_prefix = ready_prefix
        self.log = Path(log)
        self.what = what
        self.timeout_s = timeout_s
        self.env = dict(env or {})
        self.drop_env = drop_env
        self.hint = hint
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> str:
        """The server's URL once it listens (started now, or already running)."""
        if self.running:
            return self.url
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        for name in self.drop_env:
            env.pop(name, None)
        with self.log.open("ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        line: list[str] = []
        ended = threading.Event()

        def read() -> None:
            # the ready line, past anything the child prints before it; then whatever it prints
            # is read and dropped, so that a full pipe never stops it
            for raw in self.process.stdout:  # type: ignore[union-attr]
                text = raw.decode(errors="replace").strip()
                if not line and text.startswith(self.ready_prefix):
                    line.append(text)
                    ended.set()
            ended.set()

        threading.Thread(target=read, name=f"{self.module}-stdout", daemon=True).start()
        ended.wait(self.timeout_s)
        text = line[0] if line else ""
        if not text.startswith(self.ready_prefix):
            try:  # its output ended: it is exiting
                code = self.process.wait(2) if ended.is_set() else self.process.poll()
            except subprocess.TimeoutExpired:
                code = None
            self.stop()
            why = (
                f"it exited with code {code}" if code is not None else f"it did not start within {self.timeout_s:.0f} s"
            )
            raise RuntimeError(f"{self.what}: {why} (its log: {self.log}){'; ' + self.hint if self.hint else ''}")
        self.url = text[len(self.ready_prefix) :]
        return self.url

    def stop(self) -> None:
        """Close its stdin (it stops), wait up to 10 s, then kill it."""
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None
        self.url = ""


def watch_parent(stop: object) -> None:
    """In the child: call ``stop()`` when stdin closes (the parent ended, however it ended)."""

    def watch() -> None:
        while sys.stdin.buffer.read(1):
            pass
        stop()  # type: ignore[operator]

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()
