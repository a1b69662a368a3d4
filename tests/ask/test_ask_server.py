"""The ask server, through the real command: `ctxwin ask` as a subprocess starts it, later asks
use it, it sees a new index version, refuses requests without its token, and stops when told."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CTXWIN_ASK_SERVER"}
    return {**env, "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(tmp_path / "home"), "CTXWIN_ASK_SERVER_IDLE": "300"}


def _ask(workspace, cache: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwin_dagster.cli",
            "ask",
            *args,
            "--lancedb",
            str(workspace["lancedb"]),
            "--documents",
            str(workspace["documents"]),
            "--cache-dir",
            str(cache),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_ask_server_is_started_used_refreshed_and_stopped(workspace, index_more, tmp_path):
    cache = tmp_path / "cache"
    env = _env(tmp_path)
    question = ("Who was the Norse leader?", "--doc", "squad_Normans", "--json")
    pid = None
    try:
        first = _ask(workspace, cache, env, *question)
        assert first.returncode == 0, first.stderr
        (state_file,) = (cache / "ask-servers").glob("*.json")
        state = json.loads(state_file.read_text())
        pid = state["pid"]
        assert _alive(pid) and oct(state_file.stat().st_mode & 0o777) == "0o600"
        answer = json.loads(first.stdout)
        assert not answer["not_found"] and answer["citations"]

        # the same answer as in the command's own process
        here = _ask(workspace, cache, env, *question, "--no-server")
        assert here.returncode == 0, here.stderr
        local = json.loads(here.stdout)
        assert (local["answer"], local["citations"]) == (answer["answer"], answer["citations"])

        # a second command uses the running server
        second = _ask(workspace, cache, env, *question)
        assert second.returncode == 0 and json.loads(second.stdout)["answer"] == answer["answer"]
        assert json.loads(state_file.read_text())["pid"] == pid

        # a document indexed after the server opened the index is found (a new table version)
        q2 = ("When was the co-branding agreement entered into?", "--doc", "cuad_paperexchange_cobranding", "--json")
        before = _ask(workspace, cache, env, *q2)
        assert before.returncode != 0 and "cuad_paperexchange_cobranding" in before.stderr
        index_more(workspace, ["cuad_paperexchange_cobranding"])
        new = _ask(workspace, cache, env, *q2)
        assert new.returncode == 0, new.stderr
        windows = json.loads(new.stdout)["windows"]
        assert windows and {w["doc_id"] for w in windows} == {"cuad_paperexchange_cobranding"}
        assert json.loads(state_file.read_text())["pid"] == pid

        # a request without the token is refused
        req = urllib.request.Request(f"http://127.0.0.1:{state['port']}/health")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=5)
        assert refused.value.code == 401

        stopped = _ask(workspace, cache, env, "--stop-server")
        assert stopped.returncode == 0 and f"pid {pid}" in stopped.stderr
        for _ in range(100):
            if not _alive(pid) and not state_file.exists():
                break
            time.sleep(0.1)
        assert not _alive(pid) and not state_file.exists()
        assert "no ask server runs" in _ask(workspace, cache, env, "--stop-server").stderr
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, 15)


def test_off_in_the_environment_answers_in_process(workspace, tmp_path):
    env = {**_env(tmp_path), "CTXWIN_ASK_SERVER": "off"}
    done = _ask(workspace, tmp_path / "cache", env, "Who was the Norse leader?", "--doc", "squad_Normans")
    assert done.returncode == 0 and "Answer (" in done.stdout
    assert not (tmp_path / "cache" / "ask-servers").exists()


def test_a_cache_folder_that_cannot_be_written_means_no_server_and_says_so(tmp_path):
    import io

    from ctxwin_dagster.ask import server
    from ctxwin_dagster.ask.session import AskerSpec

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    spec = AskerSpec(str(tmp_path / "lancedb"), None, None, None, str(blocker), None, "{}", None)
    said = io.StringIO()
    assert server.start(spec, log=said) is None and server.find(spec) is None
    assert "answering in this process" in said.getvalue() and str(blocker) in said.getvalue()
