"""A watched process group ends with the process that started it, however that process ends: its
command's own children too, and a process that ignores SIGTERM after the grace period."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

#: A parent that starts, in a watched group, a shell with two children in the background: one that
#: stops on SIGTERM and one that ignores it. It prints the group's id and waits to be killed, or
#: (with "end") lets the shell end on its own, leaving its two children behind, and closes the group.
PARENT = textwrap.dedent(
    """
    import sys, time
    from ctxwin_dagster.runner.processes import WatchedGroup

    group = WatchedGroup(grace_s=2)
    last = "sleep 1" if sys.argv[1] == "end" else "sleep 300"
    shell = group.start(["sh", "-c", "sleep 300 & (trap '' TERM; sleep 300) & " + last])
    print(group.watchdog.pid, flush=True)
    if sys.argv[1] == "end":
        shell.wait()
        group.close()
        print("closed", flush=True)
    time.sleep(300)
    """
)


def _members(pgid: int) -> list[str]:
    """The running processes of group ``pgid`` (a zombie, ended but not yet reaped, does not count)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(stat.parent.name)
    return found


def _gone_within(pgid: int, seconds: float) -> list[str]:
    deadline = time.time() + seconds
    while time.time() < deadline and _members(pgid):
        time.sleep(0.2)
    return _members(pgid)


@pytest.mark.parametrize("how", ["kill -9", "end"])
def test_the_group_ends_with_the_process_that_started_it(how):
    root = Path(__file__).resolve().parents[2]
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, how], cwd=root, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    pgid = 0
    try:
        pgid = int(parent.stdout.readline())  # type: ignore[union-attr]
        if how == "end":
            assert parent.stdout.readline().strip() == "closed"  # type: ignore[union-attr]
        else:
            deadline = time.time() + 60
            while time.time() < deadline and len(_members(pgid)) < 4:
                time.sleep(0.2)
            assert len(_members(pgid)) >= 4  # the watchdog, the shell and its two children
            parent.kill()
        assert not _gone_within(pgid, 60), f"processes of the group left running: {_members(pgid)}"
    finally:
        parent.kill()
        parent.wait(10)
        if pgid and _members(pgid):
            os.killpg(pgid, signal.SIGKILL)
