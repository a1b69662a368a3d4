"""A process tree that ends with the command that started it, however that command ends.

``ctxwin dev`` starts ``dg dev``, which starts the webserver and the daemon, which start code
servers and runs: a tree that a signal to one process does not reach. :class:`WatchedGroup` runs
such a command in a process group of its own, together with a small watchdog process that holds
a pipe from the command that started it. When that command ends — normally, on SIGTERM, or on
``kill -9``, which no handler sees — the pipe closes, and the watchdog sends SIGTERM to every
process of the group (Dagster's processes stop cleanly on it), waits for them, and kills with
SIGKILL those still running after a grace period. None of Dagster's processes leaves the group
(none of them starts a new session), so nothing of the tree is left running.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import IO, Any, TextIO

#: The daemon's lines of a sensor tick that found nothing to do: two a tick for each sensor.
_IDLE_TICK = re.compile(
    r"SensorDaemon - \S*INFO\S* - "
    r"(Checking for new runs for sensor: |Sensor \S+ skipped: |No run requests returned for \S+, skipping)"
)


def is_idle_tick(line: str) -> bool:
    """Whether ``line`` is the daemon saying a sensor ticked and found nothing to do.

    >>> daemon = "2026-11-28 03:15:46 +0000 - dagster.daemon.SensorDaemon - INFO - "
    >>> is_idle_tick(daemon + "Sensor ctxwin_command_runs skipped: no ctxwin command is waiting for runs")
    True
    >>> is_idle_tick(daemon + "Launching run for ctxwin_command_runs")
    False
    """
    return bool(_IDLE_TICK.search(line))


#: Run before a child's own code, in its process: the kernel sends it SIGTERM when the command
#: that started it dies, however it dies (kill -9 included), so no daemon or code server is left
#: orphaned. (A ``preexec_fn`` would do the same but makes Python fork the whole command, LanceDB's
#: runtime included.) SIGINT gets its default action back before the child starts: a command
#: started in the background by a shell, or by a CI runner, inherits SIGINT ignored, and a Dagster
#: code server maps SIGTERM to its SIGINT handler, so with SIGINT ignored it ignored SIGTERM too
#: and waited out the 30 s grace period for SIGKILL at the end of every command.
_EXEC_WITH_PARENT_DEATH = (
    "import ctypes, os, signal, sys\n"
    "try:\n    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)\n"
    "except OSError:\n    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n    sys.exit(0)\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death(cmd: Sequence[str]) -> list[str]:
    """``cmd`` (its first item an executable's path) run so that it gets SIGTERM when this
    process dies (Linux; elsewhere it runs as it is)."""
    import os

    exe = cmd[0] if os.path.isabs(cmd[0]) else (shutil.which(cmd[0]) or cmd[0])
    return [sys.executable, "-c", _EXEC_WITH_PARENT_DEATH, str(os.getpid()), exe, *cmd[1:]]


def stop_process(process: subprocess.Popen, sig: int, *, grace_s: float = 30.0) -> None:
    """Send ``sig`` to ``process`` and wait for it; SIGKILL when it still runs after ``grace_s``."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def forward_output(stream: IO[bytes], out: TextIO, *, drop: Callable[[str], bool]) -> threading.Thread:
    """Copy ``stream`` to ``out`` line by line in a thread, leaving out the lines ``drop`` names."""

    def copy() -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            if not drop(line):
                out.write(line)
                out.flush()

    thread = threading.Thread(target=copy, name="forward-output", daemon=True)
    thread.start()
    return thread


#: The watchdog: ignores the signals meant for the command, waits for the end of its stdin (the
#: pipe from the command that started it), then ends the rest of its process group. The processes
#: of the group are read from /proc (Linux); without it, the group has the grace period to stop.
_WATCHDOG = """\
import os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
group, grace = os.getpgrp(), float(sys.argv[1])
sys.stdin.buffer.read()
def others():
    try:
        names = os.listdir('/proc')
    except OSError:
        return True
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open('/proc/' + name + '/stat', encoding='utf-8', errors='replace') as fh:
                state, _, pgrp = fh.read().rsplit(')', 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(pgrp) == group and state != 'Z':
            return True
    return False
if others():
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while others() and time.monotonic() < deadline:
        time.sleep(0.2)
    if others():
        os.killpg(group, signal.SIGKILL)
"""


class WatchedGroup(AbstractContextManager):
    """Run ``cmd`` in a new process group that a watchdog ends when this process ends.

    The watchdog starts first, as the group's leader (so the group's id stays taken while any of
    its processes runs), then ``cmd`` joins the group: a command killed between the two leaves no
    process behind. Leaving the ``with`` block (or :meth:`close`) closes the pipe, so the
    watchdog also ends whatever ``cmd`` left running after it ended.

    Args:
        grace_s: how long the group's processes have to stop on SIGTERM before SIGKILL.
    """

    def __init__(self, *, grace_s: float = 30.0) -> None:
        self.grace_s = grace_s
        self.watchdog: subprocess.Popen | None = None

    def start(self, cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
        """Start ``cmd`` in the watched group (``popen``: further arguments of :class:`subprocess.Popen`)."""
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(self.grace_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            process_group=0,
        )
        return subprocess.Popen(cmd, process_group=self.watchdog.pid, **popen)

    def close(self) -> None:
        """Let the watchdog end what is left of the group, and wait for it."""
        if self.watchdog is None:
            return
        if self.watchdog.stdin is not None:
            self.watchdog.stdin.close()
        try:
            self.watchdog.wait(self.grace_s + 10)
        except subprocess.TimeoutExpired:  # pragma: no cover - the watchdog ends itself within the grace period
            self.watchdog.kill()
            self.watchdog.wait()
        self.watchdog = None

    def __exit__(self, *exc: object) -> None:
        self.close()
