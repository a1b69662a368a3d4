"""The one code server of a ``ctxwin`` command (runner/code_server.py): which workspaces it
serves, and a real ``dagster api grpc`` started on a small definitions module, listened to,
and stopped."""

from __future__ import annotations

import doctest
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwin_dagster.runner import code_server
from ctxwin_dagster.runner.code_server import CodeServer, ServedTarget, remove_orphaned_folders, served_target

DEFS = """\
import dagster as dg

@dg.asset
def one() -> int:
    return 1

defs = dg.Definitions(assets=[one])
"""


def test_module_examples() -> None:
    assert doctest.testmod(code_server).failed == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("load_from:\n  - python_module: pkg.defs\n", ("pkg.defs", "pkg.defs", ".")),
        (
            "load_from:\n  - python_module:\n      module_name: m\n      location_name: ctxwin\n      working_directory: sub\n",
            ("m", "ctxwin", "sub"),
        ),
        # anything but one python_module is left to the daemon
        ("load_from:\n  - python_module: a\n  - python_module: b\n", None),
        ("load_from:\n  - grpc_server:\n      host: localhost\n      port: 4000\n", None),
        ("load_from:\n  - python_module:\n      module_name: m\n      package_name: p\n", None),
        ("not: [a workspace\n", None),
    ],
)
def test_only_a_workspace_of_one_python_module_is_served(tmp_path, text, expected) -> None:
    (tmp_path / "sub").mkdir()
    ws = tmp_path / "workspace.yaml"
    ws.write_text(text, encoding="utf-8")
    target = served_target(ws)
    if expected is None:
        assert target is None
        return
    assert target is not None
    module, location, folder = expected
    assert (target.module_name, target.location_name) == (module, location)
    assert target.working_directory == str((tmp_path / folder).resolve())


def test_a_missing_workspace_is_not_served(tmp_path) -> None:
    assert served_target(tmp_path / "workspace.yaml") is None


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def test_the_server_listens_on_its_socket_until_stopped_and_leaves_nothing(tmp_path) -> None:
    (tmp_path / "small_defs.py").write_text(DEFS, encoding="utf-8")
    server = CodeServer(
        ServedTarget("small_defs", "ctxwin", str(tmp_path)), log=tmp_path / "home" / "code.log", env=dict(os.environ)
    )
    workspace = server.start()
    try:
        sock = server.socket_path
        assert _connects(sock)
        assert len(str(sock)) < 108  # a Unix socket's path limit, whatever the home's length
        text = workspace.read_text(encoding="utf-8")
        assert "grpc_server:" in text and f"socket: {sock}" in text and "location_name: ctxwin" in text
        # Dagster reads the file as a workspace of that one server.
        check = subprocess.run(
            [sys.executable, "-m", "dagster", "definitions", "validate", "-w", str(workspace)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "DAGSTER_HOME": str(tmp_path / "home")},
        )
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
        process = server.process
        assert process is not None and process.poll() is None
    finally:
        server.stop()
    assert process.poll() is not None
    assert not sock.parent.exists()


def test_a_command_started_with_sigint_ignored_stops_its_server_with_sigterm_not_sigkill(tmp_path) -> None:
    # A command started in the background by a script (or by a CI runner) inherits SIGINT
    # ignored. Dagster's code server maps SIGTERM to its SIGINT handler, so it must start with
    # SIGINT at its default, or it ignores SIGTERM and is killed after the 30 s grace period.
    (tmp_path / "small_defs.py").write_text(DEFS, encoding="utf-8")
    server = CodeServer(
        ServedTarget("small_defs", "ctxwin", str(tmp_path)), log=tmp_path / "home" / "code.log", env=dict(os.environ)
    )
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        server.start()
    finally:
        signal.signal(signal.SIGINT, before)
    process = server.process
    try:
        assert process is not None
        status = Path(f"/proc/{process.pid}/status").read_text().splitlines()
        ignored = int(next(x for x in status if x.startswith("SigIgn:")).split()[1], 16)
        assert not ignored & (1 << (signal.SIGINT - 1))
    finally:
        server.stop()  # a failed check leaves no server behind
    assert process.returncode != -signal.SIGKILL


def test_definitions_that_do_not_load_stop_the_start_naming_the_log(tmp_path) -> None:
    (tmp_path / "broken_defs.py").write_text("raise ImportError('a broken module')\n", encoding="utf-8")
    log = tmp_path / "code.log"
    server = CodeServer(ServedTarget("broken_defs", "ctxwin", str(tmp_path)), log=log)
    with pytest.raises(RuntimeError, match="stopped") as raised:
        server.start()
    assert str(log) in str(raised.value)
    assert "a broken module" in log.read_text(encoding="utf-8")
    assert server.folder is None


def test_the_socket_folder_of_a_killed_command_is_removed_by_the_next_and_a_live_ones_is_kept(tmp_path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphan = tmp_path / f"ctxwin-code-{gone.pid}-abc"
    live = tmp_path / f"ctxwin-code-{os.getpid()}-def"
    other = tmp_path / "ctxwin-code-notapid-x"
    for folder in (orphan, live, other):
        folder.mkdir()
        (folder / "workspace.yaml").write_text("load_from: []\n", encoding="utf-8")
    assert remove_orphaned_folders(tmp_path) == [orphan]
    assert not orphan.exists() and live.is_dir() and other.is_dir()
