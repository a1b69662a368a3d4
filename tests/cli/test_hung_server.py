"""A chat server that takes connections and never answers, through the real commands: `ctxwin ask`
fails within the experiment's deadline saying no reply came, and `ctxwin run` stops at its check
of the endpoint, before any run, saying the same."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwin_dagster.testing import FakeOpenAIServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: Each command must end well before this (a guard against a hang, not a measure of speed).
HANG_GUARD_S = 300


def _ctxwin(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ctxwin_dagster.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


def test_ctxwin_ask_fails_within_the_deadline_saying_no_reply_came(workspace, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CTXWIN_ASK_SERVER_IDLE": "120"}
    env.pop("CTXWIN_ASK_SERVER", None)
    question = ("Who was the Norse leader?", "--doc", "squad_Normans", "--dagster-home", str(home))
    options = ("--cache-dir", str(tmp_path / "cache"))
    with FakeOpenAIServer(silent=True) as server:
        experiment = {
            "name": "hung",
            "documents_dir": str(workspace["documents"]),
            "lancedb_uri": str(workspace["lancedb"]),
            "answerer": {"model": "m", "base_url": server.base_url, "timeout_s": 1, "deadline_s": 3},
        }
        (home / "ctxwin_experiment.json").write_text(json.dumps(experiment), encoding="utf-8")
        try:
            for where in ((), ("--no-server",)):  # the experiment's ask server, and this process
                out = _ctxwin("ask", *question, *options, *where, cwd=tmp_path, env=env)
                assert out.returncode != 0, out.stdout
                said = out.stderr
                assert f"no reply within 1 s (read timeout) from the chat server at {server.base_url}" in said, said
                assert "gave up after the 3 s deadline (" in said and "cannot reach" not in said, said
                assert "Traceback" not in said
        finally:
            _ctxwin("ask", "--stop-server", "--dagster-home", str(home), *options, cwd=tmp_path, env=env)


def test_ctxwin_run_stops_at_the_check_of_a_server_that_never_answers(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "data" / "documents" / "squad_Normans.txt", tmp_path / "docs")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(tmp_path / "home")}
    with FakeOpenAIServer(silent=True) as server:
        out = _ctxwin(
            "run", "--documents", "docs", "--model", "m", "--base-url", server.base_url, cwd=tmp_path, env=env
        )
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, out.stderr
    assert errors[0].startswith(
        f"ctxwin: contextualizer: no reply within 10 s (read timeout) from {server.base_url} to GET /models"
    )
    assert errors[0].endswith("nothing was run") and "cannot reach" not in errors[0]
    assert not (tmp_path / "home" / "ctxwin-daemon.log").exists()
